"""What each cell's runs learned, and which framework trains to a target quality fastest.

Per cell (``dlscale.analysis.cells.cells``): the median final held-out quality over its repeats,
whether its model learned (every repeat clearly better than chance, ``dlscale.quality``),
and its time to target with an interval. Time to target follows MLPerf in counting a run
that never met the target as not converged rather than dropping it: such a run's time is
taken as infinite, so the median (and its interval, from ``dlscale.analysis.stats``'s rules) exists
only while fewer than half of the repeats failed to converge; otherwise the cell has no
time to target, and it is never crowned however fast its steps.

The finding ``fastest_to_target`` (one row per comparison group and node count) names a winner
only when its interval separates it from every other framework that converged, and never a
framework whose cell did not converge or did not learn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.analysis.speedup import COMPARISON_GROUP, SPEEDUP_GROUP
from dlscale.analysis.stats import CONFIDENCE, Interval, median_interval, separated

NO_CLEAR_WINNER = "no clear winner"

#: Columns every cell gains (``dlscale.analysis.cells.CELL_COLUMNS``).
CELL_QUALITY_COLUMNS: tuple[str, ...] = (
    "quality_metric",
    "final_quality",
    "final_quality_low",
    "final_quality_high",
    "learned",
    "target_metric",
    "target_value",
    "converged_runs",
    "time_to_target_s",
    "time_to_target_low",
    "time_to_target_high",
    "time_to_target_interval",
    "designed_difference",
)

#: Columns of the time-to-target findings (results/time_to_target.csv).
TIME_TO_TARGET_COLUMNS: tuple[str, ...] = (
    *COMPARISON_GROUP,
    "nodes",
    "target_metric",
    "target_value",
    "frameworks",
    "fastest_to_target",
    "leader",
    "time_to_target_s",
    "time_to_target_low",
    "time_to_target_high",
    "runner_up",
    "runner_up_time_s",
    "runner_up_low",
    "runner_up_high",
    "not_converged",
    "note",
)

CENSORED = "censored: more than half did not converge"


def time_to_target_interval(times: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The median time to target over repeats and its interval, non-converged repeats (NaN
    or inf in ``times``) counted as infinitely slow.

    The order-statistics interval of ``stats.median_interval`` stays valid when the largest
    values are unknown but known to be large: the median and the lower bound need only the
    smallest ones, and an upper bound that falls on a non-converged repeat is infinite.
    """
    values = np.asarray(list(times), dtype="float64")
    n = len(values)
    finite = np.sort(values[np.isfinite(values)])
    if n == 0 or len(finite) == 0:
        return Interval(math.nan, math.nan, math.nan, "no converged runs" if n else "no runs")
    if 2 * len(finite) <= n:
        return Interval(math.nan, math.nan, math.nan, CENSORED)
    if len(finite) == n:
        return median_interval(finite, confidence)
    padded = np.concatenate([finite, np.full(n - len(finite), np.inf)])
    interval = median_interval(np.where(np.isfinite(padded), padded, np.finfo("float64").max), confidence)
    high = math.inf if interval.high >= np.finfo("float64").max else interval.high
    return Interval(float(np.median(padded)), interval.low, high, interval.method, interval.coverage)


def cell_quality(runs: pd.DataFrame) -> dict[str, Any]:
    """The quality columns of one cell from its used repeats (rows of the runs table)."""
    metric = _first(runs, "quality_metric")
    finals = pd.to_numeric(runs.get("final_quality", pd.Series(dtype="float64")), errors="coerce")
    final = median_interval(finals.to_numpy(dtype="float64"))
    learned_values = [
        v for v in runs.get("learned", pd.Series(dtype=object)) if isinstance(v, (bool, np.bool_))
    ]
    learned: bool | None = None
    if learned_values:
        learned = bool(all(learned_values))
    target_metric = _first(runs, "target_metric")
    difference = _first(runs, "designed_difference")
    row: dict[str, Any] = {
        "quality_metric": metric,
        "final_quality": final.value,
        "final_quality_low": final.low,
        "final_quality_high": final.high,
        "learned": learned,
        "target_metric": target_metric,
        "target_value": _first_number(runs, "target_value"),
        "converged_runs": math.nan,
        "time_to_target_s": math.nan,
        "time_to_target_low": math.nan,
        "time_to_target_high": math.nan,
        "time_to_target_interval": None,
        "designed_difference": difference,
    }
    if target_metric is not None and len(runs):
        reached = runs["reached_target"].map(lambda v: _known(v) and bool(v))
        times = np.where(reached, pd.to_numeric(runs["time_to_target_s"], errors="coerce"), np.inf)
        interval = time_to_target_interval(times)
        row.update(
            converged_runs=int(reached.sum()),
            time_to_target_s=interval.value,
            time_to_target_low=interval.low,
            time_to_target_high=interval.high,
            time_to_target_interval=interval.method,
        )
    return row


