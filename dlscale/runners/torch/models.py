"""The study's four models in PyTorch, written by hand.

torchvision cannot be imported beside the pinned CPU torch on these machines (its CUDA-only
build fails with ``torchvision::nms does not exist``), and the study needs the *same*
architecture in every framework, so each model is spelled out layer by layer here and its
parameter count is pinned by a test (AlexNet 61,100,840 and ResNet-50 25,557,032 match
torchvision; LeNet and the AutoEncoder match Caffe's MNIST examples).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from dlscale.data import initweights


class LeNet(nn.Module):
    """Caffe's MNIST LeNet: conv20-pool-conv50-pool-ip500-relu-ip10 (431,080 parameters)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 20, kernel_size=5),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(20, 50, kernel_size=5),
            nn.MaxPool2d(2, 2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(50 * 4 * 4, 500),
            nn.ReLU(inplace=True),
            nn.Linear(500, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class AutoEncoder(nn.Module):
    """Caffe's mnist_autoencoder: 784-1000-500-250-30 and back, sigmoid units.

    The 30-unit code layer is linear, as in Caffe's example; the output is logits for a
    sigmoid cross-entropy loss against the input pixels (2,837,314 parameters).
    """

    SIZES = (784, 1000, 500, 250, 30)

    def __init__(self) -> None:
        super().__init__()
        enc: list[nn.Module] = [nn.Flatten()]
        sizes = self.SIZES
        for i in range(len(sizes) - 1):
            enc.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                enc.append(nn.Sigmoid())
        dec: list[nn.Module] = []
        rev = sizes[::-1]
        for i in range(len(rev) - 1):
            dec.append(nn.Linear(rev[i], rev[i + 1]))
            if i < len(rev) - 2:
                dec.append(nn.Sigmoid())
        self.encoder = nn.Sequential(*enc)
        self.decoder = nn.Sequential(*dec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


class AlexNet(nn.Module):
    """AlexNet as torchvision defines it (single-tower, 61,100,840 parameters)."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=0.5),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride on the 3x3 convolution, as torchvision)."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != out:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet50(nn.Module):
    """ResNet-50 as torchvision defines it (25,557,032 parameters)."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        layers: list[nn.Module] = []
        in_planes = 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for b in range(blocks):
                layers.append(Bottleneck(in_planes, planes, stride if b == 0 else 1))
                in_planes = planes * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.layers(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


MODELS: dict[str, type[nn.Module]] = {
    "lenet": LeNet,
    "autoencoder": AutoEncoder,
    "alexnet": AlexNet,
    "resnet50": ResNet50,
}


def build_model(name: str) -> nn.Module:
    """The study model called ``name``; KeyError names the known ones."""
    try:
        return MODELS[name]()
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


#: Where each canonical parameter of ``dlscale.data.initweights.LAYOUTS`` lives in these modules
#: (torch's layout is the canonical one: conv (out, in, kh, kw), linear (out, in), LeNet's
#: features flattened in (C, H, W) order by nn.Flatten).
SHARED_NAMES: Mapping[str, Mapping[str, str]] = {
    "lenet": {
        "conv1.weight": "features.0.weight",
        "conv1.bias": "features.0.bias",
        "conv2.weight": "features.2.weight",
        "conv2.bias": "features.2.bias",
        "fc1.weight": "classifier.1.weight",
        "fc1.bias": "classifier.1.bias",
        "fc2.weight": "classifier.3.weight",
        "fc2.bias": "classifier.3.bias",
    },
    "autoencoder": {
        f"{part}{i + 1}.{kind}": f"{'encoder' if part == 'enc' else 'decoder'}.{index}.{kind}"
        for part, indices in (("enc", (1, 3, 5, 7)), ("dec", (0, 2, 4, 6)))
        for i, index in enumerate(indices)
        for kind in ("weight", "bias")
    },
}


def load_shared(model: nn.Module, name: str, seed: int) -> str:
    """Overwrite every parameter of ``model`` (the study model ``name``) with the shared
    initialisation of ``seed`` (``init: shared``) and return its digest, which the run
    records so that the parity check sees the same starting bytes in every framework."""
    weights = initweights.initial_weights(name, seed)
    names = SHARED_NAMES[name]
    params = dict(model.named_parameters())
    if sorted(names.values()) != sorted(params):
        raise ValueError(
            f"{name}: parameters {sorted(params)} are not the shared ones {sorted(names.values())}"
        )
    with torch.no_grad():
        for canonical, array in weights.items():
            param = params[names[canonical]]
            if tuple(param.shape) != array.shape:
                raise ValueError(f"{name}: {canonical} is {array.shape}, the model's {tuple(param.shape)}")
            param.copy_(torch.from_numpy(array))
    return initweights.digest(weights)
