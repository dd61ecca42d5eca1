"""Findings: the study's three questions answered per comparison group, with verdicts.

Computing speed, communication and scaling (``QUESTIONS``) are each asked of the cells of
one comparison group (``dlscale.analysis.speedup.COMPARISON_GROUP``) at one node count. A
framework is named only when its interval separates it from every other contender
(``decide``), otherwise "no clear winner"; a flagged cell is never crowned, an excluded
one takes no part (``dlscale.analysis.cells``'s docstring says which and why).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dlscale.analysis.cells import (
    BEST_COMMUNICATION,
    BEST_SCALING,
    FASTEST_COMPUTE,
    NO_CLEAR_WINNER,
    QUESTIONS,
    empty_table,
    fmt,
    fmt_interval,
)
from dlscale.analysis.speedup import COMPARISON_GROUP
from dlscale.analysis.stats import MIN_CI_REPEATS, Interval, separated
from dlscale.analysis.tables import NEEDS_TWO_NODE_COUNTS


@dataclass
class Competitor:
    """One framework's cell in one question."""

    framework: str
    value: float
    low: float
    high: float
    repeats: int
    cell: str
    #: Why it cannot be crowned for this question (a flag), or None.
    blocked: str | None = None
    #: Why it is not in the comparison at all (contended, too slow per sample), or None.
    excluded: str | None = None
    time_per_sample: Interval | None = None

    def text(self) -> str:
        return f"{self.framework} {fmt_interval(self.value, self.low, self.high)}"


@dataclass
class Decision:
    """A question's answer: winner (or why none), leader, runner-up and the reasons."""

    verdict: str
    leader: Competitor | None = None
    runner_up: Competitor | None = None
    notes: list[str] = field(default_factory=list)
    competitors: list[Competitor] = field(default_factory=list)


def better(a: float, b: float, higher: bool) -> bool:
    """Whether ``a`` is better than ``b`` (``higher``: larger values are better)."""
    return a > b if higher else a < b


def _ranked(entries: list[Competitor], higher: bool) -> list[Competitor]:
    return sorted(entries, key=lambda e: ((-e.value if higher else e.value), e.framework))


def decide(competitors: list[Competitor], higher: bool) -> Decision:
    """Name a winner only when its interval separates it from every other contender.

    Excluded competitors take no part. Flagged (``blocked``) ones are never crowned, and
    one whose (unreliable) value is better than the leader's makes the question
    undecidable; a flagged value below the leader's is no threat (the flags here mark
    values that are too good, so the truth is lower still).
    """
    decision = Decision(verdict=NO_CLEAR_WINNER, competitors=competitors)
    for entry in competitors:
        if entry.excluded:
            decision.notes.append(f"{entry.framework} left out: {entry.excluded}")
    considered = [e for e in competitors if not e.excluded and not math.isnan(e.value)]
    crownable = _ranked([e for e in considered if not e.blocked], higher)
    flagged = [e for e in considered if e.blocked]
    if not considered:
        decision.verdict = "n/a (every candidate left out)" if competitors else "n/a (no candidate)"
        return decision
    if not crownable:
        decision.notes.append(
            "every candidate is flagged: " + "; ".join(f"{e.framework}: {e.blocked}" for e in flagged)
        )
        return decision
    leader = crownable[0]
    decision.leader = leader
    decision.runner_up = crownable[1] if len(crownable) > 1 else None
    above = [e for e in flagged if better(e.value, leader.value, higher)]
    overlapping = [e for e in crownable[1:] if not separated(leader, e, higher)]
    if above:
        decision.notes.append(
            "flagged value(s) better than the leader's cannot be ranked: "
            + "; ".join(f"{e.text()} ({e.blocked})" for e in above)
        )
    elif overlapping:
        no_interval = [e for e in [leader, *overlapping] if math.isnan(e.low)]
        if no_interval:
            decision.notes.append(
                "no interval (one repeat) for "
                + ", ".join(e.framework for e in no_interval)
                + ": cannot separate"
            )
        else:
            decision.notes.append(
                f"intervals overlap: {leader.text()} vs " + "; ".join(e.text() for e in overlapping)
            )
    else:
        decision.verdict = leader.framework
        if len(crownable) == 1:
            decision.notes.append("the only " + ("unflagged candidate" if flagged else "candidate"))
    for entry in flagged:
        if not any(entry is e for e in above):
            decision.notes.append(f"{entry.framework} not crowned: {entry.blocked}")
    return decision


