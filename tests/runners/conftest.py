"""The BigDL runner tests' fixtures: the bigdl venv's python (with Java), the check that no
process of a test's run outlives it, and the two BigDL runs several tests read."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.bigdl_runs import SHARED_INIT, TWO_EXECUTOR_TARGET, kill_leftovers, run_ok, spec
from helpers.paths import REPO, framework_python

from dlscale import catalog


@pytest.fixture(scope="session")
def bigdl_py() -> Path:
    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    return framework_python("bigdl")


@pytest.fixture
def no_leftovers(tmp_path):
    """Fail (after killing them by PID) if any process of this test's run is still alive."""
    yield tmp_path
    leftovers = kill_leftovers(tmp_path)
    assert not leftovers, f"processes left running: {leftovers}"


@pytest.fixture(scope="session")
def bigdl_shared_init_run(bigdl_py, mnist_shards, tmp_path_factory) -> tuple[Path, list[dict], str]:
    """Shared by tests/runners/test_bigdl_parity.py and test_bigdl_eval.py: each Spark start-up
    and held-out evaluation is tens of seconds on 2 cores, so the tests read one run."""
    run_spec = {**spec(**SHARED_INIT), "seed": 1234, "init": "shared"}
    return run_ok(bigdl_py, run_spec, mnist_shards, tmp_path_factory.mktemp("bigdl-shared-init"))


@pytest.fixture(scope="session")
def bigdl_target_run(bigdl_py, mnist_shards, tmp_path_factory) -> tuple[Path, list[dict], str]:
    """Two executors training LeNet to a quality target: read by the two-worker test of
    test_bigdl_runner.py (a real two-executor run on real MNIST) and the target test of
    test_bigdl_eval.py (it stops at the first evaluation that meets the target)."""
    run_spec = {**spec(nodes=2, warmup=2, lr=catalog.model("lenet").learning_rate), **TWO_EXECUTOR_TARGET}
    return run_ok(bigdl_py, run_spec, mnist_shards, tmp_path_factory.mktemp("bigdl-target"))
