"""Cells: each framework's runs summarised over their repeats, with intervals and flags.

A **cell** is one framework in one comparison group (``dlscale.analysis.speedup``) at one
node count: framework, model, dataset, scaling mode, network, ranks per node, batch (the
batch per rank under weak scaling, the global batch under strong: what stays fixed) and
nodes. Its **repeats are the independent samples**. Each run contributes one value per
quantity, its median over timed iterations (``dlscale.analysis.tables``); iterations are
never samples: they share the run's start-up, placement, neighbours and thermal state, and
treating them as independent would make every interval too narrow. Speedup and efficiency
follow the speedup module's one baseline rule, on the cells' medians.

Which interval is used, and why, is ``dlscale.analysis.stats``'s docstring.

Values outside physics are **flagged** with their likely cause and **never crowned**
(the column ``not_crowned_for`` names the questions a flag blocks):

* *superlinear*: an efficiency whose whole interval lies above 1 (or, without an
  interval, above 1 at all). On emulated nodes sharing a host's cores this cannot be
  real; it means the baseline was slowed (a busy baseline: other work on its cores). It
  blocks ``best_scaling``.
* *fixed overhead at one rank*: an exposed-"communication" share that fails the
  ``fixed_overhead_share`` threshold (``dlscale.thresholds``) with a single rank, where
  nothing is communicated. The cell itself is flagged (its share is no communication), and under weak scaling every cell
  scaled against it is too: a fixed per-iteration cost is spread over a global batch
  that grows with the nodes, so its efficiency measures that amortisation, not
  communication. It blocks ``best_scaling`` there.
* *contended*: a run whose host was busy with other work (``contended`` in the runs
  table, from the run's contention probe, ``dlscale.host.contention``) is left out of its
  cell; a cell whose every repeat was contended is ``excluded`` from the findings, with
  the reason shown.
* *unsteady*: repeats whose timed steps drifted (``runstats.unsteady``: the halves' median
  steps differ beyond the ``step_drift`` band, e.g. a JVM still compiling) are counted in
  the ``note``, not left out: the cell's numbers are what runs of that length measure,
  and the note says they are not a steady state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.analysis.convergence import CELL_QUALITY_COLUMNS, cell_quality
from dlscale.analysis.runstats import unsteady
from dlscale.analysis.speedup import SPEEDUP_GROUP, baseline_nodes, batch_key, group_keys
from dlscale.analysis.stats import (
    BASELINE,
    CONFIDENCE,
    RANGE_LOW_N,
    SINGLE_RUN,
    Interval,
    finite_sorted,
    median_interval,
    ratio_interval,
)
from dlscale.networks import HOST
from dlscale.runid import cell_name
from dlscale.thresholds import threshold

#: The three questions of the study (``dlscale.analysis.findings``) and the quantity each
#: compares; a cell's flags name the questions they block.
FASTEST_COMPUTE = "fastest_compute"
BEST_COMMUNICATION = "best_communication"
BEST_SCALING = "best_scaling"
QUESTIONS: dict[str, tuple[str, str, bool]] = {
    # question: (cells column, findings name of the value, higher is better)
    FASTEST_COMPUTE: ("throughput", "throughput", True),
    BEST_COMMUNICATION: ("exposed_comm_share", "exposed_share", False),
    BEST_SCALING: ("efficiency", "efficiency", True),
}
NO_CLEAR_WINNER = "no clear winner"

#: A cell: one framework in one comparison group at one node count.
CELL_KEYS: tuple[str, ...] = (*SPEEDUP_GROUP, "nodes")

CELL_COLUMNS: tuple[str, ...] = (
    "cell",
    *CELL_KEYS,
    "batch_per_rank",
    "global_batch",
    "world_size",
    "runs",
    "failed_runs",
    "contended_runs",
    "repeats",
    "interval",
    "coverage",
    "throughput",
    "throughput_low",
    "throughput_high",
    "time_per_sample_s",
    "time_per_sample_low",
    "time_per_sample_high",
    "step_s",
    "compute_s",
    "exposed_comm_s",
    "exposed_comm_share",
    "exposed_comm_share_low",
    "exposed_comm_share_high",
    "baseline_nodes",
    "ideal_speedup",
    "speedup",
    "speedup_low",
    "speedup_high",
    "efficiency",
    "efficiency_low",
    "efficiency_high",
    "ratio_interval",
    *CELL_QUALITY_COLUMNS,
    "other_busy_share",
    "excluded",
    "flag",
    "not_crowned_for",
    "note",
)


def empty_table(columns: Sequence[str]) -> pd.DataFrame:
    """A table with ``columns`` and no rows (what a study without runs writes)."""
    return pd.DataFrame({name: pd.Series(dtype="object") for name in columns})


def fmt(value: float) -> str:
    """A number as the flags and notes print it (thousands separated, else 3 significant digits)."""
    if value is None or math.isnan(value):
        return "nan"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def fmt_interval(value: float, low: float, high: float) -> str:
    """``value [low, high]``, or ``value (no interval)``."""
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        return f"{fmt(value)} (no interval)"
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def _keyed(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with the cell keys filled in (``batch``, a network and a dataset everywhere).

    Columns a runs table written by an older version may lack get their neutral value.
    """
    table = runs.copy()
    defaults: dict[str, Any] = {
        "network": HOST,
        "dataset": "",
        "scaling": "weak",
        "contended": False,
        "other_busy_share": np.nan,
        "exposed_comm_share": np.nan,
        "step_s": np.nan,
        "compute_s": np.nan,
        "exposed_comm_s": np.nan,
    }
    for name, default in defaults.items():
        if name not in table:
            table[name] = default
        elif not isinstance(default, float):
            table[name] = table[name].astype(object).where(table[name].notna(), default)
    if "world_size" not in table:
        table["world_size"] = table["nodes"] * table["ranks_per_node"]
    if "global_batch" not in table:
        table["global_batch"] = table["batch_per_rank"] * table["world_size"]
    table["contended"] = table["contended"].astype(bool)
    table["batch"] = batch_key(table).astype("int64")
    table["_ok"] = table["status"].eq("ok") & table["throughput"].notna()
    return table


