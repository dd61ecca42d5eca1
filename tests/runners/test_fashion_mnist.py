"""Fashion-MNIST for real: Debian's package installed by the project's script, verified by MD5.

The package is installed (once, idempotently) by scripts/ensure-fashion-mnist.sh, as the
workflow's rule does; the tests then check the canonical content, a tampered copy, a
user directory, and the workflow rule that makes the shards.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.paths import REPO

from dlscale.data import fashion_mnist
from dlscale.data.mnist import IDX_NAMES
from dlscale.data.shards import DatasetError, ShardSet
from dlscale.study.validation import ConfigError, validate_config

ENSURE = REPO / "scripts" / "ensure-fashion-mnist.sh"


@pytest.fixture(scope="module")
def debian_dir() -> Path:
    proc = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return fashion_mnist.DEBIAN_DIR


@pytest.fixture(scope="module")
def idx(debian_dir, tmp_path_factory) -> dict[str, Path]:
    return fashion_mnist.import_fashion_mnist("debian", tmp_path_factory.mktemp("fashion-idx"))


def test_ensure_script_is_idempotent(debian_dir):
    proc = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""  # nothing to do


def test_debian_package_is_canonical_fashion_mnist(idx):
    summary = fashion_mnist.verify_fashion_mnist(idx)
    assert summary["md5"] == fashion_mnist.CANONICAL["md5"]
    assert summary["shapes"]["train_images"] == [60000, 28, 28]
    assert summary["train_label_counts"] == [6000] * 10
    assert summary["test_label_counts"] == [1000] * 10
    assert abs(summary["pixel_mean"] - 0.2860) < 1e-4 and abs(summary["pixel_std"] - 0.3530) < 1e-4
    assert len(summary["classes"]) == 10


def test_tampered_copy_fails_naming_the_file(idx, tmp_path):
    copies = {key: Path(shutil.copy(path, tmp_path / path.name)) for key, path in idx.items()}
    data = bytearray(copies["test_images"].read_bytes())
    data[5000] ^= 1
    copies["test_images"].write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"t10k-images-idx3-ubyte: MD5 .* does not match"):
        fashion_mnist.verify_fashion_mnist(copies)


def test_user_directory_plain_or_gz(debian_dir, tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    for i, name in enumerate(IDX_NAMES.values()):
        data = gzip.decompress((debian_dir / f"{name}.gz").read_bytes())
        if i % 2:  # half plain, half gzipped, one with the dotted mirror name
            (user / name.replace("-idx", ".idx")).write_bytes(data)
        else:
            (user / f"{name}.gz").write_bytes(gzip.compress(data))
    idx = fashion_mnist.import_fashion_mnist(str(user), tmp_path / "idx")
    assert fashion_mnist.verify_fashion_mnist(idx)["md5"] == fashion_mnist.CANONICAL["md5"]


def test_config_names_a_missing_directory(schema, tmp_path):
    config = {"models": ["lenet"], "datasets": {"lenet": "fashion-mnist"}}
    with pytest.raises(ConfigError, match=r"'data.fashion_mnist.source'.*nowhere"):
        validate_config({**config, "data": {"fashion_mnist": {"source": str(tmp_path / "nowhere")}}}, schema)
    assert validate_config(config, schema)["data"]["fashion_mnist"]["source"] == "debian"
    with pytest.raises(ConfigError, match=r"'datasets.alexnet'"):
        validate_config({"datasets": {"alexnet": "fashion-mnist"}}, schema)


@pytest.mark.workflow
def test_workflow_rule_makes_verified_shards(debian_dir, tmp_path):
    study = {
        "models": ["lenet"],
        "datasets": {"lenet": "fashion-mnist"},
        "data": {"fashion_mnist": {"shard_size": 25000}},
    }
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    target = "results/data/fashion-mnist/shards"
    cmd = [sys.executable, "-m", "snakemake", target, "--snakefile", str(REPO / "Snakefile")]
    cmd += ["--directory", str(tmp_path), "--profile", str(REPO / "profiles" / "local")]
    cmd += ["--configfile", str(tmp_path / "study.yaml")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    shards = ShardSet(tmp_path / target, verify=True)
    assert shards.index["dataset"] == "fashion-mnist"
    assert shards.num_samples == 60000 and shards.image_shape == (28, 28, 1)
    assert len(shards.index["shards"]) == 3
    assert abs(shards.mean - fashion_mnist.CANONICAL["pixel_mean"]) < 1e-12
    images, labels = shards.load_part(1, 4)
    assert images.shape == (15000, 28, 28, 1)
    all_labels = np.concatenate([shards.load_part(rank, 4)[1] for rank in range(4)])
    assert np.bincount(all_labels).tolist() == [6000] * 10
    summary = (tmp_path / "results/data/fashion-mnist/verification.json").read_text()
    assert fashion_mnist.CANONICAL["md5"]["train_images"] in summary


def test_lenet_learns_on_fashion_mnist(idx, torch_py, tmp_path):
    """The second real dataset flows into training like MNIST: the loss falls."""
    import json
    import os

    from dlscale.data.mnist import read_idx
    from dlscale.data.shards import write_shards
    from dlscale.events import read_events

    shards = write_shards(
        tmp_path / "shards",
        read_idx(idx["train_images"])[..., None],
        read_idx(idx["train_labels"]),
        dataset="fashion-mnist",
        split="train",
        num_classes=10,
        shard_size=30000,
        source="test",
    )
    spec = {
        "framework": "torch",
        "model": "lenet",
        "nodes": 1,
        "ranks_per_node": 1,
        "batch": 64,
        "repeat": 0,
        "run_id": "torch/lenet/n1x1/b64/r0",
        "world_size": 1,
        "scaling": "weak",
        "global_batch": 64,
        "dataset": "fashion-mnist",
        "iterations": 60,
        "warmup": 2,
        "threads_per_rank": 1,
        "learning_rate": 0.01,
        "momentum": 0.9,
        "seed": 3,
        "timeout_s": 240,
        "options": {"channels_last": True, "timeout_s": 60},
    }
    events = tmp_path / "events.jsonl"
    cmd = [str(torch_py), "-m", "dlscale.launch", "--spec-json", json.dumps(spec), "--data", str(shards)]
    cmd += ["--events", str(events), "--python", str(torch_py)]
    proc = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = read_events(events)
    assert records[-1]["status"] == "ok", (records[-1], proc.stdout[-3000:])
    losses = [e["loss"] for e in records if e["event"] == "iteration"]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert first > 2.0 and last < 0.75 * first, (first, last)
