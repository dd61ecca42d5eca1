"""Events -> tidy tables: one row per run, one row per rank x iteration, and the findings.

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
  out of every statistic except the loss curve, and so are iterations that some rank did
  not report (a partial iteration would undercount the samples of that step).
* Per run, each quantity is the **median over timed iterations** (robust to the odd slow
  step from a noisy neighbour); ``step_s_min``/``step_s_max`` and
  ``throughput_min``/``throughput_max`` give the spread.
* Throughput is global samples per second: the samples of one iteration summed over the
  ranks that report it, divided by that iteration's ``step_s``, median over iterations.
  Summing reported samples also serves frameworks whose logs report one global number
  (rank 0 with the global batch).
* A failed run (``run_end`` status failed, or an "ok" run with no timed iterations, or a
  file that breaks the structure) is a row with status ``failed``, its reason, and NaN in
  every measured column: never a number counted from half a run.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dlscale import atomic
from dlscale.events import read_events
from dlscale.networks import HOST

log = logging.getLogger(__name__)

#: Columns of the runs table, in the order they are written to runs.csv.
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
    "status",
    "reason",
    "iteration_events",
    "timed_iterations",
    "partial_iterations",
    "step_s",
    "step_s_min",
    "step_s_max",
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
    "loss_first",
    "loss_last",
    "startup_s",
    "wall_s",
    "threads_per_rank",
    "loadavg_1m",
    "hosts",
    "versions",
    "git_sha",
    "config_sha256",
    "started_utc",
    "events_path",
)

#: Measured columns: NaN for every failed run.
MEASURED_COLUMNS: tuple[str, ...] = (
    "timed_iterations",
    "partial_iterations",
    "step_s",
    "step_s_min",
    "step_s_max",
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
    "loss_first",
    "loss_last",
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

FINDINGS_COLUMNS: tuple[str, ...] = (
    "model",
    "network",
    "frameworks",
    "node_counts",
    "fastest_compute",
    "fastest_compute_throughput",
    "fastest_compute_nodes",
    "best_communication",
    "best_communication_exposed_share",
    "best_communication_nodes",
    "best_scaling",
    "best_scaling_efficiency",
    "best_scaling_nodes",
    "best_scaling_baseline_nodes",
)

#: Runs compared for speedup share these (plus the batch key, see ``add_speedup``).
SPEEDUP_GROUP: tuple[str, ...] = ("framework", "model", "dataset", "scaling", "network", "ranks_per_node")

#: The ``network`` of a run whose run_start names none: its ranks talked over this host.
HOST_NETWORK = HOST

NEEDS_TWO_NODE_COUNTS = "n/a (needs >= 2 node counts)"

_EVENT_FIELDS = ("rank", "iteration", "warmup", "samples", "step_s", "compute_s", "comm_s", "input_s", "loss")


def _run_record(start: dict[str, Any], end: dict[str, Any], path: str) -> dict[str, Any]:
    """The run-level facts of one events file (what ran, where, and how it ended)."""
    batch = int(start["batch"])
    world = int(start["world_size"])
    global_batch = start.get("global_batch")
    loadavg = start.get("loadavg") or [None]
    hosts = start.get("hosts") or []
    return {
        "run_id": start["run_id"],
        "framework": start["framework"],
        "model": start["model"],
        "dataset": start.get("dataset"),
        "scaling": start.get("scaling") or "weak",
        "network": start.get("network") or HOST_NETWORK,
        "nodes": int(start["nodes"]),
        "ranks_per_node": int(start["ranks_per_node"]),
        "world_size": world,
        "batch_per_rank": batch,
        "global_batch": int(global_batch) if global_batch is not None else batch * world,
        "repeat": int(start["repeat"]),
        "reported_status": end["status"],
        "reported_reason": end.get("reason"),
        "startup_s": start.get("startup_s"),
        "wall_s": float(end["time"]) - float(start["time"]),
        "threads_per_rank": start.get("threads_per_rank"),
        "loadavg_1m": loadavg[0] if loadavg else None,
        "hosts": ";".join(str(h) for h in hosts),
        "_hosts": list(hosts),
        "versions": json.dumps(start.get("versions") or {}, sort_keys=True),
        "git_sha": start.get("git_sha"),
        "config_sha256": start.get("config_sha256"),
        "started": float(start["time"]),
        "events_path": str(path),
    }


def _empty_iterations() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype="float64") for name in ITERATION_COLUMNS})


def load_events(paths: Iterable[str | os.PathLike[str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read events files and return ``(runs, iterations)``.

    ``runs`` has one row per file, columns ``RUN_COLUMNS`` (see the module docstring for
    how each number is made). ``iterations`` has one row per rank x iteration event of
    every run, failed runs and warm-up included (they are evidence; the flags say what
    was counted), columns ``ITERATION_COLUMNS``.

    A file that breaks the events schema raises ``EventError`` (files are written
    atomically, so that is a bug to fix, not a run to skip). Two files with the same run
    id raise ``ValueError``: they would be counted twice in every median.
    """
    records: list[dict[str, Any]] = []
    iteration_events: list[dict[str, Any]] = []
    counts: list[int] = []
    for path in paths:
        events = read_events(path)
        iterations = [event for event in events[1:-1] if event["event"] == "iteration"]
        record = _run_record(events[0], events[-1], str(path))
        record["_stray_events"] = len(events) - 2 - len(iterations)
        records.append(record)
        iteration_events.extend(iterations)
        counts.append(len(iterations))

    log.info("read %d events files, %d iteration events", len(records), len(iteration_events))
    if not records:
        runs = pd.DataFrame({name: pd.Series(dtype="float64") for name in RUN_COLUMNS})
        return runs, _empty_iterations()
    run_info = pd.DataFrame.from_records(records)
    duplicated = run_info["run_id"][run_info["run_id"].duplicated()]
    if len(duplicated):
        raise ValueError(f"run ids appear in more than one events file: {', '.join(sorted(set(duplicated)))}")
    run_info.index.name = "_run"

    iterations = pd.DataFrame.from_records(iteration_events, columns=list(_EVENT_FIELDS))
    iterations.insert(0, "_run", np.repeat(np.arange(len(records)), counts))
    iterations = _typed_iterations(iterations)
    hosts = _hosts_table(run_info)
    iterations = iterations.merge(hosts, on=["_run", "rank"], how="left")

    stats = _run_statistics(iterations, len(records))
    runs = run_info.join(stats)
    runs["iteration_events"] = np.asarray(counts, dtype="int64")
    runs = _decide_status(runs)
    runs = add_speedup(runs)
    runs["started_utc"] = pd.to_datetime(runs["started"], unit="s", utc=True)
    runs = runs.reset_index(drop=True)[list(RUN_COLUMNS)]

    run_cols = run_info[list(ITERATION_RUN_COLUMNS)]
    iterations = iterations.merge(run_cols, left_on="_run", right_index=True, how="left")
    iterations = iterations.reset_index(drop=True)[list(ITERATION_COLUMNS)]
    return runs, iterations