def _known(value: Any) -> bool:
    """A true/false value (a bool, or 0/1 as a table read back may hold), not unknown."""
    if value is None or isinstance(value, str):
        return False
    try:
        return not math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def _first(runs: pd.DataFrame, column: str) -> str | None:
    if column not in runs:
        return None
    values = [v for v in runs[column] if isinstance(v, str) and v]
    return values[0] if values else None


def _first_number(runs: pd.DataFrame, column: str) -> float:
    if column not in runs:
        return math.nan
    values = pd.to_numeric(runs[column], errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) else math.nan


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3g}"


def _text(framework: str, iv: Interval) -> str:
    return f"{framework} {_fmt(iv.value)} s [{_fmt(iv.low)}, {_fmt(iv.high)}]"


def _framework_rank(name: str) -> int:
    names = catalog.FRAMEWORK_NAMES
    return names.index(name) if name in names else len(names)


def fastest_to_target(cell_table: pd.DataFrame, same_work_only: bool = True) -> pd.DataFrame:
    """Per comparison group and node count with a target: which framework trains to it fastest.

    A winner only where its time-to-target interval lies wholly below every other
    converged framework's; a framework whose cell did not converge (no time to target),
    did not learn, or was excluded (contended) is listed and never crowned. With
    ``same_work_only`` (the study's default), a set-up whose optimisation differs from the
    reference by design (``catalog.DIFFERENCES``) is listed but takes no part either.
    """
    if cell_table.empty or "target_metric" not in cell_table:
        return pd.DataFrame(columns=list(TIME_TO_TARGET_COLUMNS))
    have = cell_table[cell_table["target_metric"].notna()]
    keys = [*COMPARISON_GROUP, "nodes"]
    rows = []
    for key, group in have.groupby(keys, sort=False, dropna=False):
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row.update(target_metric=group["target_metric"].iloc[0], target_value=group["target_value"].iloc[0])
        group = group.sort_values("framework", key=lambda s: s.map(_framework_rank))
        row["frameworks"] = ";".join(group["framework"])
        notes: list[str] = []
        contenders: list[tuple[str, Interval]] = []
        not_converged: list[str] = []
        for _, cell in group.iterrows():
            framework = str(cell["framework"])
            iv = Interval(
                float(cell["time_to_target_s"]),
                float(cell["time_to_target_low"]),
                float(cell["time_to_target_high"]),
                str(cell["time_to_target_interval"]),
            )
            difference = cell.get("designed_difference")
            if bool(cell["excluded"]):
                notes.append(f"{framework} left out: {cell['flag']}")
            elif same_work_only and isinstance(difference, str) and difference:
                notes.append(
                    f"{framework} left out (not the same work: {difference}; same_work_only: false lets it compete)"
                )
            elif cell["learned"] is False or cell["learned"] == 0.0:
                not_converged.append(framework)
                notes.append(
                    f"{framework} not crowned: its model did not learn (final {cell['quality_metric']} {_fmt(float(cell['final_quality']))})"
                )
            elif math.isnan(iv.value):
                not_converged.append(framework)
                notes.append(
                    f"{framework} did not converge: {int(cell['converged_runs'] or 0)} of {int(cell['repeats'] or 0)}"
                    f" repeat(s) reached {cell['target_metric']} {_fmt(float(cell['target_value']))}"
                )
            else:
                contenders.append((framework, iv))
        contenders.sort(key=lambda c: (c[1].value, c[0]))
        row["not_converged"] = ";".join(not_converged) or None
        row.update(
            fastest_to_target=NO_CLEAR_WINNER if contenders else "n/a (no framework reached the target)",
            leader=None,
            time_to_target_s=math.nan,
            time_to_target_low=math.nan,
            time_to_target_high=math.nan,
            runner_up=None,
            runner_up_time_s=math.nan,
            runner_up_low=math.nan,
            runner_up_high=math.nan,
        )
        if contenders:
            leader, lead = contenders[0]
            row.update(
                leader=leader,
                time_to_target_s=lead.value,
                time_to_target_low=lead.low,
                time_to_target_high=lead.high,
            )
            if len(contenders) > 1:
                second, iv = contenders[1]
                row.update(
                    runner_up=second, runner_up_time_s=iv.value, runner_up_low=iv.low, runner_up_high=iv.high
                )
            overlapping = [(f, iv) for f, iv in contenders[1:] if not separated(lead, iv, higher=False)]
            if overlapping:
                notes.append(
                    f"intervals overlap: {_text(leader, lead)} vs "
                    + "; ".join(_text(f, iv) for f, iv in overlapping)
                )
            else:
                row["fastest_to_target"] = leader
                if len(contenders) == 1:
                    notes.append("the only framework that reached the target")
        row["note"] = "; ".join(notes) or None
        rows.append(row)
    return pd.DataFrame(rows, columns=list(TIME_TO_TARGET_COLUMNS))