def comparison_groups(table: pd.DataFrame) -> Iterable[tuple[tuple[Any, ...], pd.DataFrame]]:
    """(comparison group, its cells) in the cells' order."""
    return table.groupby(list(COMPARISON_GROUP), sort=False, dropna=False)


def competitors(
    setup_cells: pd.DataFrame, question: str
) -> tuple[list[Competitor], int | None, int | None, str | None]:
    """The cells of one comparison group that compete in ``question``.

    Returns ``(competitors, nodes, baseline_nodes, n/a reason)``; the node count is where
    the question is asked: the group's smallest node count for ``fastest_compute``, its
    largest multi-rank one for ``best_communication``, its largest for ``best_scaling``
    (against each framework's own baseline, which must be smaller), among the node counts
    where some cell's model learned: a node count where none did (a learning rate that
    diverges there) answers no question, and asking it there would leave every claim
    inconclusive while smaller node counts have the answer. Its non-learning cells still
    compete, and are excluded with their reason, where the question is asked.
    """
    column, _, _ = QUESTIONS[question]
    every = setup_cells[setup_cells["throughput"].notna()]
    if every.empty:
        return [], None, None, "n/a (no ok runs)"
    learning = every[every["learned"].astype(object).ne(False)] if "learned" in every else every
    learned_at = set(learning["nodes"].astype(int)) or set(every["nodes"].astype(int))
    have = every[every["nodes"].astype(int).isin(learned_at)]
    counts = sorted(int(n) for n in have["nodes"].unique())
    baseline = None
    if question == FASTEST_COMPUTE:
        nodes = counts[0]
        at = have[have["nodes"].eq(nodes)]
    elif question == BEST_COMMUNICATION:
        multi = have[have["world_size"].gt(1)]
        if multi.empty:
            return [], None, None, "n/a (needs > 1 rank)"
        nodes = int(multi["nodes"].max())
        at = multi[multi["nodes"].eq(nodes)]
        if at[column].isna().all():
            return [], nodes, None, "n/a (no compute/communication split)"
    else:
        if len(counts) < 2:
            return [], None, None, NEEDS_TWO_NODE_COUNTS
        nodes = counts[-1]
        at = have[have["nodes"].eq(nodes) & have["baseline_nodes"].lt(nodes)]
        if at.empty:
            return [], nodes, None, f"n/a (no framework has a smaller baseline than {nodes} nodes)"
        baseline = int(at["baseline_nodes"].min())
    entries = []
    for _, cell in at.iterrows():
        blocked = cell["flag"] if question in str(cell["not_crowned_for"] or "").split(";") else None
        entries.append(
            Competitor(
                framework=str(cell["framework"]),
                value=float(cell[column]),
                low=float(cell[f"{column}_low"]),
                high=float(cell[f"{column}_high"]),
                repeats=int(cell["repeats"]),
                cell=str(cell["cell"]),
                blocked=None if cell["excluded"] else blocked,
                excluded=cell["flag"] if cell["excluded"] else None,
                time_per_sample=Interval(
                    float(cell["time_per_sample_s"]),
                    float(cell["time_per_sample_low"]),
                    float(cell["time_per_sample_high"]),
                    str(cell["interval"]),
                ),
            )
        )
    if question == BEST_SCALING:
        _exclude_slow(entries)
    return entries, nodes, baseline, None


def _exclude_slow(entries: list[Competitor]) -> None:
    """Scaling is judged on what a user pays: a framework clearly slower per sample at the
    largest node count than the fastest one there is out of the scaling race, however
    high its efficiency (it would win by being slow at its baseline)."""
    live = [
        e for e in entries if not e.excluded and e.time_per_sample and not math.isnan(e.time_per_sample.value)
    ]
    if not live:
        return
    fastest = min(live, key=lambda e: (e.time_per_sample.value, e.framework))
    for entry in live:
        if entry is not fastest and separated(fastest.time_per_sample, entry.time_per_sample, higher=False):
            entry.excluded = (
                f"slower per sample: {fmt_interval(*_tps(entry))} s vs {fastest.framework}'s "
                f"{fmt_interval(*_tps(fastest))} s"
            )


def _tps(entry: Competitor) -> tuple[float, float, float]:
    t = entry.time_per_sample
    assert t is not None
    return t.value, t.low, t.high


