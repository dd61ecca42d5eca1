"""`input: pipeline` for real: the torch runner fed by a DataLoader with workers.

The runner runs through the launcher in the torch venv, as the training rule runs it.
Checked: pipeline and memory modes train on the same batches (same losses), every
iteration records the time it waited for input (`input_s`), the workers do not outlive
the run, and the analysis reports `input_s` per run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from dlscale import analysis
from dlscale.events import read_events


def spec(model="lenet", nodes=1, batch=32, iterations=12, warmup=2, **extra) -> dict:
    return {
        "framework": "torch",
        "model": model,
        "nodes": nodes,
        "ranks_per_node": 1,
        "batch": batch,
        "repeat": 0,
        "run_id": f"torch/{model}/n{nodes}x1/b{batch}/r0",
        "world_size": nodes,
        "scaling": "weak",
        "global_batch": batch * nodes,
        "dataset": "mnist" if model in ("lenet", "autoencoder") else "imagenet",
        "iterations": iterations,
        "warmup": warmup,
        "threads_per_rank": 1,
        "learning_rate": 0.01,
        "momentum": 0.9,
        "seed": 7,
        "timeout_s": 240,
        "options": {"channels_last": True, "timeout_s": 60},
        **extra,
    }


def launch(python: Path, run_spec: dict, data: Path, events: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(python), "-m", "dlscale.launch", "--spec-json", json.dumps(run_spec), "--data", str(data)]
    cmd += ["--events", str(events), "--python", str(python)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (DataLoader workers inherit the rank's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(int(entry.name))
    return found


def iterations(events_path: Path, proc: subprocess.CompletedProcess[str]) -> list[dict]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", (events[-1], proc.stdout[-5000:])
    return [e for e in events if e["event"] == "iteration"]


def test_pipeline_trains_on_the_same_batches_as_memory(torch_py, mnist_shards, tmp_path):
    runs = {}
    for mode, extra in (("memory", {}), ("pipeline", {"input": "pipeline", "input_workers": 2})):
        events = tmp_path / mode / "events.jsonl"
        proc = launch(torch_py, spec(**extra), mnist_shards, events)
        runs[mode] = iterations(events, proc)
        assert not processes_mentioning(str(tmp_path / mode)), "input workers outlived the run"
    for mode, iters in runs.items():
        assert len(iters) == 14
        assert all(e["input_s"] >= 0 for e in iters), mode
    np.testing.assert_allclose(
        [e["loss"] for e in runs["pipeline"]], [e["loss"] for e in runs["memory"]], rtol=1e-6
    )


def test_two_ranks_pipeline_and_the_input_column(torch_py, mnist_shards, tmp_path):
    events = tmp_path / "events.jsonl"
    proc = launch(
        torch_py, spec(nodes=2, iterations=10, input="pipeline", input_workers=1), mnist_shards, events
    )
    iters = iterations(events, proc)
    assert sorted({e["rank"] for e in iters}) == [0, 1]
    assert all(e["input_s"] >= 0 and e["comm_s"] > 0 for e in iters)
    assert not processes_mentioning(str(tmp_path))

    runs, table = analysis.load_events([events])
    assert runs.loc[0, "status"] == "ok"
    assert np.isfinite(runs.loc[0, "input_s"]) and runs.loc[0, "input_s"] >= 0
    timed = table[~table["warmup"]]
    per_iter = timed.groupby("iteration")["input_s"].mean()
    assert runs.loc[0, "input_s"] == pytest.approx(per_iter.median())

    # A runner that does not report input_s (yet) gets NaN there, not a failed run.
    stripped = tmp_path / "stripped.jsonl"
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    for event in lines:
        event.pop("input_s", None)
    stripped.write_text("".join(json.dumps(event) + "\n" for event in lines))
    runs, table = analysis.load_events([stripped])
    assert runs.loc[0, "status"] == "ok" and pd.isna(runs.loc[0, "input_s"])
    assert table["input_s"].isna().all()


def test_pipeline_feeds_an_imagenet_model(torch_py, imagenet_shards, tmp_path):
    events = tmp_path / "events.jsonl"
    run_spec = spec(model="alexnet", batch=4, iterations=2, warmup=1, input="pipeline", input_workers=1)
    proc = launch(torch_py, run_spec, imagenet_shards, events)
    assert all(np.isfinite(e["loss"]) and e["input_s"] >= 0 for e in iterations(events, proc))


def test_input_option_reaches_the_run_spec_only_when_set(schema):
    from dlscale.study import expand_runs, run_spec, validate_config

    memory = validate_config({"models": ["lenet"]}, schema)
    run = expand_runs(memory)[0]
    assert "input" not in run_spec(memory, run)  # the default leaves every run's hash as it was
    pipeline = validate_config({"models": ["lenet"], "input": "pipeline", "input_workers": 3}, schema)
    assert run_spec(pipeline, run)["input"] == "pipeline" and run_spec(pipeline, run)["input_workers"] == 3