#: The two efficiencies the figure puts side by side.
EFFICIENCY_KINDS: tuple[str, ...] = ("throughput efficiency", "time-to-target efficiency")


def efficiencies(cell_table: pd.DataFrame) -> pd.DataFrame:
    """Per cell beyond its baseline: throughput efficiency (the cells' own, with its
    interval) and time-to-target efficiency ``T_base / (N / N_base x T_N)``.

    The time-to-target interval is the conservative one from the two cells' intervals,
    ``[T_base_low / (r T_N_high), T_base_high / (r T_N_low)]``: both cells' repeats are
    independent, and a non-converged repeat (an infinite time) only widens it.
    """
    columns = ["framework", *COMPARISON_GROUP, "nodes", "kind", "value", "low", "high"]
    if cell_table.empty:
        return pd.DataFrame(columns=columns)
    setup = list(SPEEDUP_GROUP)
    rows: list[dict[str, Any]] = []
    for _, group in cell_table.groupby(setup, sort=False, dropna=False):
        base = group[group["nodes"].eq(group["baseline_nodes"])]
        base_row = base.iloc[0] if len(base) else None
        for _, cell in group.iterrows():
            # The baseline itself (efficiency 1) and every larger node count with an efficiency.
            beyond = (
                cell["nodes"] > base_row["nodes"] and not pd.isna(cell["efficiency"])
                if base_row is not None
                else False
            )
            if not (beyond or (base_row is not None and cell["nodes"] == base_row["nodes"])):
                continue
            keys = {k: cell[k] for k in setup} | {"nodes": int(cell["nodes"])}
            rows.append(
                keys
                | {
                    "kind": EFFICIENCY_KINDS[0],
                    "value": cell["efficiency"],
                    "low": cell["efficiency_low"],
                    "high": cell["efficiency_high"],
                }
            )
            ratio = cell["nodes"] / base_row["nodes"]
            t_base = (
                base_row["time_to_target_s"],
                base_row["time_to_target_low"],
                base_row["time_to_target_high"],
            )
            t_cell = (cell["time_to_target_s"], cell["time_to_target_low"], cell["time_to_target_high"])
            if any(pd.isna(v) for v in (*t_base, *t_cell)) or t_cell[0] <= 0:
                continue
            rows.append(
                keys
                | {
                    "kind": EFFICIENCY_KINDS[1],
                    "value": t_base[0] / (ratio * t_cell[0]),
                    "low": t_base[1] / (ratio * t_cell[2]) if t_cell[2] > 0 else math.nan,
                    "high": t_base[2] / (ratio * t_cell[1]) if t_cell[1] > 0 else math.nan,
                }
            )
    return pd.DataFrame(rows, columns=columns)
