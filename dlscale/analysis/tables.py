"""Events -> tidy tables: one row per run, one row per rank x iteration.

Everything here is plain pandas on whole columns (no Python loop over iterations), so that
a study of a thousand runs aggregates in seconds and every number can be unit-tested from
hand-written events files.

How a run's numbers are made (the definitions the figures and the report rely on):

* A synchronous data-parallel step ends when the slowest rank ends, so per iteration
  ``step_s`` is the **maximum over ranks**. ``compute_s`` and ``comm_s`` are the **mean
  over ranks**: they describe the work every rank does, and the mean is the fairest single
  number for it (the slowest rank's extra time is already in ``step_s``).
* Exposed communication = ``step_s - compute_s`` per iteration, clipped at 0. It is the
  part of the step not spent computing: gradient synchronisation that did not overlap with
  compute, plus waiting for the slowest rank. That is the communication cost a user pays,
  whatever the framework's own ``comm_s`` says (overlapped communication costs nothing).
* ``input_s`` (optional, NaN where a runner does not report it) is the time a rank waited
  for its next batch before the step began, mean over ranks, median per run; it is not in
  ``step_s``. Comparing it across ``input: memory`` and ``input: pipeline`` runs shows
  where feeding the step becomes the bottleneck.
* Only timed iterations count: warm-up iterations (``warmup: true`` on any rank) are left
  out of every statistic except the loss curve.
* Per run, each quantity is the **median over timed iterations** (robust to the odd slow
  step from a noisy neighbour); ``step_s_min``/``step_s_max`` and
  ``throughput_min``/``throughput_max`` give the spread, and ``step_drift`` (with its
  Mann-Whitney ``step_drift_p``) whether the steps were steady: the second half's median
  step over the first half's (``dlscale.analysis.runstats.step_drift``).
* Throughput is global samples per second: the samples of one iteration summed over the
  ranks that report it, divided by that iteration's ``step_s``, median over iterations.
  Summing reported samples also serves frameworks whose logs report one global number
  (rank 0 with the global batch).
* Samples: a run has one of exactly two shapes. Either every rank reports every iteration
  with ``samples`` equal to the batch per rank (torch, Caffe, TensorFlow mwms), or, where
  the run's first iteration event is rank 0 reporting the global batch (batch x world
  size), rank 0 alone reports every iteration with the global batch (BigDL's driver,
  TensorFlow ps's chief). Anything else (6,400 samples for a batch of 64, 0 samples, a
  rank beside rank 0 in the global shape) is an ``EventError`` naming ``FILE:LINE``: a
  runner cannot write it, and its throughput would be wrong by that factor.
* Every event is checked against its run (``dlscale.analysis.eventchecks``): the schema
  (``dlscale.events.EVENT_SCHEMAS``, by jsonschema: types of every contract field), ranks
  within the world (``0 <= rank < world_size``), the run id against its own fields
  (framework, model, nodes, ranks per node, batch, repeat, network) and against the folder
  the file lies in (``<runs>/<run id>/events.jsonl``), ``world_size`` = nodes x ranks per
  node, ``global_batch`` = batch x world size, one host per rank, one file per run id.
  These cannot come from a real run, so each is an ``EventError`` naming ``FILE:LINE``
  (both files for a run id seen twice), never a row.
* A failed run (``run_end`` status failed; or an "ok" run with run_start/run_end events in
  the middle, duplicate iteration events, a reporting rank that reported no iteration N
  of the iterations 0..last (the last: the spec's warm-up + iterations where run_start
  carries the spec, else the last any rank reported), no timed iterations, or no
  throughput because every timed step took 0 s) is a row with status ``failed``, its
  reason ("rank 1 reported no iteration 37": what a killed rank leaves), and NaN in every
  measured column: never a number counted from half a run. So ``partial_iterations`` is
  0 for every ok run. Only an ok run with a positive, finite throughput can be a speedup
  baseline or get a speedup: never an infinite one.
* Contention: a run_end (or run_start) may carry ``"contention": {"other_busy_share",
  "steal_share", "contended"}`` from the launcher's probe (``dlscale.host.contention``); the
  runs table has those columns (NaN and not contended for files without it). A contended
  run keeps its numbers but is ``flag``-ged, never serves as a speedup baseline while an
  uncontended run of its group can, and is left out of the cells and findings
  (``dlscale.analysis.cells``, which summarises repeats with intervals).

Speedup and efficiency follow ``dlscale.analysis.speedup`` (the comparison group and the
baseline rule); the per-run statistics are computed in ``dlscale.analysis.runstats``. The
cells, findings and claims over these tables are ``dlscale.analysis.cells``, ``findings``
and ``claims``; the aggregation that writes them all is ``dlscale.analysis.aggregate``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.analysis import evals
from dlscale.analysis.evals import EVAL_COLUMNS, MEASURED_QUALITY_COLUMNS, QUALITY_COLUMNS, Target
from dlscale.analysis.eventchecks import (
    check_iterations,
    check_run_start,
    check_run_times,
    check_schema,
    missing_reports,
)
from dlscale.analysis.readevents import RunEvents, read_run
from dlscale.analysis.runstats import decide_status, run_statistics, unsteady
from dlscale.analysis.speedup import add_speedup
from dlscale.events import EventError
from dlscale.host import roofline
from dlscale.networks import HOST
from dlscale.thresholds import threshold

log = logging.getLogger(__name__)

#: Columns of the runs table, in the order they are written to runs.csv.
#: The learning rate a run trained at (run_start's ``learning_rate``, RunSpec.lr_record).
LR_COLUMNS: tuple[str, ...] = ("lr_rule", "lr_base_rate", "lr_base_batch", "lr_warmup_iterations", "lr_rate")

#: What a run's timed steps measure (in runs.csv and, NaN for a failed run, MEASURED_COLUMNS).
STEP_COLUMNS: tuple[str, ...] = (
    "timed_iterations",
    "partial_iterations",
    "step_s",
    "step_s_min",
    "step_s_max",
    "step_drift",
    "step_drift_p",
    "compute_s",
    "comm_s",
    "exposed_comm_s",
    "exposed_comm_share",
    "input_s",
    "throughput",
    "throughput_min",
    "throughput_max",
    "baseline_nodes",
    "speedup",
    "efficiency",
)

RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "framework",
    "model",
    "dataset",
    "scaling",
    "network",
    "nodes",
    "ranks_per_node",
    "world_size",
    "batch_per_rank",
    "global_batch",
    "repeat",
    *LR_COLUMNS,
    "status",
    "reason",
    "iteration_events",
    *STEP_COLUMNS,
    "flops_per_sample",
    "peak_flops",
    "roofline_fraction",
    "loss_first",
    "loss_last",
    *QUALITY_COLUMNS,
    "startup_s",
    "wall_s",
    "threads_per_rank",
    "loadavg_1m",
    "other_busy_share",
    "steal_share",
    "contended",
    "flag",
    "designed_difference",
    "hosts",
    "versions",
    "settings",
    "git_sha",
    "config_sha256",
    "started_utc",
    "events_path",
)

#: Measured columns: NaN for every failed run.
MEASURED_COLUMNS: tuple[str, ...] = (
    *STEP_COLUMNS,
    "loss_first",
    "loss_last",
    *MEASURED_QUALITY_COLUMNS,
    "startup_s",
    "wall_s",
)

#: Run-identifying columns repeated on every row of the iterations table.
ITERATION_RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "framework",
    "model",
    "dataset",
    "scaling",
    "network",
    "nodes",
    "ranks_per_node",
    "batch_per_rank",
    "global_batch",
    "repeat",
)

ITERATION_COLUMNS: tuple[str, ...] = (
    *ITERATION_RUN_COLUMNS,
    "rank",
    "iteration",
    "warmup",
    "samples",
    "step_s",
    "compute_s",
    "comm_s",
    "input_s",
    "loss",
    "host",
)

NEEDS_TWO_NODE_COUNTS = "n/a (needs >= 2 node counts)"


def run_versions(start: Mapping[str, Any]) -> dict[str, Any]:
    """run_start's ``versions`` and, where rank 0 measured the BLAS it loaded (run_start
    ``measured.blas``, Caffe), ``blas_loaded``: the implementation, the library file that
    served ``libblas.so.3`` and the library's own version string."""
    versions = dict(start.get("versions") or {})
    blas = (start.get("measured") or {}).get("blas")
    if isinstance(blas, Mapping):
        text = f"{blas.get('implementation')}: {blas.get('library')}"
        versions["blas_loaded"] = f"{text} ({blas['version']})" if blas.get("version") else text
    return versions