def _findings_columns() -> tuple[str, ...]:
    columns: list[str] = [*COMPARISON_GROUP, "frameworks", "node_counts", "repeats"]
    for question, (_, value, _) in QUESTIONS.items():
        columns += [
            question,
            f"{question}_leader",
            f"{question}_{value}",
            f"{question}_{value}_low",
            f"{question}_{value}_high",
        ]
        if question == BEST_SCALING:
            columns += [
                f"{question}_time_per_sample_s",
                f"{question}_time_per_sample_low",
                f"{question}_time_per_sample_high",
            ]
        columns += [
            f"{question}_runner_up",
            f"{question}_runner_up_{value}",
            f"{question}_runner_up_{value}_low",
            f"{question}_runner_up_{value}_high",
            f"{question}_nodes",
        ]
        if question == BEST_SCALING:
            columns.append(f"{question}_baseline_nodes")
        columns.append(f"{question}_note")
    return tuple(columns)


FINDINGS_COLUMNS: tuple[str, ...] = _findings_columns()


def findings(cell_table: pd.DataFrame) -> pd.DataFrame:
    """Answer the study's three questions per comparison group, from the cells.

    * ``fastest_compute``: the highest median throughput at the group's smallest node
      count (computing speed, as the original study measured it on one node).
    * ``best_communication``: the lowest median exposed-communication share of the step
      at the largest node count with more than one rank (``n/a`` with a single rank).
    * ``best_scaling``: the highest median efficiency at the largest node count, among
      frameworks with a smaller baseline of their own and not clearly slower per sample
      there than the fastest (``best_scaling_time_per_sample_s`` is the winner's).

    Each answer is a framework only when its interval separates it from every other
    contender (``decide``), else ``no clear winner``; ``_leader`` and ``_runner_up`` give
    the two best unflagged values with their intervals either way, and ``_note`` says
    what was left out, flagged or overlapping. A single framework is the answer when it is
    the only candidate.
    """
    columns = FINDINGS_COLUMNS
    if cell_table.empty:
        return empty_table(columns)
    rows = []
    for setup, mine in comparison_groups(cell_table):
        row: dict[str, Any] = {name: np.nan for name in columns}
        row.update(dict(zip(COMPARISON_GROUP, setup, strict=True)))
        have = mine[mine["throughput"].notna()]
        row["frameworks"] = ";".join(sorted(have["framework"].unique()))
        row["node_counts"] = ";".join(str(n) for n in sorted(int(n) for n in have["nodes"].unique()))
        repeats = have["repeats"]
        row["repeats"] = (
            ""
            if repeats.empty
            else f"{repeats.min()}"
            if repeats.min() == repeats.max()
            else f"{repeats.min()}-{repeats.max()}"
        )
        for question, (_, value, higher) in QUESTIONS.items():
            entries, nodes, baseline, na = competitors(mine, question)
            row[f"{question}_nodes"] = nodes
            if question == BEST_SCALING:
                row[f"{question}_baseline_nodes"] = baseline
            if na:
                row[question] = na
                continue
            decision = decide(entries, higher)
            row[question] = decision.verdict
            for prefix, entry in (
                (f"{question}", decision.leader),
                (f"{question}_runner_up", decision.runner_up),
            ):
                if entry is None:
                    continue
                if prefix == question:
                    row[f"{question}_leader"] = entry.framework
                else:
                    row[prefix] = entry.framework
                row[f"{prefix}_{value}"] = entry.value
                row[f"{prefix}_{value}_low"] = entry.low
                row[f"{prefix}_{value}_high"] = entry.high
            if question == BEST_SCALING and decision.leader is not None:
                leader = decision.leader
                tps = _tps(leader)
                (
                    row[f"{question}_time_per_sample_s"],
                    row[f"{question}_time_per_sample_low"],
                    row[f"{question}_time_per_sample_high"],
                ) = tps
                live = [e for e in entries if not e.excluded and e.time_per_sample]
                fastest = min(live, key=lambda e: (e.time_per_sample.value, e.framework))  # type: ignore[union-attr]
                if fastest is not leader:
                    decision.notes.append(
                        f"{leader.framework} leads by efficiency but {fastest.framework} is faster per sample at "
                        f"{nodes} nodes ({fmt(_tps(fastest)[0])} s vs {fmt(tps[0])} s; intervals overlap)"
                    )
            low_n = [e for e in entries if not e.excluded and 1 < e.repeats < MIN_CI_REPEATS]
            if low_n:
                decision.notes.append(
                    "low-n: "
                    + ", ".join(f"{e.framework} {e.repeats}" for e in low_n)
                    + " repeat(s); ranges, not 95 % intervals"
                )
            row[f"{question}_note"] = "; ".join(decision.notes) or None
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(columns))
    for name in columns:
        if name.endswith("_nodes") or name == "ranks_per_node" or name == "batch":
            table[name] = table[name].astype("Int64")
    return table