def _typed_iterations(iterations: pd.DataFrame) -> pd.DataFrame:
    """Give the raw event columns their types (null compute/comm/loss become NaN)."""
    out = iterations.copy()
    for name in ("rank", "iteration", "samples"):
        out[name] = out[name].astype("int64")
    for name in ("step_s", "compute_s", "comm_s", "input_s", "loss"):
        out[name] = pd.to_numeric(out[name], errors="coerce").astype("float64")
    out["warmup"] = out["warmup"].eq(True)  # absent (NaN) means a timed iteration
    return out


def _hosts_table(run_info: pd.DataFrame) -> pd.DataFrame:
    """(run, rank) -> host, from each run's ``hosts`` list (one entry per rank)."""
    lists = run_info["_hosts"]
    lengths = lists.map(len).to_numpy()
    runs = np.repeat(run_info.index.to_numpy(), lengths)
    ranks = np.concatenate([np.arange(n) for n in lengths]) if len(lengths) else np.array([], dtype="int64")
    names = [str(host) for hosts in lists for host in hosts]
    return pd.DataFrame({"_run": runs.astype("int64"), "rank": ranks.astype("int64"), "host": names})


def _run_statistics(iterations: pd.DataFrame, n_runs: int) -> pd.DataFrame:
    """Per-run medians over timed iterations, from per-iteration cross-rank reductions."""
    index = pd.RangeIndex(n_runs, name="_run")
    duplicates = iterations.duplicated(["_run", "rank", "iteration"])
    duplicated_runs = pd.Series(False, index=index)
    duplicated_runs[iterations.loc[duplicates, "_run"].unique()] = True

    per_iter = iterations.groupby(["_run", "iteration"], sort=False).agg(
        step_s=("step_s", "max"),
        compute_s=("compute_s", "mean"),
        comm_s=("comm_s", "mean"),
        input_s=("input_s", "mean"),
        samples=("samples", "sum"),
        warmup=("warmup", "any"),
        reports=("rank", "size"),
    )
    run_of_iter = per_iter.index.get_level_values("_run")
    expected = per_iter["reports"].groupby(run_of_iter).transform("max")
    complete = per_iter["reports"].eq(expected)
    per_iter["exposed_comm_s"] = (per_iter["step_s"] - per_iter["compute_s"]).clip(lower=0.0)
    positive = per_iter["step_s"].where(per_iter["step_s"] > 0)
    per_iter["exposed_comm_share"] = per_iter["exposed_comm_s"] / positive
    per_iter["throughput"] = per_iter["samples"] / positive

    timed = per_iter[~per_iter["warmup"] & complete]
    grouped = timed.groupby(level="_run")
    stats = grouped.agg(
        timed_iterations=("step_s", "size"),
        step_s=("step_s", "median"),
        step_s_min=("step_s", "min"),
        step_s_max=("step_s", "max"),
        compute_s=("compute_s", "median"),
        comm_s=("comm_s", "median"),
        exposed_comm_s=("exposed_comm_s", "median"),
        exposed_comm_share=("exposed_comm_share", "median"),
        input_s=("input_s", "median"),
        throughput=("throughput", "median"),
        throughput_min=("throughput", "min"),
        throughput_max=("throughput", "max"),
    ).reindex(index)
    stats["timed_iterations"] = stats["timed_iterations"].fillna(0).astype("int64")
    partial = (~per_iter["warmup"] & ~complete).groupby(run_of_iter).sum()
    stats["partial_iterations"] = partial.reindex(index).fillna(0).astype("int64")

    first, last = _loss_ends(iterations)
    stats["loss_first"] = first.reindex(index)
    stats["loss_last"] = last.reindex(index)
    stats["_duplicates"] = duplicated_runs
    return stats


