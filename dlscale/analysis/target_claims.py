"""The seed study's claims measured as time to a target quality.

Du et al. compared speed only. Where a study sets a quality target, each claim gets a second
verdict read off time to target instead of samples/s: "computes fastest" becomes "trains to
the target fastest at the smallest node count", "scales best" becomes "the highest
time-to-target efficiency at the largest node count" (``dlscale.analysis.convergence.efficiencies``),
judged by the same rule as the claims themselves (``dlscale.analysis.claims.judge``: reproduced
only when the claimed framework's interval clears every other's). Communication has no
time-to-target counterpart: those claims say so.
"""

from __future__ import annotations

import math

import pandas as pd

from dlscale.analysis import convergence
from dlscale.analysis.cells import BEST_SCALING, FASTEST_COMPUTE
from dlscale.analysis.claims import CLAIM_COLUMNS as SPEED_CLAIM_COLUMNS
from dlscale.analysis.claims import INCONCLUSIVE, judge
from dlscale.analysis.findings import Competitor
from dlscale.analysis.speedup import COMPARISON_GROUP

#: Columns added to the claims table.
TARGET_CLAIM_COLUMNS: tuple[str, ...] = ("verdict_time_to_target", "reason_time_to_target")
#: The claims table's columns as the aggregation writes it (claims.csv).
CLAIM_COLUMNS: tuple[str, ...] = (*SPEED_CLAIM_COLUMNS, *TARGET_CLAIM_COLUMNS)

_NO_TARGET = "n/a (no quality target in this study)"


def _not_counted(cell: pd.Series) -> bool:
    """A cell whose seconds decide nothing: excluded (its repeats contended) or not learning."""
    return bool(cell.get("excluded", False)) or cell.get("learned") is False


def _entries_at(cells: pd.DataFrame, nodes: int, column: str) -> list[Competitor]:
    at = cells[cells["nodes"].eq(nodes)]
    entries = []
    for _, cell in at.iterrows():
        entries.append(
            Competitor(
                framework=str(cell["framework"]),
                value=float(cell[f"{column}_s"]),
                low=float(cell[f"{column}_low"]),
                high=float(cell[f"{column}_high"]),
                repeats=int(cell["repeats"]),
                cell=str(cell["cell"]),
                excluded=str(cell["flag"]) if _not_counted(cell) else None,
            )
        )
    return entries


def _excluded_why(cells: pd.DataFrame, framework: str, nodes: tuple[int, ...]) -> str | None:
    """Why a framework's time-to-target efficiency at ``nodes`` (the cell and its baseline)
    decides nothing: either cell excluded (its repeats contended) or not learning; None
    where both count. An efficiency is a ratio of two cells' seconds, so either one's
    contended seconds make it a number of the host's load, not of the framework."""
    mine = cells[cells["framework"].eq(framework) & cells["nodes"].isin(nodes)]
    for _, cell in mine.iterrows():
        if _not_counted(cell):
            return f"{int(cell['nodes'])} node(s): {cell.get('flag') or 'excluded'}"
    return None


def _scaling_entries(cells: pd.DataFrame) -> tuple[list[Competitor], int | None]:
    both = convergence.efficiencies(cells)
    tt = both[both["kind"].eq(convergence.EFFICIENCY_KINDS[1])]
    if tt.empty:
        return [], None
    nodes = int(tt["nodes"].max())
    at = tt[tt["nodes"].eq(nodes)]
    entries = []
    for r in at.itertuples():
        mine = cells[cells["framework"].eq(r.framework)]
        baseline = int(mine["baseline_nodes"].iloc[0]) if "baseline_nodes" in mine and len(mine) else nodes
        excluded = _excluded_why(cells, str(r.framework), (baseline, nodes))
        entries.append(
            Competitor(
                str(r.framework), float(r.value), float(r.low), float(r.high), 0, "", excluded=excluded
            )
        )
    return entries, nodes


def add_time_to_target(claims: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """``claims`` with each claim's verdict measured as time to target, and why."""
    out = claims.copy()
    for name in TARGET_CLAIM_COLUMNS:
        out[name] = None
    if out.empty:
        return out
    with_target = cells[cells["target_metric"].notna()] if "target_metric" in cells else cells.iloc[0:0]
    for index, claim in out.iterrows():
        setup = with_target
        for key in COMPARISON_GROUP:
            setup = setup[setup[key].eq(claim[key])]
        if setup.empty:
            out.at[index, "verdict_time_to_target"] = INCONCLUSIVE
            out.at[index, "reason_time_to_target"] = _NO_TARGET
            continue
        if not setup["framework"].eq(claim["framework"]).any():
            out.at[index, "verdict_time_to_target"] = INCONCLUSIVE
            out.at[index, "reason_time_to_target"] = f"{claim['framework']} has no runs with a target here"
            continue
        if claim["question"] == FASTEST_COMPUTE:
            nodes = int(setup["nodes"].min())
            entries = [
                e
                for e in _entries_at(setup, nodes, "time_to_target")
                if not math.isnan(e.value) or e.excluded
            ]
            higher, where = False, f"time to target at {nodes} node(s)"
        elif claim["question"] == BEST_SCALING:
            entries, nodes = _scaling_entries(setup)
            higher, where = True, f"time-to-target efficiency at {nodes} nodes"
            if nodes is None:
                out.at[index, "verdict_time_to_target"] = INCONCLUSIVE
                out.at[index, "reason_time_to_target"] = "n/a (needs a time to target at two node counts)"
                continue
        else:
            out.at[index, "verdict_time_to_target"] = INCONCLUSIVE
            out.at[index, "reason_time_to_target"] = "n/a (time to target does not split out communication)"
            continue
        verdict, reason, _ = judge(entries, str(claim["framework"]), higher)
        if not any(e.framework == claim["framework"] for e in entries):
            reason = f"{claim['framework']} has no time to target here (did not converge)"
        out.at[index, "verdict_time_to_target"] = verdict
        out.at[index, "reason_time_to_target"] = f"{where}: {reason}"
    return out
