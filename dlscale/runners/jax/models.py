"""The study's models in JAX, written with ``jax.numpy`` and ``jax.lax`` alone.

No flax: a model here is its parameter layout (name -> shape, LeNet's and the AutoEncoder's
in the canonical order of ``dlscale.data.initweights.LAYOUTS``) and one pure function
``apply(params, x, key)`` (``key``: dropout's randomness in training, None in inference); the
step keeps the parameters as one flat float32 vector (``Layout.unflatten`` inside the
jitted functions), so the gradient leaves in one buffer for one all-reduce, as torch's
flat gradient does. Layout: channels-last, as XLA's CPU convolutions take it (NHWC
input, HWIO convolution kernels, ``(in, out)`` dense kernels); ``init: shared`` converts
the canonical arrays into it (``load_shared``; LeNet and the AutoEncoder, the models the
parity check covers). AlexNet is written as torchvision's; ResNet-50 (batch norm's running
statistics) is not: a run of it fails at once, naming the models this runner has.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dlscale.data import initweights


@dataclass(frozen=True)
class Layout:
    """A model's parameters in this runner's layout: (name, shape) in canonical order."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def size(self) -> int:
        return sum(math.prod(shape) for _, shape in self.shapes)

    def unflatten(self, flat: Any) -> dict[str, Any]:
        """Name -> array views of the flat parameter vector (inside a jitted function)."""
        out, offset = {}, 0
        for name, shape in self.shapes:
            n = math.prod(shape)
            out[name] = flat[offset : offset + n].reshape(shape)
            offset += n
        return out

    def flatten(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        """The flat float32 vector of ``arrays`` (this layout's shapes, checked one by one)."""
        parts = []
        for name, shape in self.shapes:
            array = np.asarray(arrays[name], dtype=np.float32)
            if array.shape != shape:
                raise ValueError(f"{name} is {array.shape}, this runner's layout {shape}")
            parts.append(array.reshape(-1))
        return np.concatenate(parts)


def _dense(params: Mapping[str, Any], name: str, x: Any) -> Any:
    return x @ params[f"{name}.weight"] + params[f"{name}.bias"]


def _conv(params: Mapping[str, Any], name: str, x: Any, stride: int = 1, padding: int = 0) -> Any:
    y = jax.lax.conv_general_dilated(
        x,
        params[f"{name}.weight"],
        (stride, stride),
        [(padding, padding)] * 2,
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    return y + params[f"{name}.bias"]


def _max_pool(x: Any, size: int, stride: int) -> Any:
    """torch's MaxPool2d(size, stride): no padding, the last partial window dropped."""
    return jax.lax.reduce_window(
        x, -jnp.inf, jax.lax.max, (1, size, size, 1), (1, stride, stride, 1), "VALID"
    )


def _max_pool_2x2(x: Any) -> Any:
    return _max_pool(x, 2, 2)


def _dropout(x: Any, key: Any, rate: float = 0.5) -> Any:
    """Inverted dropout in training (``key`` given), the identity in inference (None)."""
    if key is None:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def lenet(params: Mapping[str, Any], x: Any, key: Any = None) -> Any:
    """Caffe's MNIST LeNet: conv20-pool-conv50-pool-ip500-relu-ip10 (431,080 parameters);
    ``x`` NHWC, flattened in (H, W, C) order (``load_shared`` reorders fc1's inputs)."""
    y = _max_pool_2x2(_conv(params, "conv1", x))
    y = _max_pool_2x2(_conv(params, "conv2", y))
    y = jax.nn.relu(_dense(params, "fc1", y.reshape(y.shape[0], -1)))
    return _dense(params, "fc2", y)


AUTOENCODER_SIZES = (784, 1000, 500, 250, 30)


def autoencoder(params: Mapping[str, Any], x: Any, key: Any = None) -> Any:
    """Caffe's mnist_autoencoder: 784-1000-500-250-30 and back, sigmoid units, a linear
    30-unit code and logits out (2,837,314 parameters)."""
    y = x.reshape(x.shape[0], -1)
    for part in ("enc", "dec"):
        for i in range(1, 5):
            y = _dense(params, f"{part}{i}", y)
            if i < 4:
                y = jax.nn.sigmoid(y)
    return y


#: AlexNet as torchvision defines it (single tower): (name, kernel size, in, out, stride,
#: padding) of each convolution, then the dense layers' (name, in, out).
ALEXNET_CONVS = (
    ("conv1", 11, 3, 64, 4, 2),
    ("conv2", 5, 64, 192, 1, 2),
    ("conv3", 3, 192, 384, 1, 1),
    ("conv4", 3, 384, 256, 1, 1),
    ("conv5", 3, 256, 256, 1, 1),
)
ALEXNET_DENSE = (("fc1", 256 * 6 * 6, 4096), ("fc2", 4096, 4096), ("fc3", 4096, 1000))


def alexnet(params: Mapping[str, Any], x: Any, key: Any = None) -> Any:
    """AlexNet (61,100,840 parameters): five convolutions, max pools after the first, second
    and fifth, the 6 x 6 average pool (the identity at 224 x 224: only that size is taken),
    and three dense layers with dropout 0.5 before the first two (``key``: training)."""
    y = x
    for name, _, _, _, stride, padding in ALEXNET_CONVS:
        y = jax.nn.relu(_conv(params, name, y, stride, padding))
        if name in ("conv1", "conv2", "conv5"):
            y = _max_pool(y, 3, 2)
    if y.shape[1:3] != (6, 6):
        raise ValueError(
            f"AlexNet's features are {y.shape[1:3]}, not 6 x 6: the jax runner takes 224 x 224 crops"
        )
    y = y.reshape(y.shape[0], -1)
    keys = jax.random.split(key, 2) if key is not None else (None, None)
    y = jax.nn.relu(_dense(params, "fc1", _dropout(y, keys[0])))
    y = jax.nn.relu(_dense(params, "fc2", _dropout(y, keys[1])))
    return _dense(params, "fc3", y)


ALEXNET_LAYOUT = Layout(
    tuple(
        item
        for name, k, cin, cout, _, _ in ALEXNET_CONVS
        for item in ((f"{name}.weight", (k, k, cin, cout)), (f"{name}.bias", (cout,)))
    )
    + tuple(
        item
        for name, cin, cout in ALEXNET_DENSE
        for item in ((f"{name}.weight", (cin, cout)), (f"{name}.bias", (cout,)))
    )
)


def _jax_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A canonical shape in this runner's layout: conv (kh, kw, in, out), dense (in, out)."""
    if len(shape) == 4:
        out, inp, kh, kw = shape
        return (kh, kw, inp, out)
    if len(shape) == 2:
        return (shape[1], shape[0])
    return shape


#: model -> (layout, apply(params, x, key)): the catalog's models this runner has (the runner
#: tests check the parameter counts against the catalog). ``key`` is a PRNG key in training
#: (AlexNet's dropout), None in inference.
MODELS: Mapping[str, tuple[Layout, Callable[..., Any]]] = {
    **{
        name: (Layout(tuple((n, _jax_shape(n, s)) for n, s in initweights.LAYOUTS[name])), fn)
        for name, fn in (("lenet", lenet), ("autoencoder", autoencoder))
    },
    "alexnet": (ALEXNET_LAYOUT, alexnet),
}


def model(name: str) -> tuple[Layout, Callable[..., Any]]:
    """The study model ``name`` as (layout, apply); a clear error for the ones not written."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"the jax runner has no model {name!r} (it has: {', '.join(MODELS)})") from None


def parameter_count(name: str) -> int:
    return model(name)[0].size


def framework_init(name: str, seed: int) -> np.ndarray:
    """``init: framework``: torch's default draw (U(+-1/sqrt(fan_in)) for weights and biases,
    by numpy's generator, seeded), as a flat vector."""
    layout = model(name)[0]
    rng = np.random.Generator(np.random.PCG64(seed))
    arrays: dict[str, np.ndarray] = {}
    fan_in = 1
    for pname, shape in layout.shapes:
        if pname.endswith(".weight"):
            fan_in = math.prod(shape[:-1])  # HWIO / (in, out): every axis but the last
        bound = 1.0 / math.sqrt(fan_in)
        arrays[pname] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    return layout.flatten(arrays)


def load_shared(name: str, seed: int) -> tuple[np.ndarray, str]:
    """``init: shared``: the canonical arrays of ``dlscale.data.initweights`` in this runner's
    layout (convolutions HWIO, dense kernels (in, out), LeNet's fc1 inputs reordered from the
    canonical (C, H, W) flattening to NHWC's (H, W, C)), as a flat vector, and their digest."""
    weights = initweights.initial_weights(name, seed)
    arrays: dict[str, np.ndarray] = {}
    for pname, weight in weights.items():
        if weight.ndim == 4:
            arrays[pname] = initweights.conv_hwio(weight)
        elif weight.ndim == 2:
            chw = initweights.LENET_FC1_INPUT if (name, pname) == ("lenet", "fc1.weight") else None
            arrays[pname] = initweights.dense_kernel(weight, chw)
        else:
            arrays[pname] = weight
    return model(name)[0].flatten(arrays), initweights.digest(weights)
