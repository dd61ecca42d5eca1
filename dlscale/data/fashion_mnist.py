"""Fashion-MNIST (Xiao, Rasul and Vollgraf 2017) as a second real small dataset, verified like MNIST.

It has MNIST's shapes and idx format (60,000 + 10,000 greyscale 28x28 images, 10 classes),
so LeNet and the AutoEncoder train on it unchanged, but it is harder than MNIST: a loss
curve that falls on both is evidence that training, not memorising digits, works.

Where it comes from: Debian's ``dataset-fashion-mnist`` package puts the four idx ``.gz``
files in ``/usr/share/datasets/fashion-mnist/`` (``scripts/ensure-fashion-mnist.sh``
installs it when missing); on a cluster a directory with the four files (plain or ``.gz``,
e.g. the user's own download) is taken instead. The ``.gz`` files are not compared: Debian
recompressed them (each is 24 bytes shorter than Zalando's, whose published .gz MD5s are
8d4fb7e6..., 25c81989..., bef4ecab..., bb300cfd...). What ``verify_fashion_mnist``
checks is the uncompressed content, byte for byte, against the MD5s below: those published
for the raw idx files in public Fashion-MNIST loaders (the ``raw_data`` lists of
torchvision-style dataset classes), which the decompressed Debian files match exactly.
Observed sha256 of the same files, for the record: train-images c59f468a2f67...,
train-labels bad3541b69d9..., t10k-images 5b4141f0afba..., t10k-labels 0402a96d92fd....
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any

from dlscale.data.mnist import import_from_dir, verify_idx_set
from dlscale.data.shards import DatasetError

log = logging.getLogger(__name__)

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
ENSURE_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure-fashion-mnist.sh"
CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
CANONICAL: dict[str, Any] = {
    "md5": {
        "train_images": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train_labels": "9018921c3c673c538a1fc5bad174d6f9",
        "test_images": "8181f5470baa50b63fa0f6fddb340f0a",
        "test_labels": "15d484375f8d13e6eb1aabb0c3f46965",
    },
    "shapes": {
        "train_images": (60000, 28, 28),
        "train_labels": (60000,),
        "test_images": (10000, 28, 28),
        "test_labels": (10000,),
    },
    # Balanced by construction (the dataset's paper, Table 1 and section 3).
    "train_label_counts": (6000,) * 10,
    "test_label_counts": (1000,) * 10,
    # Of the training images on [0, 1]; the widely quoted 0.2860 / 0.3530, to more digits.
    "pixel_mean": 0.2860405969887955,
    "pixel_std": 0.3530242445149226,
}


def ensure_debian_package(script: str | os.PathLike[str] = ENSURE_SCRIPT) -> Path:
    """Make ``DEBIAN_DIR`` hold the four files, installing the package when missing (root only)."""
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DatasetError(
            f"{script}: {(proc.stderr.strip() or proc.stdout.strip() or 'failed').splitlines()[-1]}"
        )
    return DEBIAN_DIR


def import_fashion_mnist(source: str, dest_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """The four uncompressed idx files in ``dest_dir``, from ``"debian"`` or a directory.

    Names and compression are handled as for MNIST (``dlscale.data.mnist.import_from_dir``).
    Does not verify; call ``verify_fashion_mnist`` on the result.
    """
    src = ensure_debian_package() if source == "debian" else Path(source)
    return import_from_dir(src, dest_dir)


def verify_fashion_mnist(idx_paths: dict[str, str | os.PathLike[str]]) -> dict[str, Any]:
    """Check the four uncompressed idx files against canonical Fashion-MNIST; return a summary.

    The same checks as MNIST (``mnist.verify_idx_set``: MD5s decide; shapes, the balanced
    label counts and pixel statistics too); the summary adds ``classes``.
    """
    summary = verify_idx_set(idx_paths, CANONICAL, "Fashion-MNIST", "label counts {counts} are not balanced")
    summary["classes"] = list(CLASSES)
    return summary