def _sort_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """Cells in the catalog's order of models and frameworks, the host network first."""
    models = {name: i for i, name in enumerate(catalog.MODEL_NAMES)}
    frameworks = {name: i for i, name in enumerate(catalog.FRAMEWORK_NAMES)}
    return (
        models.get(row["model"], len(models)),
        str(row["model"]),
        row["network"] != HOST,
        str(row["network"]),
        str(row["dataset"]),
        str(row["scaling"]),
        row["ranks_per_node"],
        row["batch"],
        frameworks.get(row["framework"], len(frameworks)),
        str(row["framework"]),
        row["nodes"],
    )


def cells(runs: pd.DataFrame, confidence: float = CONFIDENCE) -> pd.DataFrame:
    """Summarise a runs table (``dlscale.analysis.aggregate``) per cell, over its repeats.

    One row per cell with ``CELL_COLUMNS``: how many runs it had (``runs``), failed,
    contended, and used (``repeats``: the ok, uncontended ones); the median over those
    repeats of throughput, time per sample (``1 / throughput``: seconds per global
    sample), step, compute and exposed communication, with intervals
    (``<column>_low``/``_high``, method in ``interval``, coverage in ``coverage``) for
    throughput, time per sample and the exposed-communication share; speedup and
    efficiency against the baseline cell with their interval (method in
    ``ratio_interval``); and ``flag``/``not_crowned_for``/``excluded``/``note`` (module
    docstring). A cell whose every ok repeat was contended keeps its numbers (from those
    repeats, for the figures) but is ``excluded``.
    """
    if runs.empty:
        return empty_table(CELL_COLUMNS)
    table = _keyed(runs)
    column = {name: table[name].to_numpy() for name in ("batch_per_rank", "global_batch", "world_size")}
    value = {
        name: pd.to_numeric(table[name], errors="coerce").to_numpy(dtype="float64")
        for name in (
            "throughput",
            "exposed_comm_share",
            "step_s",
            "compute_s",
            "exposed_comm_s",
            "other_busy_share",
        )
    }
    ok = table["_ok"].to_numpy(dtype=bool)
    contended = table["contended"].to_numpy(dtype=bool)
    failed = ~table["status"].eq("ok").to_numpy(dtype=bool)
    drifting = unsteady(table).to_numpy(dtype=bool)
    drift = (
        pd.to_numeric(table["step_drift"], errors="coerce").to_numpy(dtype="float64")
        if "step_drift" in table
        else np.full(len(table), np.nan)
    )
    rows: list[dict[str, Any]] = []
    samples: list[np.ndarray] = []
    for key, positions in table.groupby(list(CELL_KEYS), sort=False, dropna=False).indices.items():
        where = np.asarray(positions)
        ok_at = where[ok[where]]
        clean = ok_at[~contended[ok_at]]
        used = clean if len(clean) else ok_at
        first = where[0]
        row: dict[str, Any] = dict(zip(CELL_KEYS, key, strict=True))
        throughput = median_interval(value["throughput"][used], confidence)
        share = median_interval(value["exposed_comm_share"][used], confidence)
        row.update(
            cell=cell_name(
                row["framework"],
                row["model"],
                row["network"],
                row["nodes"],
                row["ranks_per_node"],
                column["batch_per_rank"][first],
            ),
            batch_per_rank=column["batch_per_rank"][first],
            global_batch=column["global_batch"][first],
            world_size=column["world_size"][first],
            runs=len(where),
            failed_runs=int(failed[where].sum()),
            contended_runs=int(contended[ok_at].sum()),
            repeats=len(clean),
            interval=throughput.method,
            coverage=throughput.coverage,
            throughput=throughput.value,
            throughput_low=throughput.low,
            throughput_high=throughput.high,
            time_per_sample_s=1.0 / throughput.value if throughput.value > 0 else math.nan,
            time_per_sample_low=1.0 / throughput.high if throughput.high > 0 else math.nan,
            time_per_sample_high=1.0 / throughput.low if throughput.low > 0 else math.nan,
            step_s=_median(value["step_s"][used]),
            compute_s=_median(value["compute_s"][used]),
            exposed_comm_s=_median(value["exposed_comm_s"][used]),
            exposed_comm_share=share.value,
            exposed_comm_share_low=share.low,
            exposed_comm_share_high=share.high,
            other_busy_share=_max(value["other_busy_share"][where]),
        )
        row.update(cell_quality(table.iloc[used]))
        moved = used[drifting[used]]
        row["_unsteady"] = (len(moved), len(used), _median(drift[moved]) if len(moved) else math.nan)
        rows.append(row)
        samples.append(value["throughput"][used])
    _add_ratios(rows, samples, confidence)
    _add_flags(rows)
    rows.sort(key=_sort_key)
    cell_table = pd.DataFrame(rows, columns=list(CELL_COLUMNS))
    for name in ("ranks_per_node", "batch", "nodes", "batch_per_rank", "global_batch", "world_size"):
        cell_table[name] = cell_table[name].astype("int64")
    cell_table["baseline_nodes"] = cell_table["baseline_nodes"].astype("Int64")
    cell_table["excluded"] = cell_table["excluded"].astype(bool)
    return cell_table


