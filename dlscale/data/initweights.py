"""One seeded initialisation per model, the same bytes in every framework.

Every framework initialises weights with its own defaults and random generator, so two
frameworks never start from the same point and their losses cannot be compared step by
step. With ``init: shared`` (the run spec's ``init``) every runner loads these arrays
instead, converting them into its own layout, and the parity check
(``dlscale.analysis.parity``) can demand that the first iterations' losses agree.

The canonical layout is Caffe's and torch's: a convolution's weight is
``(out, in, kh, kw)``, a fully connected layer's ``(out, in)``, and the features that a
convolution stack hands to the first fully connected layer are flattened in ``(C, H, W)``
order (a channels-last framework, TensorFlow, must permute that layer's input axis:
``dense_kernel``). Biases start at zero. Weights are drawn uniform in
``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` (torch's default bound for linear layers) from one
numpy PCG64 stream per (model, seed), layer by layer in the order listed, so the arrays do
not depend on the framework, the numpy version's other generators or the host. numpy only:
every framework's venv imports it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import numpy as np

#: Per model: (parameter name, canonical shape), in the order they are drawn. Only models
#: the parity check covers; others raise KeyError naming these.
LAYOUTS: Mapping[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
    "lenet": (
        ("conv1.weight", (20, 1, 5, 5)),
        ("conv1.bias", (20,)),
        ("conv2.weight", (50, 20, 5, 5)),
        ("conv2.bias", (50,)),
        ("fc1.weight", (500, 800)),
        ("fc1.bias", (500,)),
        ("fc2.weight", (10, 500)),
        ("fc2.bias", (10,)),
    ),
    "autoencoder": tuple(
        item
        for i, (fan_in, fan_out) in enumerate(
            zip(
                (784, 1000, 500, 250, 30, 250, 500, 1000),
                (1000, 500, 250, 30, 250, 500, 1000, 784),
                strict=True,
            )
        )
        for item in (
            (f"{'enc' if i < 4 else 'dec'}{i % 4 + 1}.weight", (fan_out, fan_in)),
            (f"{'enc' if i < 4 else 'dec'}{i % 4 + 1}.bias", (fan_out,)),
        )
    ),
}

#: LeNet's first fully connected layer sees the second convolution's (C, H, W) = (50, 4, 4).
LENET_FC1_INPUT: tuple[int, int, int] = (50, 4, 4)

#: Salt of each model's stream, so two models with the same seed do not share numbers.
_MODEL_SALT = {"lenet": 1, "autoencoder": 2}


def initial_weights(model: str, seed: int) -> dict[str, np.ndarray]:
    """The shared initial parameters of ``model`` for ``seed``, canonical layout, float32."""
    try:
        layout = LAYOUTS[model]
    except KeyError:
        raise KeyError(f"no shared initialisation for {model!r} (models: {', '.join(LAYOUTS)})") from None
    rng = np.random.Generator(np.random.PCG64([seed, _MODEL_SALT[model]]))
    out: dict[str, np.ndarray] = {}
    for name, shape in layout:
        if name.endswith(".bias"):
            out[name] = np.zeros(shape, dtype=np.float32)
            continue
        fan_in = int(np.prod(shape[1:]))
        bound = 1.0 / math.sqrt(fan_in)
        out[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    return out


def digest(weights: Mapping[str, np.ndarray]) -> str:
    """sha256 over the arrays (names, shapes and float32 bytes, in order): what a runner
    records so that the parity check can see every framework started from the same bytes."""
    h = hashlib.sha256()
    for name, array in weights.items():
        h.update(name.encode())
        h.update(str(tuple(array.shape)).encode())
        h.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return h.hexdigest()


def dense_kernel(weight: np.ndarray, chw: tuple[int, int, int] | None = None) -> np.ndarray:
    """A canonical ``(out, in)`` weight as a channels-last framework's ``(in, out)`` kernel.

    ``chw``: the (C, H, W) of a convolution stack's output that the layer flattens; the
    input axis is then reordered from (C, H, W) to (H, W, C) as NHWC flattens it.
    """
    kernel = np.asarray(weight, dtype=np.float32)
    if chw is not None:
        c, h, w = chw
        kernel = kernel.reshape(kernel.shape[0], c, h, w).transpose(0, 2, 3, 1).reshape(kernel.shape[0], -1)
    return np.ascontiguousarray(kernel.T)


def conv_hwio(weight: np.ndarray) -> np.ndarray:
    """A canonical ``(out, in, kh, kw)`` convolution weight as ``(kh, kw, in, out)``."""
    return np.ascontiguousarray(np.asarray(weight, dtype=np.float32).transpose(2, 3, 1, 0))
