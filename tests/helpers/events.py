"""Hand-written events: iteration events, whole runs written as the launcher writes them
(``write_run``, through ``dlscale.events.write_atomic``), and run_start / run_end events and
files written line by line without validation (``put``), for events no real run writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dlscale import quality
from dlscale.events import write_atomic

#: The runs written here start at 1000.0 and end at 1100.0 (later when their steps need it);
#: their steps begin at 1010.0, after a start-up of 10 s.
STEPS_BEGIN = 1010.0


def iteration(
    rank: int,
    index: int,
    step: float,
    compute: float | None = None,
    comm: float | None = None,
    loss: float | None = None,
    samples: int = 64,
    warmup: bool = False,
) -> dict[str, Any]:
    event = {
        "event": "iteration",
        "rank": rank,
        "iteration": index,
        "samples": samples,
        "step_s": step,
        "compute_s": compute,
        "comm_s": comm,
        "loss": loss,
        # When the step ended: after the run's start-up (write_run times a run's steps exactly).
        "time": STEPS_BEGIN + 1.0 + index,
    }
    if warmup:
        event["warmup"] = True
    return event


def write_run(
    root: Path,
    iterations: list[dict[str, Any]],
    *,
    framework: str = "torch",
    model: str = "lenet",
    nodes: int = 1,
    ranks_per_node: int = 1,
    batch: int = 64,
    repeat: int = 0,
    scaling: str = "weak",
    global_batch: int | None = None,
    status: str = "ok",
    reason: str | None = None,
    startup_s: float | None = 2.5,
    network: str | None = None,
    contention: dict[str, Any] | None = None,
) -> Path:
    """Write one run's events.jsonl under ``root`` (at its run id's path) and return it.

    ``network`` (e.g. ``emulated-1gbe``) goes into run_start and, as the study names such
    runs, into the run id's layout segment (``n2x1-1gbe``); None writes no network field.
    ``contention`` is the launcher probe's record, put into run_end (None: an older file
    without one).
    """
    world = nodes * ranks_per_node
    layout = f"n{nodes}x{ranks_per_node}"
    if network not in (None, "host"):
        layout += "-" + network.removeprefix("emulated-")
    run_id = f"{framework}/{model}/{layout}/b{batch}/r{repeat}"
    start = {
        "event": "run_start",
        "run_id": run_id,
        "framework": framework,
        "model": model,
        "dataset": "mnist",
        "nodes": nodes,
        "ranks_per_node": ranks_per_node,
        "batch": batch,
        "global_batch": global_batch if global_batch is not None else batch * world,
        "repeat": repeat,
        "scaling": scaling,
        "world_size": world,
        "hosts": [f"cn{rank // ranks_per_node}" for rank in range(world)],
        "threads_per_rank": 4,
        "versions": {framework: "1.2.3", "python": "3.11.7"},
        "config_sha256": "c0ffee",
        "git_sha": "deadbeef",
        "time": 1000.0,
        "loadavg": [0.25, 0.5, 0.75],
        "startup_s": startup_s,
    }
    if network is not None:
        start["network"] = network
    iterations, ends = _timed(iterations)
    end = {"event": "run_end", "status": status, "reason": reason, "time": max(1100.0, ends + 1.0)}
    if contention is not None:
        end["contention"] = contention
    return write_atomic(root / run_id / "events.jsonl", [start, *iterations, end])


def _timed(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """The events with each rank's iteration times one after another from STEPS_BEGIN
    (a rank runs its steps and evaluations in turn, inside its run: dlscale.analysis.
    eventchecks.check_run_times), and when the last of them ends."""
    clocks: dict[int, float] = {}
    out, last = [], STEPS_BEGIN
    for event in events:
        event = dict(event)
        rank = event.get("rank", 0)
        if event.get("event") == "iteration" and isinstance(event.get("step_s"), (int, float)):
            began = clocks.get(rank, STEPS_BEGIN)
            event["time"] = began + event["step_s"]
            clocks[rank] = event["time"]
        elif event.get("event") == "eval":
            event["time"] = clocks.get(rank, STEPS_BEGIN) + event.get("eval_s", 0.0)
            clocks[rank] = event["time"]
        last = max(last, event.get("time", last))
        out.append(event)
    return out, last


def run_start(
    *,
    framework: str = "torch",
    model: str = "lenet",
    nodes: int = 1,
    ranks_per_node: int = 1,
    batch: int = 64,
    repeat: int = 0,
    network: str | None = None,
    total: int | None = None,
) -> dict[str, Any]:
    """A run_start as the launcher writes it (``total``: a spec with that many iterations)."""
    world = nodes * ranks_per_node
    layout = f"n{nodes}x{ranks_per_node}" + (
        "" if network in (None, "host") else "-" + network.split("-", 1)[1]
    )
    run_id = f"{framework}/{model}/{layout}/b{batch}/r{repeat}"
    start: dict[str, Any] = {
        "event": "run_start",
        "run_id": run_id,
        "framework": framework,
        "model": model,
        "nodes": nodes,
        "ranks_per_node": ranks_per_node,
        "batch": batch,
        "repeat": repeat,
        "dataset": "mnist",
        "scaling": "weak",
        "global_batch": batch * world,
        "world_size": world,
        "hosts": [f"cn{rank // ranks_per_node}" for rank in range(world)],
        "threads_per_rank": 1,
        "versions": {framework: "1.0"},
        "config_sha256": "c0ffee",
        "git_sha": "deadbeef",
        "time": 1000.0,
    }
    if network is not None:
        start["network"] = network
    if total is not None:
        start["spec"] = {"run_id": run_id, "iterations": total, "warmup": 0}
    return start


def run_end(status: str = "ok", reason: str | None = None) -> dict[str, Any]:
    return {"event": "run_end", "status": status, "reason": reason, "time": 1100.0}


def every_rank(world: int, count: int = 3, batch: int = 64, step: float = 0.5) -> list[dict[str, Any]]:
    return [iteration(rank, i, step, samples=batch) for i in range(count) for rank in range(world)]


def put(root: Path, events: list[dict[str, Any]], at: str | None = None) -> Path:
    """Write ``events`` as they are (no validation) to ``root/<run id>/events.jsonl``."""
    path = root / (at or events[0]["run_id"]) / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    return path


def steady_run(
    root: Path,
    throughput: float,
    *,
    nodes: int,
    iterations: int = 3,
    warmup: int = 1,
    **kwargs: Any,
) -> Path:
    """A run whose every timed iteration has exactly ``throughput`` global samples/s."""
    ranks_per_node = kwargs.get("ranks_per_node", 1)
    batch = kwargs.get("batch", 50)
    world = nodes * ranks_per_node
    step = batch * world / throughput
    events = [
        iteration(rank, index, step if index >= warmup else 100 * step, samples=batch, warmup=index < warmup)
        for index in range(iterations + warmup)
        for rank in range(world)
    ]
    return write_run(root, events, nodes=nodes, **{"batch": batch, **kwargs})


def run_with_evals(
    root: Path,
    *,
    framework: str = "torch",
    model: str = "lenet",
    nodes: int = 1,
    repeat: int = 0,
    step_s: float = 0.01,
    iterations: int = 6,
    warmup: int = 1,
    evals: list[tuple[int, float]] | None = None,
    metric: str | None = None,
    target: dict[str, Any] | None = None,
    eval_overrides: dict[str, Any] | None = None,
) -> Path:
    """One run: ``iterations`` training iterations (the first ``warmup`` of them warm-up) and
    rank 0's evaluations ``(iterations completed, value)`` with the training clock they had."""
    run_id = f"{framework}/{model}/n{nodes}x1/b64/r{repeat}"
    spec: dict[str, Any] = {"run_id": run_id, "iterations": iterations - warmup, "warmup": warmup}
    if target is not None:
        spec["quality_target"] = target
    start = {
        "event": "run_start", "run_id": run_id, "framework": framework, "model": model, "dataset": "mnist",
        "nodes": nodes, "ranks_per_node": 1, "batch": 64, "global_batch": 64 * nodes, "repeat": repeat,
        "scaling": "weak", "world_size": nodes, "hosts": [f"cn{r}" for r in range(nodes)],
        "threads_per_rank": 1, "versions": {}, "config_sha256": "c0ffee", "git_sha": "deadbeef",
        "time": 1000.0, "spec": spec,
    }  # fmt: skip
    events: list[dict[str, Any]] = [start]
    for index in range(iterations):
        for rank in range(nodes):
            events.append(
                {
                    "event": "iteration",
                    "rank": rank,
                    "iteration": index,
                    "samples": 64,
                    "step_s": step_s,
                    "compute_s": step_s,
                    "comm_s": 0.0,
                    "loss": 1.0,
                    "time": 1001.0 + index,
                    "warmup": index < warmup,
                }  # fmt: skip
            )
    name = metric or quality.primary_metric(model)
    for done, value in evals or []:
        event = {
            "event": "eval", "rank": 0, "iteration": done, "split": "test", "metric": name, "value": value,
            "samples": 10000, "eval_s": 0.5, "train_s": step_s * max(0, done - warmup), "time": 1050.0 + done,
        }  # fmt: skip
        event.update(eval_overrides or {})
        events.append(event)
    events.append({"event": "run_end", "status": "ok", "reason": None, "time": 1100.0})
    return write_atomic(root / run_id / "events.jsonl", events)