_EVENT_FIELDS = ("rank", "iteration", "warmup", "samples", "step_s", "compute_s", "comm_s", "input_s", "loss")


def _run_record(start: dict[str, Any], end: dict[str, Any], path: str) -> dict[str, Any]:
    """The run-level facts of one events file (what ran, where, and how it ended)."""
    batch = int(start["batch"])
    world = int(start["world_size"])
    global_batch = start.get("global_batch")
    loadavg = start.get("loadavg") or [None]
    hosts = start.get("hosts") or []
    probe = end.get("contention") or start.get("contention") or {}
    share = _number(probe.get("other_busy_share"))
    steal = _number(probe.get("steal_share"))
    contended = probe.get("contended")
    if contended is None:
        busy = share + (0.0 if np.isnan(steal) else steal)
        contended = threshold("contended_share").fails(busy)  # NaN (no probe): not contended
    return {
        "run_id": start["run_id"],
        "framework": start["framework"],
        "model": start["model"],
        "dataset": start.get("dataset"),
        "scaling": start.get("scaling") or "weak",
        "network": start.get("network") or HOST,
        "nodes": int(start["nodes"]),
        "ranks_per_node": int(start["ranks_per_node"]),
        "world_size": world,
        "batch_per_rank": batch,
        "global_batch": int(global_batch) if global_batch is not None else batch * world,
        "repeat": int(start["repeat"]),
        **learning_rate_of(start),
        "reported_status": end["status"],
        "reported_reason": end.get("reason"),
        "startup_s": start.get("startup_s"),
        "wall_s": float(end["time"]) - float(start["time"]),
        "threads_per_rank": start.get("threads_per_rank"),
        "loadavg_1m": loadavg[0] if loadavg else None,
        "other_busy_share": share,
        "steal_share": steal,
        "contended": bool(contended),
        "hosts": ";".join(str(h) for h in hosts),
        "_hosts": list(hosts),
        # The libraries the ranks reported, and what rank 0 measured it loaded (Caffe's BLAS).
        "versions": json.dumps(run_versions(start), sort_keys=True),
        # The run's CPU settings (engine, thread pools and variables; dlscale.launch).
        "settings": json.dumps(start.get("settings") or {}, sort_keys=True),
        "flops_per_sample": roofline.flops_per_sample(start["model"]),
        # Where the optimisation differs from the reference by design (catalog.DIFFERENCES):
        # measured by the parity check, named here, never hidden in a number.
        "designed_difference": catalog.DIFFERENCES.get(_setup(start)),
        "git_sha": start.get("git_sha"),
        "config_sha256": start.get("config_sha256"),
        "started": float(start["time"]),
        "events_path": str(path),
    }


