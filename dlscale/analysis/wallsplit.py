"""Where a study's time goes: every run's wall time split into what the events measured,
per framework, with the gaps between runs (``wall_split.csv``).

The study exists to time training steps, yet most of its wall time can go elsewhere
(issue 48): this table is the benchmark that says how much, from the events alone, so it
is the same inside the workflow and on run folders copied from a cluster. Per run (rank 0's
events, the launcher's clock):

* ``wall_s``: run_end's time - run_start's time (as runs.csv's ``wall_s``).
* ``timed_s`` / ``warmup_s``: the sums of rank 0's timed / warm-up steps' ``step_s``.
* ``eval_s``: the sum of the eval events' ``eval_s`` (held-out quality, outside every step).
* ``startup_s``: run_start to the start of rank 0's first step (its ``time - step_s``),
  less any evaluation before it; a run that never stepped spent its wall there. By part
  where a runner records one on its first iteration event (``STARTUP_PARTS``); the rest is
  ``startup_other_s``.
* ``other_s``: the rest of the run's wall (between steps, after the last step: the
  launcher's merge of the ranks' events, stopping daemons).
* ``gap_s``: the time before the run in which no run of the study ran (Snakemake's own
  jobs: environments, data, tuning, parity references, scheduling, the launcher's
  interpreter start), charged to the run that follows; ``overlap_s``: the part of the
  run's wall that another run's covered already (runs side by side).

So per row ``wall_s = startup_s + warmup_s + timed_s + eval_s + other_s``, ``startup_s`` =
its parts + ``startup_other_s``, and ``total_s = wall_s + gap_s - overlap_s``; the ``all``
row's ``total_s`` is the span from the first run's start to the last run's end. What lies
before the first run and after the last (building the venvs, the aggregation and figures)
is in Snakemake's log, not in any run's events (docs/wall-time.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from dlscale.analysis.readevents import RunEvents

#: Start-up parts a runner records on its first iteration event (``dlscale.events.
#: STARTUP_SECONDS``: field -> column), in seconds; several fields may share a column
#: (summed). What each measures per framework is in docs/wall-time.md.
STARTUP_PARTS: Mapping[str, str] = MappingProxyType(
    {
        # BigDL: the Spark standalone master and workers started (dlscale.runners.bigdl.spark).
        "spark_cluster_s": "startup_daemons_s",
        # BigDL: the SparkContext and its executors registered with the master; torch: the
        # store, gloo's group and DDP's broadcast; Caffe: MPI_Init and the weights' broadcast;
        # JAX: jax.distributed and the first collective.
        "spark_context_s": "startup_rendezvous_s",
        "rendezvous_s": "startup_rendezvous_s",
        # BigDL: the training RDD read, checked, converted and cached (the driver's log);
        # torch, Caffe, JAX: the rank's training part and held-out share read and converted.
        "input_load_s": "startup_data_s",
        "data_setup_s": "startup_data_s",
        # The framework's import (every rank runner); TensorFlow: the cluster connection,
        # tracing and the initial broadcast (setup_s); the model built and compiled.
        "import_s": "startup_framework_s",
        "setup_s": "startup_framework_s",
        "model_setup_s": "startup_framework_s",
    }
)

#: The start-up columns, each once, in the table's order.
STARTUP_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys(STARTUP_PARTS.values()))

#: The row of the whole study.
ALL = "all"

WALL_SPLIT_COLUMNS: tuple[str, ...] = (
    "framework",
    "runs",
    "failed_runs",
    "wall_s",
    "startup_s",
    *STARTUP_COLUMNS,
    "startup_other_s",
    "warmup_s",
    "timed_s",
    "eval_s",
    "other_s",
    "gap_s",
    "overlap_s",
    "total_s",
    "timed_share",
    "startup_share",
    "eval_share",
)

#: The seconds columns summed per row (the shares are made from them).
_SUMMED = WALL_SPLIT_COLUMNS[WALL_SPLIT_COLUMNS.index("wall_s") : WALL_SPLIT_COLUMNS.index("overlap_s") + 1]


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def run_times(run: RunEvents) -> dict[str, Any]:
    """One run's wall split (the module docstring says what each part is)."""
    start, end = run.start[1], run.end[1]
    began, ended = float(start["time"]), float(end["time"])
    wall = ended - began
    rank0 = run.columns["rank"] == 0
    warm = run.columns["warmup"]
    steps = run.columns["step_s"]
    warmup = float(np.nansum(steps[rank0 & warm]))
    timed = float(np.nansum(steps[rank0 & ~warm]))
    eval_times = [(_number(e.get("time")), _number(e.get("eval_s"))) for _, e in run.evals]
    evaluation = float(sum(seconds for _, seconds in eval_times if not math.isnan(seconds)))
    first = run.first_step or {}
    parts = dict.fromkeys(STARTUP_COLUMNS, 0.0)
    for name, column in STARTUP_PARTS.items():
        value = _number(first.get(name))
        parts[column] += 0.0 if math.isnan(value) else value
    first_start = _number(first.get("time")) - _number(first.get("step_s"))
    if not first:  # never stepped: its wall went to starting up (and any evaluation)
        startup = wall - evaluation
    elif math.isnan(first_start):  # a native log line without a timestamp: the parts alone
        startup = sum(parts.values())
    else:
        before = sum(s for when, s in eval_times if not math.isnan(s) and when <= first_start)
        startup = first_start - began - before
    return {
        "run_id": start["run_id"],
        "framework": start["framework"],
        "failed": end["status"] != "ok",
        "began": began,
        "ended": ended,
        "wall_s": wall,
        "startup_s": startup,
        **parts,
        "startup_other_s": startup - sum(parts.values()),
        "warmup_s": warmup,
        "timed_s": timed,
        "eval_s": evaluation,
        "other_s": wall - startup - warmup - timed - evaluation,
    }


