"""The runner arm of the in-process training benchmarks, framework-neutral (no framework import).

``runner_arm(train, spec, data, work, repeat)`` runs a runner's own ``train(ctx)`` (the
code path of every study run) as a lone rank, in this process, and times it from its
iteration events: the gaps between successive events cover the whole loop body (next
batch, step, event writing), which is what the harness costs on top of the step itself.
CPU time is stamped at every event too (steady on a shared node; see StampedContext):
its median per iteration, and its low quantile (``timing.quantile_gap``), the
iteration's own cost where a neighbour inflates some steps.
``rotate_arms`` runs a worker's arms (runner, bare loop, matmul peak) in rotated order.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.timing import CPU_QUANTILE, arm_order, median_gap, quantile_gap, throughput
from dlscale.events import PartWriter
from dlscale.host import placement as placement_mod
from dlscale.runners.common import RunContext
from dlscale.runspec import RunSpec

#: One arm of a repeat: the repeat number in, its measurements out.
Arm = Callable[[int], Mapping[str, float]]


@dataclass
class StampedContext(RunContext):
    """The runner's context, also noting this process's CPU time at every iteration event.

    record_iteration is called at the same point of every iteration, so the CPU time
    between two calls is what one whole iteration cost this process. On a shared,
    oversubscribed node that is far steadier than wall time (being descheduled costs
    wall time, not CPU time), so the benchmark reports both.
    """

    cpu_stamps: list[float] = field(default_factory=list)

    def record_iteration(self, iteration: int, **fields: Any) -> None:  # type: ignore[override]
        self.cpu_stamps.append(time.process_time())
        super().record_iteration(iteration, **fields)


def context(spec: RunSpec, data: Path, part: Path) -> StampedContext:
    """The context of a lone rank (rank 0 of 1) writing its events to ``part``."""
    where = placement_mod.detect({})
    return StampedContext(spec=spec, placement=where, data_dir=data, writer=PartWriter(part))


def runner_arm(
    train: Callable[[RunContext], None], spec: RunSpec, data: Path, work: Path, repeat: int
) -> dict[str, float]:
    """The runner's loop as a study run executes it; timed from its own events' stamps."""
    part = work / f"runner{repeat}.jsonl"
    ctx = context(spec, data, part)
    try:
        train(ctx)
    finally:
        ctx.writer.close()
    lines = part.read_text(encoding="utf-8").splitlines()
    events = [e for e in map(json.loads, filter(None, lines)) if e["event"] == "iteration"]
    first = spec.warmup - 1  # the last warm-up iteration's end starts the clock
    return {
        "samples_per_s": throughput(spec.batch, median_gap([e["time"] for e in events[first:]])),
        "samples_per_cpu_s": throughput(spec.batch, median_gap(ctx.cpu_stamps[first:])),
        "samples_per_cpu_q_s": throughput(spec.batch, quantile_gap(ctx.cpu_stamps[first:], CPU_QUANTILE)),
        "self_timed_samples_per_s": throughput(
            spec.batch, statistics.median(e["step_s"] for e in events[spec.warmup :])
        ),
    }


def rotate_arms(spec: RunSpec, repeats: int, arms: Mapping[str, Arm]) -> Iterator[dict[str, Any]]:
    """Run the arms in rotated order per repeat; one row per arm and repeat."""
    if spec.warmup < 1:
        raise SystemExit("the training benchmark needs warmup >= 1 (the last warm-up stamp starts the clock)")
    for repeat in range(repeats):
        for arm in arm_order(repeat, tuple(arms)):
            result = arms[arm](repeat)
            yield {"arm": arm, "repeat": repeat, "model": spec.model, "batch": spec.batch,
                   "threads": spec.threads_per_rank, **result}  # fmt: skip
