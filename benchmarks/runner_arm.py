"""The runner arm of the in-process training benchmarks, framework-neutral (no framework import).

``runner_arm(train, spec, data, work, repeat)`` runs a runner's own ``train(ctx)`` (the
code path of every study run) as a lone rank, in this process, and times it from its
iteration events: the gaps between successive events cover the whole loop body (next
batch, step, event writing), which is what the harness costs on top of the step itself.
CPU time is stamped at every event too (steady on a shared node; see StampedContext).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.stats import arm_order, median_interval, throughput
from dlscale import placement as placement_mod
from dlscale.events import PartWriter
from dlscale.runners.common import RunContext


@dataclass
class StampedContext(RunContext):
    """The runner's context, also noting this process's CPU time at every iteration event."""

    cpu_stamps: list[float] = field(default_factory=list)

    def record_iteration(self, iteration: int, **fields: Any) -> None:  # type: ignore[override]
        self.cpu_stamps.append(time.process_time())
        super().record_iteration(iteration, **fields)


def context(spec: dict[str, Any], data: Path, part: Path) -> StampedContext:
    where = placement_mod.detect({})  # a lone process: rank 0 of 1
    return StampedContext(spec=spec, placement=where, data_dir=data, writer=PartWriter(part))


def runner_arm(
    train: Callable[[RunContext], None], spec: dict[str, Any], data: Path, work: Path, repeat: int
) -> dict[str, float]:
    part = work / f"runner{repeat}.jsonl"
    ctx = context(spec, data, part)
    try:
        train(ctx)
    finally:
        ctx.writer.close()
    lines = part.read_text(encoding="utf-8").splitlines()
    events = [e for e in map(json.loads, filter(None, lines)) if e["event"] == "iteration"]
    warmup, batch = int(spec["warmup"]), int(spec["batch"])
    return {
        "samples_per_s": throughput(batch, median_interval([e["time"] for e in events[warmup - 1 :]])),
        "samples_per_cpu_s": throughput(batch, median_interval(ctx.cpu_stamps[warmup - 1 :])),
        "self_timed_samples_per_s": throughput(
            batch, statistics.median(e["step_s"] for e in events[warmup:])
        ),
    }


def rotate_arms(
    spec: dict[str, Any], repeats: int, arms: dict[str, Callable[[int], dict[str, float]]]
) -> None:
    """Run the arms (runner, bare, peak) in rotated order per repeat; print one JSON row each."""
    threads = int(spec["threads_per_rank"])
    for repeat in range(repeats):
        for arm in arm_order(repeat, tuple(arms)):
            result = arms[arm](repeat)
            row = {"arm": arm, "repeat": repeat, "model": spec["model"], "batch": int(spec["batch"]),
                   "threads": threads, **result}  # fmt: skip
            print(json.dumps(row), flush=True)