def add_gaps(runs: pd.DataFrame) -> pd.DataFrame:
    """``gap_s`` and ``overlap_s`` of each run (module docstring), runs taken in order of
    their start: the gap is the time since every earlier run had ended, the overlap the part
    of its wall before that moment."""
    ordered = runs.sort_values(["began", "run_id"]).copy()
    gaps, overlaps = [], []
    covered_until = math.nan
    for began, ended in zip(ordered["began"], ordered["ended"], strict=True):
        if math.isnan(covered_until):
            gaps.append(0.0)
            overlaps.append(0.0)
            covered_until = ended
            continue
        gaps.append(max(0.0, began - covered_until))
        overlaps.append(max(0.0, min(ended, covered_until) - began))
        covered_until = max(covered_until, ended)
    ordered["gap_s"] = gaps
    ordered["overlap_s"] = overlaps
    return ordered


def wall_split(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """Per-run splits (``run_times``) -> one row per framework and one for the study
    (``ALL``), columns ``WALL_SPLIT_COLUMNS``, seconds rounded to the millisecond."""
    if not runs:
        return pd.DataFrame({name: pd.Series(dtype="float64") for name in WALL_SPLIT_COLUMNS})
    table = add_gaps(pd.DataFrame.from_records(runs))
    rows = []
    for framework, group in [*sorted(table.groupby("framework")), (ALL, table)]:
        sums = {name: float(group[name].sum()) for name in _SUMMED}
        sums["total_s"] = sums["wall_s"] + sums["gap_s"] - sums["overlap_s"]
        wall = sums["wall_s"]
        rows.append(
            {
                "framework": framework,
                "runs": len(group),
                "failed_runs": int(group["failed"].sum()),
                **{name: round(value, 3) for name, value in sums.items()},
                **{
                    f"{name}_share": round(sums[f"{name}_s"] / wall, 3) if wall > 0 else math.nan
                    for name in ("timed", "startup", "eval")
                },
            }
        )
    return pd.DataFrame.from_records(rows, columns=list(WALL_SPLIT_COLUMNS))


@dataclass
class WallSplit:
    """Collects each run's split while the aggregation reads the events
    (``dlscale.analysis.tables.load_study``'s ``on_run``), then makes the table."""

    runs: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, run: RunEvents) -> None:
        self.runs.append(run_times(run))

    def table(self) -> pd.DataFrame:
        return wall_split(self.runs)