def loss_curve(iterations: pd.DataFrame, run_key: str = "run_id") -> pd.DataFrame:
    """The loss curve of each run: the loss of its lowest reporting rank, every iteration.

    Rank 0 is what every framework reports natively (BigDL and Caffe logs only carry the
    driver's / rank 0's loss), so it is the one loss comparable across frameworks. Warm-up
    iterations are kept: the start of the curve is where the loss moves most. Returns the
    rows of ``iterations`` for that rank with a non-null loss, sorted by run and iteration.
    """
    has_loss = iterations[iterations["loss"].notna()]
    lowest = has_loss.groupby(run_key)["rank"].transform("min")
    curve = has_loss[has_loss["rank"].eq(lowest)]
    return curve.sort_values([run_key, "iteration"], kind="stable")


def _loss_ends(iterations: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    curve = loss_curve(iterations, run_key="_run")
    grouped = curve.groupby("_run")["loss"]
    return grouped.first(), grouped.last()


def _decide_status(runs: pd.DataFrame) -> pd.DataFrame:
    """Final status and reason; failed runs get NaN in every measured column."""
    out = runs.copy()
    reported_ok = out["reported_status"].eq("ok")
    reason = out["reported_reason"].astype(object).where(~reported_ok, None)
    failed = ~reported_ok
    reason = reason.where(~(failed & reason.isna()), "run reported failure without a reason")
    checks: list[tuple[pd.Series, str]] = [
        (out["_stray_events"].gt(0), "events file has run_start/run_end events in the middle"),
        (out["_duplicates"], "duplicate iteration events for the same rank and iteration"),
        (out["timed_iterations"].eq(0), "no timed iterations"),
    ]
    for mask, why in checks:
        newly = reported_ok & mask & ~failed
        reason = reason.where(~newly, why)
        failed = failed | newly
    out["status"] = np.where(failed, "failed", "ok")
    out["reason"] = reason
    measured = [name for name in MEASURED_COLUMNS if name in out.columns]
    for name in measured:
        out[name] = pd.to_numeric(out[name], errors="coerce").astype("float64")
    out.loc[failed, measured] = np.nan
    for name in ("timed_iterations", "partial_iterations"):
        out[name] = out[name].round().astype("Int64")
    return out


def _batch_key(runs: pd.DataFrame) -> pd.Series:
    return runs["global_batch"].where(runs["scaling"].eq("strong"), runs["batch_per_rank"])


def add_speedup(runs: pd.DataFrame) -> pd.DataFrame:
    """Add ``baseline_nodes``, ``speedup`` and ``efficiency`` to a runs table.

    Runs are compared within the same framework, model, dataset, scaling mode, network
    (``host`` or an emulated interconnect: a 2-node run on emulated 1 GbE is measured
    against the 1-node run on the same network, not against the host's loopback) and
    ranks per node, and the same batch: the batch per rank under weak scaling (it is what stays
    fixed) and the global batch under strong scaling. The baseline is the smallest node
    count among the group's ok runs (a failed 1-node run makes the next count the
    baseline rather than leaving the group without one), and its throughput is the median
    over the ok baseline repeats.

    ``speedup = throughput / baseline throughput`` and
    ``efficiency = speedup / (nodes / baseline_nodes)``. Throughput (global samples per
    second) is the right basis for both modes: under strong scaling the global batch is
    fixed, so the throughput ratio equals the classic time ratio T_base / T_n; under weak
    scaling each step does more work as nodes grow, so a time ratio would ideally stay at
    1 and hide the gain, while the throughput ratio still ideally equals the node ratio.
    One formula, one ideal line (``nodes / baseline_nodes``) for both.
    """
    out = runs.copy()
    for name in ("baseline_nodes", "speedup", "efficiency"):
        out[name] = np.nan
    ok = out["status"].eq("ok") & out["throughput"].notna()
    if not ok.any():
        return out
    okr = out.loc[ok]
    keys = [okr[name].astype(object).fillna("") for name in SPEEDUP_GROUP] + [_batch_key(okr)]
    baseline_nodes = okr["nodes"].groupby(keys, dropna=False).transform("min")
    at_baseline = okr["throughput"].where(okr["nodes"].eq(baseline_nodes))
    baseline_tp = at_baseline.groupby(keys, dropna=False).transform("median")
    speedup = okr["throughput"] / baseline_tp
    out.loc[ok, "baseline_nodes"] = baseline_nodes.astype("float64")
    out.loc[ok, "speedup"] = speedup
    out.loc[ok, "efficiency"] = speedup / (okr["nodes"] / baseline_nodes)
    return out


def _pick(table: pd.DataFrame, column: str, better: Callable[[pd.Series], Any]) -> tuple[str, float] | None:
    """Median of ``column`` per framework; return the best framework and its value.

    Ties go to the alphabetically first framework so the answer is stable.
    """
    medians = table.groupby("framework")[column].median().dropna().sort_index()
    if medians.empty:
        return None
    name = better(medians)
    return str(name), float(medians[name])


def findings(runs: pd.DataFrame) -> pd.DataFrame:
    """Answer the study's three questions per model (and network), from ok runs only.

    * ``fastest_compute``: the framework with the highest median throughput at the
      model's smallest node count (computing speed, as the original study measured it on
      one node).
    * ``best_communication``: the lowest median exposed-communication share of the step
      at the model's largest node count (where communication matters most). With a single
      rank there is nothing to communicate, so that case is ``n/a``.
    * ``best_scaling``: the highest median efficiency at the model's largest node count,
      among frameworks that also have an ok baseline at a smaller node count (an
      efficiency measured against itself is 1 by definition and proves nothing). With one
      node count the answer is ``"n/a (needs >= 2 node counts)"``.

    Every question is answered even with one framework (it is then the answer), so a
    small study still gets a table. Values are NaN where the answer is ``n/a``.
    """
    rows: list[dict[str, Any]] = []
    if runs.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in FINDINGS_COLUMNS})
    ok = runs[runs["status"].eq("ok")]
    network_of = runs["network"] if "network" in runs else pd.Series("host", index=runs.index)
    # One answer per model and network: runs on an emulated interconnect answer the same
    # questions on that network, never mixed into the host's medians.
    pairs = sorted({(m, n) for m, n in zip(runs["model"], network_of, strict=True) if isinstance(m, str)})
    pairs.sort(key=lambda pair: (pair[0], pair[1] != "host", pair[1]))
    for model, network in pairs:
        mine = ok[ok["model"].eq(model) & network_of.loc[ok.index].eq(network)]
        row: dict[str, Any] = {name: np.nan for name in FINDINGS_COLUMNS}
        row["model"] = model
        row["network"] = network
        if mine.empty:
            for question in ("fastest_compute", "best_communication", "best_scaling"):
                row[question] = "n/a (no ok runs)"
            row["frameworks"] = ""
            row["node_counts"] = ""
            rows.append(row)
            continue
        node_counts = sorted(int(n) for n in mine["nodes"].unique())
        row["frameworks"] = ";".join(sorted(mine["framework"].unique()))
        row["node_counts"] = ";".join(str(n) for n in node_counts)
        smallest, largest = node_counts[0], node_counts[-1]

        fastest = _pick(mine[mine["nodes"].eq(smallest)], "throughput", lambda s: s.idxmax())
        if fastest:
            row["fastest_compute"], row["fastest_compute_throughput"] = fastest
            row["fastest_compute_nodes"] = smallest
        else:
            row["fastest_compute"] = "n/a (no throughput)"

        at_largest = mine[mine["nodes"].eq(largest)]
        multi_rank = at_largest[at_largest["world_size"].gt(1)]
        best_comm = _pick(multi_rank, "exposed_comm_share", lambda s: s.idxmin())
        if best_comm:
            row["best_communication"], row["best_communication_exposed_share"] = best_comm
            row["best_communication_nodes"] = largest
        elif multi_rank.empty:
            row["best_communication"] = "n/a (needs > 1 rank)"
        else:
            row["best_communication"] = "n/a (no compute/communication split)"

        if len(node_counts) < 2:
            row["best_scaling"] = NEEDS_TWO_NODE_COUNTS
        else:
            scaled = at_largest[at_largest["baseline_nodes"].lt(largest)]
            best_scale = _pick(scaled, "efficiency", lambda s: s.idxmax())
            if best_scale:
                row["best_scaling"], row["best_scaling_efficiency"] = best_scale
                row["best_scaling_nodes"] = largest
                base = scaled.loc[scaled["framework"].eq(best_scale[0]), "baseline_nodes"]
                row["best_scaling_baseline_nodes"] = int(base.min())
            else:
                row["best_scaling"] = f"n/a (no framework has a smaller baseline than {largest} nodes)"
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(FINDINGS_COLUMNS))
    for name in FINDINGS_COLUMNS:
        if name.endswith("_nodes"):
            table[name] = table[name].astype("Int64")
    return table