def learning_rate_of(start: dict[str, Any]) -> dict[str, Any]:
    """The run's learning-rate columns; a run recorded before the rule existed trained at
    its spec's one rate from the first step (``fixed``, no warm-up)."""
    recorded = start.get("learning_rate")
    if isinstance(recorded, dict):
        return {c: recorded.get(c) for c in LR_COLUMNS}
    rate = _number((start.get("spec") or {}).get("learning_rate"))
    batch = start.get("global_batch") or int(start["batch"]) * int(start["world_size"])
    return dict(zip(LR_COLUMNS, ("fixed", rate, int(batch), 0, rate), strict=True))


def _setup(start: dict[str, Any]) -> str:
    """The run's set-up name (``catalog.Framework.setups``): TensorFlow's parameter servers
    are ``tensorflow-ps``."""
    options = (start.get("spec") or {}).get("options") or {}
    strategy = options.get("strategy") if isinstance(options, dict) else None
    return f"{start['framework']}-ps" if strategy == "ps" else str(start["framework"])


def _tristate(value: Any) -> bool | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return bool(value)


def _number(value: Any) -> float:
    try:
        return float(value) if value is not None else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def _empty_iterations() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype="float64") for name in ITERATION_COLUMNS})


def load_events(paths: Iterable[str | os.PathLike[str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read events files and return ``(runs, iterations)`` (``load_study`` without the evals)."""
    runs, iterations, _ = load_study(paths)
    return runs, iterations


def load_study(
    paths: Iterable[str | os.PathLike[str]],
    targets: Mapping[str, Target] | None = None,
    on_run: Callable[[RunEvents], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Read events files and return ``(runs, iterations, evals)``.

    ``targets``: model -> the quality target to judge its runs by, over what their specs
    carry (``python -m dlscale.analysis --target``); see ``dlscale.analysis.evals``. ``evals`` has one
    row per eval event, columns ``dlscale.analysis.evals.EVAL_COLUMNS``.

    ``runs`` has one row per file, columns ``RUN_COLUMNS`` (see the module docstring for
    how each number is made). ``iterations`` has one row per rank x iteration event of
    every run, failed runs and warm-up included (they are evidence; the flags say what
    was counted), columns ``ITERATION_COLUMNS``.

    An event that no real run can produce raises ``EventError`` naming ``FILE:LINE``
    (files are written atomically, so that is a bug to fix, not a run to skip): a line
    that breaks the schema (``dlscale.events.EVENT_SCHEMAS``, validated by jsonschema), a
    run_start whose run id disagrees with its own fields or with the folder it lies in, a
    rank outside the world, samples other than the run's batch (see "Samples" in the
    module docstring). Two files with the same run id raise ``EventError`` naming both:
    they would be counted twice in every median. What a failing run can produce (a rank
    that reported no iteration N) makes the run's row failed, with that reason.

    ``on_run`` sees each file as it was read and checked (``dlscale.analysis.wallsplit``
    keeps its timeline), so that no table needs a second pass over the events.
    """
    records: list[dict[str, Any]] = []
    chunks: list[dict[str, np.ndarray]] = []
    counts: list[int] = []
    seen: dict[str, tuple[str, int]] = {}
    for path in paths:
        # One file at a time, a line at a time, its iteration events as typed columns
        # (dlscale.analysis.readevents): memory follows the iterations table, not the file's text.
        run = read_run(path)
        start_line, start = run.start
        end_line, end = run.end
        check_schema(path, start_line, start)
        check_schema(path, end_line, end)
        check_run_start(path, start_line, start)
        run_id = start["run_id"]
        if run_id in seen:
            other, other_line = seen[run_id]
            raise EventError(
                f"{path}:{start_line}: run id {run_id} is also the run id of {other}:{other_line}:"
                " two events files of one run would be counted twice in every median"
            )
        seen[run_id] = (str(path), start_line)
        run_evals = run.evals
        for line, event in run_evals:
            check_schema(path, line, event)
        check_run_times(path, run)
        evals.check_evals(str(path), start, run_evals)
        record = _run_record(start, end, str(path))
        record["_stray_events"] = run.stray
        target = (targets or {}).get(start["model"]) or evals.spec_target(start)
        stop = evals.target_stop([e for _, e in run_evals], evals.spec_target(start))
        # A run that trained to its target stopped at the first evaluation that met it.
        record["_spec_iterations"] = float(stop) if stop is not None else _spec_iterations(start)
        record.update(
            evals.summarise([e for _, e in run_evals], start["model"], start.get("dataset"), target)
        )
        record["_evals"] = run_evals
        records.append(record)
        if on_run is not None:
            on_run(run)
        chunks.append(run.columns)
        counts.append(run.iterations)

    log.info("read %d events files, %d iteration events", len(records), sum(counts))
    if not records:
        runs = pd.DataFrame({name: pd.Series(dtype="float64") for name in RUN_COLUMNS})
        return runs, _empty_iterations(), _empty_evals()
    run_info = pd.DataFrame.from_records(records)
    run_info.index.name = "_run"

    codes = np.repeat(np.arange(len(records)), counts)
    columns = {"_run": codes}
    for name in ("_line", *_EVENT_FIELDS):
        parts = [chunk.pop(name) for chunk in chunks]
        columns[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        del parts
    iterations = pd.DataFrame(columns, copy=False)
    del columns, chunks
    run_info["_global_shape"] = check_iterations(iterations, run_info)
    reported = iterations.groupby("_run")["iteration"].max().reindex(run_info.index).fillna(-1)
    for run, record in enumerate(records):
        evals.check_evals_within(record["events_path"], record["_evals"], int(reported.iat[run]) + 1)
    run_info["_missing"] = missing_reports(iterations, run_info)
    iterations["host"] = _hosts_of(iterations, run_info)

    stats = run_statistics(iterations, len(records))
    runs = run_info.join(stats)
    runs["iteration_events"] = np.asarray(counts, dtype="int64")
    runs = decide_status(runs, MEASURED_COLUMNS)
    for name in ("learned", "reached_target"):  # true, false or unknown (None), never 0.0
        runs[name] = runs[name].map(_tristate).astype(object)
    runs = add_speedup(runs)
    runs["flag"] = run_flags(runs)
    runs = add_roofline(runs, None)
    runs["started_utc"] = pd.to_datetime(runs["started"], unit="s", utc=True)
    runs = runs.reset_index(drop=True)[list(RUN_COLUMNS)]

    # Each row's run columns taken from its run (no merge: a merge copies the whole table).
    table = {
        name: run_info[name].take(codes).reset_index(drop=True)
        if name in ITERATION_RUN_COLUMNS
        else iterations[name]
        for name in ITERATION_COLUMNS
    }
    del iterations
    return runs, pd.DataFrame(table, copy=False), _evals_table(records)


def _empty_evals() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype="float64") for name in EVAL_COLUMNS})


#: The evals table's columns from the run (the first ones), the rest from each event.
_EVAL_RUN_FIELDS = EVAL_COLUMNS[: EVAL_COLUMNS.index("iteration")]
_EVAL_FIELDS = EVAL_COLUMNS[len(_EVAL_RUN_FIELDS) :]


def _evals_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per eval event of every run (failed runs' too: they are evidence)."""
    rows = [
        {**{k: record[k] for k in _EVAL_RUN_FIELDS}, **{k: event.get(k) for k in _EVAL_FIELDS}}
        for record in records
        for _, event in record["_evals"]
    ]
    if not rows:
        return _empty_evals()
    return pd.DataFrame.from_records(rows, columns=list(EVAL_COLUMNS))


def _spec_iterations(start: dict[str, Any]) -> float:
    """Warm-up plus timed iterations from the run's spec (NaN for a file without one)."""
    spec = start.get("spec") or {}
    if isinstance(spec.get("iterations"), int) and isinstance(spec.get("warmup"), int):
        return float(spec["iterations"] + spec["warmup"])
    return float("nan")


def _hosts_of(iterations: pd.DataFrame, run_info: pd.DataFrame) -> pd.Series:
    """Each iteration event's host: its run's ``hosts`` list at its rank (one entry per
    rank, ``check_run_start``; the rank is within the world, ``check_iterations``)."""
    lists = run_info["_hosts"]
    lengths = lists.map(len).to_numpy().astype("int64")
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype("int64")
    names = pd.Series([str(host) for hosts in lists for host in hosts], dtype="str")
    at = offsets[iterations["_run"].to_numpy()] + iterations["rank"].to_numpy()
    return names.take(at).reset_index(drop=True)


def run_flags(runs: pd.DataFrame) -> pd.Series:
    """Why a run's numbers should not be taken at face value (None when nothing is wrong).

    ``contended``: the host's CPUs were busy with other work during the run (its
    contention probe's ``other_busy_share``); one rank with an exposed "communication"
    share that fails the ``fixed_overhead_share`` threshold: fixed per-iteration overhead, nothing is
    communicated with one rank; ``unsteady``: the halves of its timed steps differ beyond
    the ``step_drift`` band (``runstats.unsteady``), so its median step is neither the
    cold nor the warm figure. Cell-level flags (superlinear efficiency) are in
    ``dlscale.analysis.cells``.
    """
    empty = pd.Series("", index=runs.index, dtype=object)
    contended = runs["contended"] if "contended" in runs else pd.Series(False, index=runs.index)
    contended = contended.astype(object).where(contended.notna(), False).astype(bool)
    share = runs["other_busy_share"] if "other_busy_share" in runs else pd.Series(np.nan, index=runs.index)
    busy = empty.where(~contended, "contended: the host was busy with other work during the run")
    measured = contended & share.notna()
    busy[measured] = [
        f"contended: other work took {v:.0%} of the host's CPUs during the run" for v in share[measured]
    ]
    exposed = runs["exposed_comm_share"]
    fixed = runs["world_size"].eq(1) & exposed.map(threshold("fixed_overhead_share").fails).astype(bool)
    overhead = empty.copy()
    overhead[fixed] = [
        f"fixed overhead: exposed 'communication' is {v:.0%} of the step with one rank"
        for v in exposed[fixed]
    ]
    drifted = empty.copy()
    moved = unsteady(runs)  # all False without step_drift (a table from before it)
    if moved.any():
        drifted[moved] = [
            f"unsteady: the second half of its timed steps ran at {d:.2f}x the first half's median step"
            f" (Mann-Whitney p={p:.1g}): timed partly outside a steady state"
            f" ({'still warming up: JIT compilation, cold caches' if d < 1 else 'slowed while timed'})"
            for d, p in zip(runs.loc[moved, "step_drift"], runs.loc[moved, "step_drift_p"], strict=True)
        ]
    flags = empty.copy()
    for part in (busy, overhead, drifted):
        flags = flags + np.where(flags.ne("") & part.ne(""), "; ", "") + part
    return flags.where(flags.ne(""), None).astype(object)


def add_roofline(runs: pd.DataFrame, peak: Mapping[str, Any] | None) -> pd.DataFrame:
    """``peak_flops`` (the host's matmul peak at the run's threads per rank, from the
    workflow's measurement, dlscale.host.roofline) and ``roofline_fraction`` = throughput x
    FLOPs per sample / (world size x peak): NaN where no peak was measured or it was
    refused as contended. An ok run's ``flag`` gains ``roofline.flag_of``'s reason (a
    refused peak, a fraction above 1); a flag from an earlier call is replaced."""
    peaks = runs["threads_per_rank"].map(lambda t: roofline.peak_of(peak, t)).astype("float64")
    runs["peak_flops"] = peaks
    achieved = runs["throughput"].astype("float64") * runs["flops_per_sample"].astype("float64")
    runs["roofline_fraction"] = achieved / (runs["world_size"].astype("float64") * peaks)
    if "flag" not in runs:
        return runs
    for index in runs.index[runs["throughput"].notna()]:
        old = runs.at[index, "flag"]
        parts = (
            [p for p in str(old).split("; ") if not p.startswith("roofline: ")]
            if isinstance(old, str)
            else []
        )
        why = roofline.flag_of(runs.at[index, "roofline_fraction"], runs.at[index, "threads_per_rank"], peak)
        new = "; ".join(parts + ([why] if why else [])) or None
        if new != old:
            runs.at[index, "flag"] = new
    return runs
