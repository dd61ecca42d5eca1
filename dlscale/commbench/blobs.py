"""The parameter blobs of each model, in Caffe's order: what Caffe-MPI all-reduces one by one.

Caffe-MPI (and the Caffe runner, ``dlscale.runners.caffe.parallel``) calls
``MPI_Allreduce`` once per learnable blob (each layer's weights, then its bias), so a
model's synchronisation is as many all-reduces as it has blobs, each of its own size,
and Open MPI picks an algorithm for each by its size. The sizes come from the same
generated prototxt the runner trains (``dlscale.runners.caffe.models``), by shape
inference here: no caffe import, and the total is tested equal to the catalog's count.
"""

from __future__ import annotations

import math
from functools import cache

from dlscale.runners.caffe import models as caffe_models

BYTES_PER_PARAMETER = 4
#: Input shape (channels, height, width) of each model's data blob.
_INPUT_SHAPES = {
    "lenet": (1, 28, 28),
    "autoencoder": (1, 28, 28),
    "alexnet": (3, 224, 224),
    "resnet50": (3, 224, 224),
}


def _spatial(size: int, kernel: int, stride: int, pad: int, ceil: bool) -> int:
    span = (size + 2 * pad - kernel) / stride
    return int(math.ceil(span) if ceil else math.floor(span)) + 1


@cache
def blob_parameters(model: str) -> tuple[int, ...]:
    """Learnable parameters of every blob of ``model``, in net order (weights, then bias)."""
    net = caffe_models._BUILDERS[model](1)
    shapes: dict[str, tuple[int, ...]] = {"data": _INPUT_SHAPES[model]}
    blobs: list[int] = []
    for layer in net.layers:
        kind, bottom, top = layer["type"], layer.get("bottom", []), layer.get("top", [])
        if kind in ("Input", "MemoryData"):
            continue
        shape = shapes.get(bottom[0]) if bottom else None
        if kind == "Convolution":
            p = layer["convolution_param"]
            c, h, w = shape
            k, s, pad = p["kernel_size"], p.get("stride", 1), p.get("pad", 0)
            blobs.append(p["num_output"] * c * k * k)
            if p.get("bias_term", True):
                blobs.append(p["num_output"])
            shapes[top[0]] = (p["num_output"], _spatial(h, k, s, pad, False), _spatial(w, k, s, pad, False))
        elif kind == "Pooling":
            p = layer["pooling_param"]
            c, h, w = shape
            if p.get("global_pooling"):
                shapes[top[0]] = (c, 1, 1)
            else:
                k, s, pad = p["kernel_size"], p.get("stride", 1), p.get("pad", 0)
                shapes[top[0]] = (c, _spatial(h, k, s, pad, True), _spatial(w, k, s, pad, True))
        elif kind == "InnerProduct":
            out = layer["inner_product_param"]["num_output"]
            blobs += [out * math.prod(shape), out]
            shapes[top[0]] = (out,)
        elif kind == "Scale":
            channels = shape[0]
            blobs += [channels, channels] if layer.get("scale_param", {}).get("bias_term") else [channels]
        elif kind == "Flatten":
            shapes[top[0]] = (math.prod(shape),)
        elif kind in caffe_models.STATISTICS_LAYERS or kind in ("ReLU", "Sigmoid", "Dropout"):
            pass  # in place, no learned blob
        elif kind == "Eltwise":
            shapes[top[0]] = shapes[bottom[0]]
        elif kind in ("SoftmaxWithLoss", "SigmoidCrossEntropyLoss", "Silence"):
            pass
        else:
            raise ValueError(f"{model}: no shape rule for Caffe layer type {kind!r}")
    return tuple(blobs)


def blob_bytes(model: str) -> tuple[int, ...]:
    """Bytes of every blob's gradient (float32)."""
    return tuple(n * BYTES_PER_PARAMETER for n in blob_parameters(model))