def write_tables(
    runs: pd.DataFrame,
    iterations: pd.DataFrame,
    findings: pd.DataFrame,
    runs_csv: str | os.PathLike[str],
    runs_parquet: str | os.PathLike[str],
    iterations_parquet: str | os.PathLike[str],
    findings_csv: str | os.PathLike[str],
) -> None:
    """Write the four tables, each atomically (temporary file in the same dir + rename)."""
    atomic.replace_with(runs_csv, lambda tmp: runs.to_csv(tmp, index=False))
    atomic.replace_with(runs_parquet, lambda tmp: runs.to_parquet(tmp, index=False))
    atomic.replace_with(iterations_parquet, lambda tmp: iterations.to_parquet(tmp, index=False))
    atomic.replace_with(findings_csv, lambda tmp: findings.to_csv(tmp, index=False))


def summary(runs: pd.DataFrame) -> str:
    """One line for logs: how many runs, how many failed and why."""
    if runs.empty:
        return "0 runs"
    failed = runs[runs["status"].eq("failed")]
    text = f"{len(runs)} runs, {len(runs) - len(failed)} ok, {len(failed)} failed"
    if len(failed):
        reasons = failed["reason"].astype(str).value_counts()
        text += " (" + "; ".join(f"{n} x {why}" for why, n in reasons.items()) + ")"
    return text


__all__: Sequence[str] = (
    "FINDINGS_COLUMNS",
    "HOST_NETWORK",
    "ITERATION_COLUMNS",
    "NEEDS_TWO_NODE_COUNTS",
    "RUN_COLUMNS",
    "add_speedup",
    "findings",
    "load_events",
    "loss_curve",
    "summary",
    "write_tables",
)
