"""A BigDL run spec, a run launched through ``dlscale.launch`` in the bigdl venv as the training
rule launches it, and the checks that no Spark daemon outlives it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from dlscale import catalog
from dlscale.events import read_events
from dlscale.parse.bigdl import ITERATION

#: The one-rank LeNet run from the shared initialisation that the parity test reads (its
#: first 20 losses) and the evaluation test reads (one evaluation, after the last iteration).
SHARED_INIT = {"nodes": 1, "iterations": 40, "warmup": 0, "batch": 64, "lr": 0.01}
#: The two-executor run that trains to a quality target, evaluating every 10 iterations.
TWO_EXECUTOR_TARGET = {
    "eval_every": 10,
    "quality_target": {"metric": "top1", "value": 0.7},
    "max_iterations": 80,
}


def last_logged_iteration(log: str) -> int:
    """The last iteration DistriOptimizer logged in a run's log (it counts from 1); 0 if none:
    the log parser's own line pattern (``dlscale.parse.bigdl.ITERATION``)."""
    return max((int(line["iteration"]) for line in ITERATION.finditer(log)), default=0)


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains ``text`` (a run's own paths)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


def kill_leftovers(root: Path) -> list[int]:
    """Kill (by PID) every live process whose command line names ``root`` (a test's own run
    or study folder), and return their PIDs: a test fails on them after cleaning up."""
    leftovers = processes_mentioning(str(root))
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return leftovers


def spec(model="lenet", nodes=2, batch=64, iterations=20, warmup=2, lr=0.02, timeout_s=600, **options):
    return {
        "framework": "bigdl",
        "model": model,
        "nodes": nodes,
        "ranks_per_node": 1,
        "batch": batch,
        "repeat": 0,
        "run_id": f"bigdl/{model}/n{nodes}x1/b{batch}/r0",
        "world_size": nodes,
        "scaling": "weak",
        "global_batch": batch * nodes,
        "dataset": catalog.model(model).datasets[0],
        "iterations": iterations,
        "warmup": warmup,
        "threads_per_rank": 1,
        "learning_rate": lr,
        "momentum": 0.9,
        "seed": 7,
        "timeout_s": timeout_s,
        "options": {"driver_memory": "1g", "executor_memory": "1g", "startup_timeout_s": 240, **options},
    }


def launch(
    python: Path, run_spec: dict, data: Path, events: Path, retries: int | None = None
) -> subprocess.CompletedProcess[str]:
    """``retries``: the launcher's --contended-retries (its default when None); 0 records a
    run on the busy test host at once instead of redoing it."""
    cmd = [
        str(python), "-m", "dlscale.launch", "--spec-json", json.dumps(run_spec), "--data", str(data),
        "--events", str(events), "--python", str(python),
    ]  # fmt: skip
    if retries is not None:
        cmd += ["--contended-retries", str(retries)]
    env = dict(os.environ)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def daemon_pids(output: str) -> list[int]:
    found = re.search(r"daemon pids \[([\d, ]+)\]", output)
    assert found, output[-3000:]
    return [int(pid) for pid in found[1].split(",")]


def assert_gone(pids: list[int]) -> None:
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def run_ok(python: Path, run_spec: dict, data: Path, root: Path) -> tuple[Path, list[dict], str]:
    """One BigDL run under ``root`` that must end ok with none of its processes left:
    (events path, events, the launcher's output). The shared runs of the BigDL tests
    (tests/runners/conftest.py) are made with it, once per session."""
    events_path = root / "run" / "events.jsonl"
    proc = launch(python, run_spec, data, events_path, retries=0)
    output = proc.stdout + proc.stderr
    leftovers = kill_leftovers(root)
    assert proc.returncode == 0, output[-5000:]
    assert not leftovers, f"processes left running: {leftovers}"
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", (events[-1], output[-5000:])
    return events_path, events, output
