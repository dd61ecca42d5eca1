"""The study's MNIST-sized models in JAX, written with ``jax.numpy`` and ``jax.lax`` alone.

No flax: a model here is its parameter layout (name -> shape, in the canonical order of
``dlscale.data.initweights.LAYOUTS``) and one pure function ``apply(params, x)``; the
step keeps the parameters as one flat float32 vector (``Layout.unflatten`` inside the
jitted functions), so the gradient leaves in one buffer for one all-reduce, as torch's
flat gradient does. Layout: channels-last, as XLA's CPU convolutions take it (NHWC
input, HWIO convolution kernels, ``(in, out)`` dense kernels); ``init: shared`` converts
the canonical arrays into it (``load_shared``). AlexNet and ResNet-50 are not written
here: a run of them fails at once, naming the models this runner has.
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


def _conv(params: Mapping[str, Any], name: str, x: Any) -> Any:
    y = jax.lax.conv_general_dilated(
        x, params[f"{name}.weight"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return y + params[f"{name}.bias"]


def _max_pool_2x2(x: Any) -> Any:
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def lenet(params: Mapping[str, Any], x: Any) -> Any:
    """Caffe's MNIST LeNet: conv20-pool-conv50-pool-ip500-relu-ip10 (431,080 parameters);
    ``x`` NHWC, flattened in (H, W, C) order (``load_shared`` reorders fc1's inputs)."""
    y = _max_pool_2x2(_conv(params, "conv1", x))
    y = _max_pool_2x2(_conv(params, "conv2", y))
    y = jax.nn.relu(_dense(params, "fc1", y.reshape(y.shape[0], -1)))
    return _dense(params, "fc2", y)


AUTOENCODER_SIZES = (784, 1000, 500, 250, 30)


def autoencoder(params: Mapping[str, Any], x: Any) -> Any:
    """Caffe's mnist_autoencoder: 784-1000-500-250-30 and back, sigmoid units, a linear
    30-unit code and logits out (2,837,314 parameters)."""
    y = x.reshape(x.shape[0], -1)
    for part in ("enc", "dec"):
        for i in range(1, 5):
            y = _dense(params, f"{part}{i}", y)
            if i < 4:
                y = jax.nn.sigmoid(y)
    return y


def _jax_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A canonical shape in this runner's layout: conv (kh, kw, in, out), dense (in, out)."""
    if len(shape) == 4:
        out, inp, kh, kw = shape
        return (kh, kw, inp, out)
    if len(shape) == 2:
        return (shape[1], shape[0])
    return shape


#: model -> (layout, apply): the catalog's MNIST-sized models (the runner tests check the
#: parameter counts against the catalog).
MODELS: Mapping[str, tuple[Layout, Callable[[Mapping[str, Any], Any], Any]]] = {
    name: (Layout(tuple((n, _jax_shape(n, s)) for n, s in initweights.LAYOUTS[name])), fn)
    for name, fn in (("lenet", lenet), ("autoencoder", autoencoder))
}


def model(name: str) -> tuple[Layout, Callable[[Mapping[str, Any], Any], Any]]:
    """The study model ``name`` as (layout, apply); a clear error for the ones not written."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"the jax runner has no model {name!r} (it has: {', '.join(MODELS)})") from None


def parameter_count(name: str) -> int:
    return model(name)[0].size


def framework_init(name: str, seed: int) -> np.ndarray:
    """``init: framework``: torch's default draw (U(+-1/sqrt(fan_in)) for weights and biases,
    by JAX's own generator), as a flat vector."""
    layout = model(name)[0]
    key = jax.random.key(seed)
    arrays: dict[str, np.ndarray] = {}
    fan_in = 1
    for (pname, shape), sub in zip(layout.shapes, jax.random.split(key, len(layout.shapes)), strict=True):
        if pname.endswith(".weight"):
            fan_in = math.prod(shape[:-1])  # HWIO / (in, out): every axis but the last
        bound = 1.0 / math.sqrt(fan_in)
        arrays[pname] = np.asarray(jax.random.uniform(sub, shape, jnp.float32, -bound, bound))
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
