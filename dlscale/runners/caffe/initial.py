"""The shared initialisation (run spec ``init: shared``) loaded into a Caffe net.

``dlscale.data.initweights`` draws one set of arrays per model and seed in the canonical layout,
which is Caffe's own: a convolution's weight ``(out, in, kh, kw)``, an InnerProduct's
``(out, in)`` over inputs flattened in ``(C, H, W)`` order, as Caffe flattens them. Loading
them is therefore a renaming (``CAFFE_BLOBS``) and a copy into the parameter blobs, on
every rank; every learnable blob of the net must be covered, with its exact shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dlscale.data import initweights
from dlscale.runners.caffe.models import learnable_blobs

#: Per model: canonical parameter name -> (Caffe layer, blob index: 0 weight, 1 bias).
CAFFE_BLOBS: Mapping[str, Mapping[str, tuple[str, int]]] = {
    "lenet": {
        f"{canonical}.{kind}": (layer, index)
        for canonical, layer in (("conv1", "conv1"), ("conv2", "conv2"), ("fc1", "ip1"), ("fc2", "ip2"))
        for kind, index in (("weight", 0), ("bias", 1))
    },
    # Caffe's example numbers the decoder from the output back (decode1 is the last layer).
    "autoencoder": {
        f"{part}{k}.{kind}": (
            f"{'encode' if part == 'enc' else 'decode'}{k if part == 'enc' else 5 - k}",
            index,
        )
        for part in ("enc", "dec")
        for k in (1, 2, 3, 4)
        for kind, index in (("weight", 0), ("bias", 1))
    },
}


def load_shared(net: Any, model: str, seed: int) -> str:
    """Overwrite ``net``'s parameters with the shared initialisation; return its digest
    (``initweights.digest``), which the run records as ``init_sha256``."""
    weights = initweights.initial_weights(model, seed)
    names = CAFFE_BLOBS[model]
    if set(names) != set(weights):
        raise KeyError(
            f"{model}: Caffe names {sorted(names)} do not match the shared weights {sorted(weights)}"
        )
    learnable = {(layer, index) for layer, index, _ in learnable_blobs(net)}
    if learnable != set(names.values()):
        raise KeyError(
            f"{model}: the net's parameter blobs {sorted(learnable)} are not {sorted(names.values())}"
        )
    for name, array in weights.items():
        layer, index = names[name]
        blob = net.params[layer][index].data
        if blob.shape != array.shape:
            raise ValueError(
                f"{model}: {name} has shape {array.shape}, Caffe's {layer}[{index}] {blob.shape}"
            )
        blob[...] = np.asarray(array, dtype=np.float32)
    return initweights.digest(weights)
