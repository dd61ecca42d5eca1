"""The seed study's claims (Du et al.) checked against the cells, by the findings' rule.

Each claim says a framework is the best (or the worst) at one of the study's questions; per
comparison group it is ``reproduced`` only when the framework's interval clears every other
contender's, ``contradicted`` when another clearly beats it, ``inconclusive`` otherwise
(``judge``). The claims measured as time to target are ``dlscale.analysis.target_claims``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.analysis.cells import (
    BEST_COMMUNICATION,
    BEST_SCALING,
    FASTEST_COMPUTE,
    QUESTIONS,
    empty_table,
    unsteady_part,
)
from dlscale.analysis.findings import Competitor, better, comparison_groups, competitors
from dlscale.analysis.speedup import COMPARISON_GROUP
from dlscale.analysis.stats import separated

CLAIM_COLUMNS: tuple[str, ...] = (
    "claim",
    "framework",
    "question",
    *COMPARISON_GROUP,
    "nodes",
    "verdict",
    "metric",
    "value",
    "low",
    "high",
    "repeats",
    "others",
    "reason",
    "threads_per_rank",
    "settings",
)

REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"


@dataclass(frozen=True)
class Claim:
    """A claim of the seed study: ``framework`` is the best (or worst) at ``question``."""

    text: str
    framework: str
    question: str
    #: True: the claim is that the framework is the *worst* (e.g. loses the most time).
    worst: bool = False


def _label(name: str) -> str:
    return catalog.FRAMEWORKS[name].label if name in catalog.FRAMEWORKS else name


def _model_label(name: str) -> str:
    return catalog.MODELS[name].label if name in catalog.MODELS else name


CLAIMS: tuple[Claim, ...] = (
    Claim(f"{_label('caffe')} communicates best", "caffe", BEST_COMMUNICATION),
    Claim(f"{_label('caffe')} scales best", "caffe", BEST_SCALING),
    Claim(f"{_label('bigdl')} computes fastest", "bigdl", FASTEST_COMPUTE),
    Claim(
        f"{_label('bigdl')} loses time in communication through Spark",
        "bigdl",
        BEST_COMMUNICATION,
        worst=True,
    ),
)


def judge(entries: list[Competitor], framework: str, higher: bool) -> tuple[str, str, Competitor | None]:
    """Is ``framework`` the best of ``entries`` (``higher``: larger values are better)?

    ``reproduced`` when its interval separates it from every other contender;
    ``contradicted`` when an unflagged contender's interval separates it on the better
    side; ``inconclusive`` otherwise (overlap, no interval, a flag, too few frameworks),
    with the reason.
    """
    mine = next((e for e in entries if e.framework == framework), None)
    label = _label(framework)
    if mine is None:
        return INCONCLUSIVE, f"{label} has no ok runs here", None
    if mine.excluded:
        return INCONCLUSIVE, f"{label} left out: {mine.excluded}", mine
    if math.isnan(mine.value):
        return INCONCLUSIVE, f"{label} has no value", mine
    others = [e for e in entries if e is not mine and not e.excluded and not math.isnan(e.value)]
    if not others:
        return INCONCLUSIVE, "no other framework to compare with", mine
    beaten_by = [e for e in others if not e.blocked and separated(e, mine, higher)]
    if beaten_by:
        return CONTRADICTED, "clearly beaten by " + "; ".join(e.text() for e in beaten_by), mine
    if mine.blocked:
        return INCONCLUSIVE, f"{label}'s value is flagged: {mine.blocked}", mine
    threats = [
        e
        for e in others
        if not separated(mine, e, higher) and not (e.blocked and better(mine.value, e.value, higher))
    ]
    if threats:
        return INCONCLUSIVE, "intervals overlap or unknown: " + "; ".join(e.text() for e in threats), mine
    return REPRODUCED, "clear of every other framework", mine


def claims(
    cell_table: pd.DataFrame, claim_list: Sequence[Claim] = CLAIMS, runs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The seed study's claims checked per comparison group (``CLAIM_COLUMNS``).

    A "best at" claim uses the question's comparison exactly as ``findings`` does (same
    node count, flags, exclusions and, for scaling, the time-per-sample rule); a "worst
    at" claim (BigDL losing time in communication) is the same test with the direction
    turned. ``others`` lists every other framework's value and interval.

    With ``runs`` (the runs table), each row also says what the claimed framework ran
    with: its runs' ``threads_per_rank`` and CPU ``settings`` (engine, thread pools, as
    recorded in run_start; after the tuning stage, its chosen setting), so that "BigDL
    computes fastest" is read at a thread count and with the settings it was judged at.
    """
    if cell_table.empty:
        return empty_table(CLAIM_COLUMNS)
    rows = []
    for setup, mine in comparison_groups(cell_table):
        asked = {question: competitors(mine, question) for question in {c.question for c in claim_list}}
        for claim in claim_list:
            _, metric, higher = QUESTIONS[claim.question]
            row: dict[str, Any] = {name: np.nan for name in CLAIM_COLUMNS}
            row.update(dict(zip(COMPARISON_GROUP, setup, strict=True)))
            row.update(claim=claim.text, framework=claim.framework, question=claim.question, metric=metric)
            entries, nodes, _, na = asked[claim.question]
            row["nodes"] = nodes
            if not mine["framework"].eq(claim.framework).any():
                na = f"{_label(claim.framework)} is not in this study for {_model_label(setup[0])}"
            if na:
                row["verdict"], row["reason"] = INCONCLUSIVE, na
                rows.append(row)
                continue
            _ran_with(row, runs, claim.framework, setup)
            verdict, reason, entry = judge(entries, claim.framework, higher != claim.worst)
            unsteady = _unsteady(mine, claim.framework, nodes)
            if unsteady:
                reason += (
                    f"; {_label(claim.framework)}'s {unsteady}: the verdict is for runs of this length,"
                    " not for its steady speed"
                )
            row["verdict"], row["reason"] = verdict, reason
            if entry is not None:
                row.update(value=entry.value, low=entry.low, high=entry.high, repeats=entry.repeats)
            row["others"] = (
                "; ".join(
                    e.text() + (f" (left out: {e.excluded})" if e.excluded else "")
                    for e in entries
                    if e.framework != claim.framework
                )
                or None
            )
            rows.append(row)
    table = pd.DataFrame(rows, columns=list(CLAIM_COLUMNS))
    for name in ("nodes", "ranks_per_node", "batch", "repeats"):
        table[name] = table[name].astype("Int64")
    return table


def _unsteady(cells: pd.DataFrame, framework: str, nodes: Any) -> str | None:
    """The unsteady part of the claimed framework's cell note at the claim's node count (its
    repeats timed while warming up or slowed: ``dlscale.analysis.cells.unsteady_part``)."""
    mine = cells[cells["framework"].eq(framework) & cells["nodes"].eq(nodes)]
    return next(filter(None, map(unsteady_part, mine["note"])), None)


def _ran_with(row: dict[str, Any], runs: pd.DataFrame | None, framework: str, setup: tuple[Any, ...]) -> None:
    """Fill a claim row's ``threads_per_rank`` and ``settings`` from the framework's ok runs
    of that comparison group's model (``;``-joined when they differ)."""
    if runs is None or runs.empty or "settings" not in runs:
        return
    model = setup[COMPARISON_GROUP.index("model")]
    mine = runs[runs["framework"].eq(framework) & runs["model"].eq(model) & runs["status"].eq("ok")]
    if mine.empty:
        return
    row["threads_per_rank"] = ";".join(str(t) for t in sorted(mine["threads_per_rank"].dropna().unique()))
    row["settings"] = ";".join(sorted(str(v) for v in mine["settings"].dropna().unique()))
