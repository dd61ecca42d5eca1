"""A run timed while the host is busy with other work is redone, then recorded as contended
and left out of the findings (issue 23: clean measurements).

Real contention, not a mock: busy loops on every core beside a real torch run through
dlscale.launch, the launcher's contention probe (dlscale.host.contention) reading /proc/stat.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.analysis import cells as cell_summary
from dlscale.analysis import tables
from dlscale.events import read_events

BUSY = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"


def spec(run_id: str) -> dict:
    return {
        "framework": "torch",
        "model": "lenet",
        "nodes": 1,
        "ranks_per_node": 1,
        "batch": 32,
        "repeat": 0,
        "run_id": run_id,
        "world_size": 1,
        "scaling": "weak",
        "global_batch": 32,
        "dataset": "mnist",
        "iterations": 30,
        "warmup": 2,
        "threads_per_rank": 1,
        "learning_rate": 0.01,
        "seed": 7,
        "timeout_s": 300,
    }


@pytest.fixture
def busy_host():
    """A busy loop on every core this process may use (what a neighbour's build does)."""
    loops = [
        subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(max(2, len(os.sched_getaffinity(0))))
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_contended_run_is_redone_then_recorded_and_excluded(tmp_path, torch_py, mnist_shards, busy_host):
    run_id = "torch/lenet/n1x1/b32/r0"
    events_path = tmp_path / "runs" / run_id / "events.jsonl"
    proc = subprocess.run(
        [
            str(torch_py),
            "-m",
            "dlscale.launch",
            "--spec-json",
            json.dumps(spec(run_id)),
            "--data",
            str(mnist_shards),
            "--events",
            str(events_path),
            "--python",
            str(torch_py),
            "--contended-retries",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "host busy with other work during the run" in proc.stdout
    assert "recorded as contended" in proc.stderr
    retried = list((events_path.parent / "attempts").glob("contended-*.jsonl"))
    assert len(retried) == 1, "one retry, then the run is recorded as it is"
    run_end = read_events(events_path)[-1]
    assert run_end["status"] == "ok" and run_end["contention"]["contended"] is True
    assert run_end["contention"]["other_busy_share"] >= 0.2

    runs, _ = tables.load_events([events_path])
    assert bool(runs.loc[0, "contended"]) is True
    cells = cell_summary.cells(runs)
    assert bool(cells.loc[0, "excluded"]) is True
    assert "contended" in str(cells.loc[0, "note"]) + str(cells.loc[0, "flag"])


def test_environment_recorded_in_run_start(tmp_path, torch_py, mnist_shards):
    """The run's start event names the lock its venv was built from (dlscale.envs)."""
    from helpers.paths import ENVS_DIR

    from dlscale.envs import env_marker, lock_sha256

    run_id = "torch/lenet/n1x1/b32/r1"
    events_path = tmp_path / "runs" / run_id / "events.jsonl"
    marker = env_marker(ENVS_DIR, "torch")
    env = {**os.environ, "DLSCALE_ENV_MARKER": str(marker)}
    quick = {**spec(run_id), "iterations": 3, "repeat": 1}
    proc = subprocess.run(
        [
            str(torch_py),
            "-m",
            "dlscale.launch",
            "--spec-json",
            json.dumps(quick),
            "--data",
            str(mnist_shards),
            "--events",
            str(events_path),
            "--python",
            str(torch_py),
            "--contended-retries",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    start = read_events(events_path)[0]
    assert start["env"]["lock_sha256"] == lock_sha256("torch")
    assert Path(marker).is_file()
