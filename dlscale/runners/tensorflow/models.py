"""The study's four models in Keras, layer for layer the torch runner's architectures.

Keras' own ``keras.applications`` models differ from the torch ones (ResNet-50 v1 with
convolution biases and the stride on the 1x1 convolution; no AlexNet at all), so each
model is spelled out here to match ``dlscale.runners.torch.models`` exactly: same layers,
same trainable parameter count (LeNet 431,080; AutoEncoder 2,837,314; AlexNet 61,100,840;
ResNet-50 25,557,032, pinned by a test).

Differences that remain, and why they do not change the work:
- Layout is NHWC (TensorFlow's native layout on CPU, what oneDNN wants); torch runs NCHW
  or channels_last. The flattened feature order before a dense layer differs, not its size.
- torch's explicit padding (``padding=2``, ``padding=3``, stride-2 ``padding=1``) is written
  as ``ZeroPadding2D`` + a ``valid`` convolution, because Keras' ``same`` padding is
  asymmetric at stride 2. The max-pool after ResNet's stem pads with zeros where torch pads
  with -inf; its input is a ReLU output (>= 0), so the result is identical.
- BatchNormalization uses torch's epsilon (1e-5) and running-average rate (0.1, Keras
  momentum 0.9). Its moving mean/variance are non-trainable weights, as torch's buffers
  are not parameters, so they are not counted.
- AlexNet's adaptive average pool to 6x6 is the identity for 224x224 input (the features
  are already 6x6) and a plain average pool when the features are a multiple of 6; other
  input sizes are refused with a message rather than pooled differently from torch.
- Weight initialisation is Keras' default (Glorot uniform), not torch's: it changes the
  loss curve's first steps, not the cost of a step. With ``init: shared`` every framework
  starts from the same arrays instead (``sharedinit.py``).
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import layers

IMAGE_SHAPES = {
    "lenet": (28, 28, 1),
    "autoencoder": (28, 28, 1),
    "alexnet": (224, 224, 3),
    "resnet50": (224, 224, 3),
}
BN = {"epsilon": 1e-5, "momentum": 0.9}


def lenet(shape: tuple[int, ...] = IMAGE_SHAPES["lenet"], num_classes: int = 10) -> keras.Model:
    """Caffe's MNIST LeNet: conv20-pool-conv50-pool-ip500-relu-ip10 (431,080 parameters)."""
    inputs = keras.Input(shape)
    x = layers.Conv2D(20, 5)(inputs)
    x = layers.MaxPooling2D(2, 2)(x)
    x = layers.Conv2D(50, 5)(x)
    x = layers.MaxPooling2D(2, 2)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(500, activation="relu")(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name="lenet")


def autoencoder(shape: tuple[int, ...] = IMAGE_SHAPES["autoencoder"]) -> keras.Model:
    """Caffe's mnist_autoencoder: 784-1000-500-250-30 and back, sigmoid units, linear code.

    The output is logits for a sigmoid cross-entropy against the input pixels (2,837,314).
    """
    sizes = (1000, 500, 250, 30)
    inputs = keras.Input(shape)
    x = layers.Flatten()(inputs)
    for i, size in enumerate(sizes):
        x = layers.Dense(size, activation="sigmoid" if i < len(sizes) - 1 else None)(x)
    decoder = (250, 500, 1000, math.prod(shape))
    for i, size in enumerate(decoder):
        x = layers.Dense(size, activation="sigmoid" if i < len(decoder) - 1 else None)(x)
    return keras.Model(inputs, x, name="autoencoder")


def alexnet(shape: tuple[int, ...] = IMAGE_SHAPES["alexnet"], num_classes: int = 1000) -> keras.Model:
    """AlexNet as torchvision defines it (single tower, 61,100,840 parameters)."""
    inputs = keras.Input(shape)
    x = layers.ZeroPadding2D(2)(inputs)
    x = layers.Conv2D(64, 11, strides=4, activation="relu")(x)
    x = layers.MaxPooling2D(3, 2)(x)
    x = layers.ZeroPadding2D(2)(x)
    x = layers.Conv2D(192, 5, activation="relu")(x)
    x = layers.MaxPooling2D(3, 2)(x)
    x = layers.Conv2D(384, 3, padding="same", activation="relu")(x)
    x = layers.Conv2D(256, 3, padding="same", activation="relu")(x)
    x = layers.Conv2D(256, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, 2)(x)
    side = int(x.shape[1])
    if side != x.shape[2] or side % 6:  # torchvision's AdaptiveAvgPool2d((6, 6)), where it is exact
        raise ValueError(
            f"AlexNet features of {tuple(x.shape[1:3])} do not pool evenly to 6x6: use 224x224 input"
        )
    if side > 6:
        x = layers.AveragePooling2D(side // 6)(x)
    x = layers.Flatten()(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu")(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name="alexnet")


def _conv_bn(x: Any, filters: int, kernel: int, stride: int = 1, relu: bool = True) -> Any:
    """torch's ``Conv2d(k, stride, padding=k // 2, bias=False)`` + BatchNorm (+ ReLU)."""
    if kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2)(x)
    x = layers.Conv2D(filters, kernel, strides=stride, use_bias=False)(x)
    x = layers.BatchNormalization(**BN)(x)
    return layers.ReLU()(x) if relu else x


def _bottleneck(x: Any, planes: int, stride: int) -> Any:
    """ResNet v1.5 bottleneck (stride on the 3x3 convolution, as torchvision)."""
    out = planes * 4
    identity = x
    if stride != 1 or x.shape[-1] != out:
        identity = _conv_bn(x, out, 1, stride, relu=False)
    y = _conv_bn(x, planes, 1)
    y = _conv_bn(y, planes, 3, stride)
    y = _conv_bn(y, out, 1, relu=False)
    return layers.ReLU()(layers.Add()([y, identity]))


def resnet50(shape: tuple[int, ...] = IMAGE_SHAPES["resnet50"], num_classes: int = 1000) -> keras.Model:
    """ResNet-50 as torchvision defines it (v1.5, no convolution biases, 25,557,032)."""
    inputs = keras.Input(shape)
    x = _conv_bn(inputs, 64, 7, 2)
    x = layers.ZeroPadding2D(1)(x)
    x = layers.MaxPooling2D(3, 2)(x)
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            x = _bottleneck(x, planes, stride if b == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name="resnet50")


MODELS = {"lenet": lenet, "autoencoder": autoencoder, "alexnet": alexnet, "resnet50": resnet50}


def build_model(name: str, shape: tuple[int, ...] | None = None) -> keras.Model:
    """The study model called ``name`` for images of ``shape`` (HWC; default: the study's)."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name](tuple(shape) if shape else IMAGE_SHAPES[name])


def parameter_count(model: keras.Model) -> int:
    """Trainable parameters, the quantity torch's ``parameters()`` counts."""
    return sum(math.prod(w.shape) for w in model.trainable_weights)
