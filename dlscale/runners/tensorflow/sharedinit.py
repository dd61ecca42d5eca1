"""``init: shared``: the Keras models start from ``dlscale.data.initweights``' arrays.

Every framework draws its initial weights with its own defaults (Keras: Glorot uniform),
so no two start from the same point; with the run spec's ``init: shared`` every rank
loads the one seeded initialisation instead, converted from the canonical layout into
Keras' channels-last one: a convolution's ``(out, in, kh, kw)`` becomes ``(kh, kw, in,
out)`` (``initweights.conv_hwio``), a dense ``(out, in)`` becomes ``(in, out)``
(``initweights.dense_kernel``), LeNet's first dense layer's input axis reordered from the
canonical (C, H, W) flattening to NHWC's (H, W, C). Keras lists a model's trainable
variables layer by layer, kernel then bias, which is the canonical order; shapes are
checked one by one, so a layout that stops matching fails loudly instead of training
from a scrambled start. The digest of the canonical arrays is what the run records
(``init_sha256``), the same in every framework that loaded them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.data import initweights


def keras_arrays(model_name: str, weights: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The canonical ``weights`` of ``model_name`` in Keras' layout and variable order."""
    arrays = []
    for name, weight in weights.items():
        if weight.ndim == 4:
            arrays.append(initweights.conv_hwio(weight))
        elif weight.ndim == 2:
            chw = initweights.LENET_FC1_INPUT if (model_name, name) == ("lenet", "fc1.weight") else None
            arrays.append(initweights.dense_kernel(weight, chw))
        else:
            arrays.append(np.ascontiguousarray(weight, dtype=np.float32))
    return arrays


def load(model: Any, model_name: str, seed: int) -> str:
    """Assign the shared initialisation of ``model_name`` for ``seed`` to the Keras
    ``model``'s trainable variables (wherever they live); return its ``initweights.digest``."""
    weights = initweights.initial_weights(model_name, seed)
    arrays = keras_arrays(model_name, weights)
    variables = list(model.trainable_variables)
    if len(variables) != len(arrays):
        raise ValueError(
            f"{model_name}: {len(variables)} trainable variables, the shared initialisation has {len(arrays)}"
        )
    for var, array, name in zip(variables, arrays, weights, strict=True):
        if tuple(var.shape) != array.shape:
            raise ValueError(
                f"{model_name}: {name} is {array.shape} in Keras' layout, the variable {var.shape}"
            )
        var.assign(array)
    return initweights.digest(weights)