def _median(values: np.ndarray) -> float:
    x = finite_sorted(values)
    return float(np.median(x)) if len(x) else math.nan


def _max(values: np.ndarray) -> float:
    x = finite_sorted(values)
    return float(x.max()) if len(x) else math.nan


def _add_ratios(rows: list[dict[str, Any]], samples: list[np.ndarray], confidence: float) -> None:
    """Baseline node count, speedup and efficiency (with intervals) of every cell, in place:
    ``dlscale.analysis.speedup``'s rule (baseline: the smallest node count with an
    uncontended repeat), the ratio of the cell's median throughput to the baseline cell's."""
    for row in rows:
        row.update(baseline_nodes=math.nan, ideal_speedup=math.nan, ratio_interval=None)
        row.update(speedup=math.nan, speedup_low=math.nan, speedup_high=math.nan)
    measured = [i for i, row in enumerate(rows) if not math.isnan(row["throughput"])]
    if measured:
        table = pd.DataFrame([rows[i] for i in measured], columns=[*SPEEDUP_GROUP, "nodes", "repeats"])
        base_nodes, _ = baseline_nodes(table, table["repeats"].gt(0))
        groups = list(zip(*(key.tolist() for key in group_keys(table)), strict=True))
        cell_at = {(group, rows[i]["nodes"]): i for group, i in zip(groups, measured, strict=True)}
        for i, group, nodes in zip(measured, groups, base_nodes.tolist(), strict=True):
            row, base = rows[i], int(nodes)
            if row["nodes"] == base:
                ratio = Interval(1.0, 1.0, 1.0, BASELINE, 1.0)
            else:
                ratio = ratio_interval(samples[i], samples[cell_at[(group, base)]], confidence)
            row.update(baseline_nodes=base, ideal_speedup=row["nodes"] / base, ratio_interval=ratio.method)
            row.update(speedup=ratio.value, speedup_low=ratio.low, speedup_high=ratio.high)
    for row in rows:
        for name in ("", "_low", "_high"):
            row[f"efficiency{name}"] = row[f"speedup{name}"] / row["ideal_speedup"]


