"""The study's four models in BigDL's Python API, layer for layer as the torch runner's.

Same architectures in every framework (DESIGN.md): the parameter counts are pinned by a
test against the torch runner's (LeNet 431,080; AutoEncoder 2,837,314; AlexNet
61,100,840; ResNet-50 25,557,032). BigDL is NCHW and counts a batch-norm layer's scale and
shift as parameters (its running statistics are buffers), exactly as torch does.

Two differences are BigDL's idiom, not the architecture's: classifiers end in LogSoftMax
and train with ClassNLLCriterion (= torch's CrossEntropyLoss on logits), and the
AutoEncoder ends in Sigmoid and trains with BCECriterion (= BCEWithLogitsLoss on logits).
Labels are 1-based for ClassNLLCriterion. Building a layer talks to the JVM, so a
SparkContext (BigDL engine) must exist first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dlscale.data import initweights


def _nn() -> Any:
    from bigdl.dllib.nn import layer

    return layer


def lenet() -> Any:
    """Caffe's MNIST LeNet: conv20-pool-conv50-pool-ip500-relu-ip10."""
    nn = _nn()
    model = nn.Sequential()
    model.add(nn.SpatialConvolution(1, 20, 5, 5))
    model.add(nn.SpatialMaxPooling(2, 2, 2, 2))
    model.add(nn.SpatialConvolution(20, 50, 5, 5))
    model.add(nn.SpatialMaxPooling(2, 2, 2, 2))
    model.add(nn.Reshape([50 * 4 * 4]))
    model.add(nn.Linear(50 * 4 * 4, 500))
    model.add(nn.ReLU())
    model.add(nn.Linear(500, 10))
    model.add(nn.LogSoftMax())
    return model


AUTOENCODER_SIZES = (784, 1000, 500, 250, 30)


def autoencoder() -> Any:
    """Caffe's mnist_autoencoder: 784-1000-500-250-30 and back, sigmoid units, linear code."""
    nn = _nn()
    model = nn.Sequential()
    model.add(nn.Reshape([784]))
    sizes = AUTOENCODER_SIZES
    for i in range(len(sizes) - 1):
        model.add(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            model.add(nn.Sigmoid())
    rev = sizes[::-1]
    for i in range(len(rev) - 1):
        model.add(nn.Linear(rev[i], rev[i + 1]))
        model.add(nn.Sigmoid())  # the last one turns logits into the reconstruction
    return model


def alexnet(num_classes: int = 1000) -> Any:
    """AlexNet as torchvision defines it (single tower). At 224x224 the features are 6x6
    already, so torchvision's adaptive average pooling is the identity and is left out."""
    nn = _nn()
    model = nn.Sequential()
    model.add(nn.SpatialConvolution(3, 64, 11, 11, 4, 4, 2, 2)).add(nn.ReLU())
    model.add(nn.SpatialMaxPooling(3, 3, 2, 2))
    model.add(nn.SpatialConvolution(64, 192, 5, 5, 1, 1, 2, 2)).add(nn.ReLU())
    model.add(nn.SpatialMaxPooling(3, 3, 2, 2))
    model.add(nn.SpatialConvolution(192, 384, 3, 3, 1, 1, 1, 1)).add(nn.ReLU())
    model.add(nn.SpatialConvolution(384, 256, 3, 3, 1, 1, 1, 1)).add(nn.ReLU())
    model.add(nn.SpatialConvolution(256, 256, 3, 3, 1, 1, 1, 1)).add(nn.ReLU())
    model.add(nn.SpatialMaxPooling(3, 3, 2, 2))
    model.add(nn.Reshape([256 * 6 * 6]))
    model.add(nn.Dropout(0.5)).add(nn.Linear(256 * 6 * 6, 4096)).add(nn.ReLU())
    model.add(nn.Dropout(0.5)).add(nn.Linear(4096, 4096)).add(nn.ReLU())
    model.add(nn.Linear(4096, num_classes))
    model.add(nn.LogSoftMax())
    return model


def _conv_bn(nn: Any, cin: int, cout: int, k: int, stride: int, pad: int, relu: bool) -> Any:
    block = nn.Sequential()
    block.add(nn.SpatialConvolution(cin, cout, k, k, stride, stride, pad, pad, with_bias=False))
    block.add(nn.SpatialBatchNormalization(cout))
    if relu:
        block.add(nn.ReLU())
    return block


def _bottleneck(nn: Any, in_planes: int, planes: int, stride: int) -> Any:
    """ResNet v1.5 bottleneck (stride on the 3x3 convolution, as torchvision)."""
    out = planes * 4
    residual = nn.Sequential()
    residual.add(_conv_bn(nn, in_planes, planes, 1, 1, 0, relu=True))
    residual.add(_conv_bn(nn, planes, planes, 3, stride, 1, relu=True))
    residual.add(_conv_bn(nn, planes, out, 1, 1, 0, relu=False))
    if stride != 1 or in_planes != out:
        shortcut = _conv_bn(nn, in_planes, out, 1, stride, 0, relu=False)
    else:
        shortcut = nn.Identity()
    block = nn.Sequential()
    block.add(nn.ConcatTable().add(residual).add(shortcut))
    block.add(nn.CAddTable())
    block.add(nn.ReLU())
    return block


def resnet50(num_classes: int = 1000) -> Any:
    """ResNet-50 as torchvision defines it."""
    nn = _nn()
    model = nn.Sequential()
    model.add(_conv_bn(nn, 3, 64, 7, 2, 3, relu=True))
    model.add(nn.SpatialMaxPooling(3, 3, 2, 2, 1, 1))
    in_planes = 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            model.add(_bottleneck(nn, in_planes, planes, stride if b == 0 else 1))
            in_planes = planes * 4
    model.add(nn.SpatialAveragePooling(7, 7, 1, 1))
    model.add(nn.Reshape([512 * 4]))
    model.add(nn.Linear(512 * 4, num_classes))
    model.add(nn.LogSoftMax())
    return model


MODELS = {"lenet": lenet, "autoencoder": autoencoder, "alexnet": alexnet, "resnet50": resnet50}


def build_model(name: str) -> Any:
    """The study model called ``name``; KeyError names the known ones."""
    try:
        return MODELS[name]()
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def criterion(name: str) -> Any:
    """The loss each model trains with (see the module docstring)."""
    from bigdl.dllib.nn import criterion as crit

    return crit.BCECriterion() if name == "autoencoder" else crit.ClassNLLCriterion()


def shared_weights(name: str, weights: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``init: shared``: the canonical arrays (``dlscale.data.initweights``) in the order and
    layout of the BigDL model's parameters: a convolution's weight gains BigDL's group axis
    ``(1, out, in, kh, kw)``; a Linear's ``(out, in)`` is torch's, and LeNet's flattening
    (``Reshape`` of NCHW) is the canonical (C, H, W) order."""
    layout = initweights.LAYOUTS[name]
    return [
        np.ascontiguousarray(weights[key].reshape((1, *shape)) if len(shape) == 4 else weights[key])
        for key, shape in layout
    ]


def parameter_count(model: Any) -> int:
    """Counted in the JVM: fetching AlexNet's 61 M weights into Python would need gigabytes."""
    weights = model.value.parameters()._1()
    return int(sum(tensor.nElement() for tensor in weights))