#: How a cell's note starts its part on unsteady repeats (read back by ``unsteady_part``).
UNSTEADY = "unsteady: "


def unsteady_part(note: object) -> str | None:
    """The part of a cell's ``note`` on its unsteady repeats, or None (notes join parts
    with "; ", and that part holds none)."""
    if not isinstance(note, str):
        return None
    return next((part for part in note.split("; ") if part.startswith(UNSTEADY)), None)


def _add_flags(rows: list[dict[str, Any]]) -> None:
    """``excluded``, ``flag``, ``not_crowned_for`` and ``note`` of every cell, in place."""
    fixed = {
        tuple(row[k] for k in CELL_KEYS): row["exposed_comm_share"]
        for row in rows
        if row["world_size"] == 1 and threshold("fixed_overhead_share").fails(row["exposed_comm_share"])
    }
    for row in rows:
        flags: list[str] = []
        blocks: set[str] = set()
        notes: list[str] = []
        row["excluded"] = row["repeats"] == 0 and row["contended_runs"] > 0
        if row["excluded"]:
            flags.append(
                f"contended: all {row['contended_runs']} ok repeat(s) ran beside other work "
                f"(other_busy_share up to {fmt(row['other_busy_share'])}); excluded from the findings"
            )
            blocks.update(QUESTIONS)
        elif row["contended_runs"] > 0:
            notes.append(f"{row['contended_runs']} contended repeat(s) left out")
        if row["learned"] is False and not row["excluded"]:
            row["excluded"] = True
            flags.append(
                f"did not learn: final held-out {row['quality_metric']} {fmt(row['final_quality'])} is no better"
                " than chance; its speed is not comparable work, excluded from the findings"
            )
            blocks.update(QUESTIONS)
        if row["failed_runs"] > 0:
            notes.append(f"{row['failed_runs']} failed run(s)")
        moved, used, drift = row.pop("_unsteady", (0, 0, math.nan))
        if moved:
            notes.append(
                f"{UNSTEADY}{moved} of {used} repeat(s) timed outside a steady state (second half's median"
                f" step {fmt(drift)}x the first half's, runs.csv step_drift)"
            )
        if row["interval"] in (RANGE_LOW_N, SINGLE_RUN):
            notes.append(f"low-n: {row['repeats'] or row['runs'] - row['failed_runs']} repeat(s)")
        share = row["exposed_comm_share"]
        if row["world_size"] == 1 and threshold("fixed_overhead_share").fails(share):
            flags.append(
                f"fixed overhead: exposed 'communication' is {fmt(share)} of the step with one rank, "
                "where nothing is communicated (per-iteration framework overhead)"
            )
            blocks.add(BEST_COMMUNICATION)
        base_nodes = row["baseline_nodes"]
        if not math.isnan(base_nodes) and row["nodes"] > base_nodes:
            efficiency, low = row["efficiency"], row["efficiency_low"]
            if efficiency > 1 and (low > 1 or math.isnan(low)):
                why = "its whole interval is above 1" if low > 1 else "no interval to excuse it"
                flags.append(
                    f"superlinear: efficiency {fmt_interval(efficiency, low, row['efficiency_high'])} "
                    f"(speedup {fmt(row['speedup'])} above the node ratio {fmt(row['ideal_speedup'])}; "
                    f"{why}): likely a busy baseline, the {int(base_nodes)}-node runs slowed by other work "
                    "on shared cores"
                )
                blocks.add(BEST_SCALING)
            base_share = fixed.get((*(row[k] for k in SPEEDUP_GROUP), base_nodes))
            if base_share is not None and row["scaling"] == "weak":
                flags.append(
                    f"baseline is fixed overhead: the {int(base_nodes)}-node step is {fmt(base_share)} "
                    "per-iteration overhead, spread over a global batch that grows with the nodes: the "
                    "efficiency measures that amortisation, not communication"
                )
                blocks.add(BEST_SCALING)
        row["flag"] = "; ".join(flags) or None
        row["not_crowned_for"] = ";".join(q for q in QUESTIONS if q in blocks) or None
        row["note"] = "; ".join(notes) or None
