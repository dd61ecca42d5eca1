"""Verdicts you can trust: cells over repeats with intervals, findings, the seed's claims.

A **cell** is one set-up measured at one node count: framework, model, dataset, scaling
mode, network, ranks per node, batch (the batch per rank under weak scaling, the global
batch under strong: what stays fixed) and nodes. Its **repeats are the independent
samples**. Each run contributes one value per quantity, its median over timed iterations
(``dlscale.analysis.aggregate``); iterations are never samples: they share the run's start-up,
placement, neighbours and thermal state, and treating them as independent would make
every interval too narrow.

Which interval is used, and why, is ``dlscale.analysis.stats``'s docstring.

Values outside physics are **flagged** with their likely cause and **never crowned**
(the column ``not_crowned_for`` names the questions a flag blocks):

* *superlinear*: an efficiency whose whole interval lies above 1 (or, without an
  interval, above 1 at all). On emulated nodes sharing a host's cores this cannot be
  real; it means the baseline was slowed (a busy baseline: other work on its cores). It
  blocks ``best_scaling``.
* *fixed overhead at one rank*: an exposed-"communication" share above
  ``FIXED_OVERHEAD_SHARE`` with a single rank, where nothing is communicated. The cell
  itself is flagged (its share is no communication), and under weak scaling every cell
  scaled against it is too: a fixed per-iteration cost is spread over a global batch
  that grows with the nodes, so its efficiency measures that amortisation, not
  communication. It blocks ``best_scaling`` there.
* *contended*: a run whose host was busy with other work (``contended`` in the runs
  table, from the run's contention probe, ``dlscale.host.contention``) is left out of its
  cell; a cell whose every repeat was contended is ``excluded`` from the findings, with
  the reason shown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.analysis import convergence
from dlscale.analysis.convergence import CELL_QUALITY_COLUMNS, cell_quality
from dlscale.analysis.stats import (
    BASELINE,
    CONFIDENCE,
    MIN_CI_REPEATS,
    RANGE_LOW_N,
    SINGLE_RUN,
    Interval,
    finite_sorted,
    median_interval,
    ratio_interval,
    separated,
)
from dlscale.analysis.tables import NEEDS_TWO_NODE_COUNTS, batch_key
from dlscale.networks import HOST
from dlscale.runid import cell_name
from dlscale.thresholds import FIXED_OVERHEAD_SHARE

#: The three questions of the study (``findings``) and the quantity each compares.
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

#: A cell: one set-up (``SETUP``) of one framework at one node count.
SETUP: tuple[str, ...] = convergence.SETUP
CELL_KEYS: tuple[str, ...] = ("framework", *SETUP, "nodes")

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

CLAIM_COLUMNS: tuple[str, ...] = (
    "claim",
    "framework",
    "question",
    *SETUP,
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


# --- cells ----------------------------------------------------------------------------------


def _empty(columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype="object") for name in columns})


def _fmt(value: float) -> str:
    if value is None or math.isnan(value):
        return "nan"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _fmt_interval(value: float, low: float, high: float) -> str:
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        return f"{_fmt(value)} (no interval)"
    return f"{_fmt(value)} [{_fmt(low)}, {_fmt(high)}]"


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
    efficiency against the set-up's baseline cell with their interval (method in
    ``ratio_interval``); and ``flag``/``not_crowned_for``/``excluded``/``note`` (module
    docstring). A cell whose every ok repeat was contended keeps its numbers (from those
    repeats, for the figures) but is ``excluded``.
    """
    if runs.empty:
        return _empty(CELL_COLUMNS)
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
    """Baseline node count, speedup and efficiency (with intervals) of every cell, in place."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, row in enumerate(rows):
        row.update(baseline_nodes=math.nan, ideal_speedup=math.nan, ratio_interval=None)
        row.update(speedup=math.nan, speedup_low=math.nan, speedup_high=math.nan)
        if not math.isnan(row["throughput"]):
            groups.setdefault(tuple(row[k] for k in ("framework", *SETUP)), []).append(i)
    for members in groups.values():
        clean = [i for i in members if rows[i]["repeats"] > 0]
        base_nodes = min(rows[i]["nodes"] for i in (clean or members))
        base = next(i for i in members if rows[i]["nodes"] == base_nodes)
        for i in members:
            row = rows[i]
            if row["nodes"] == base_nodes:
                ratio = Interval(1.0, 1.0, 1.0, BASELINE, 1.0)
            else:
                ratio = ratio_interval(samples[i], samples[base], confidence)
            ideal = row["nodes"] / base_nodes
            row.update(baseline_nodes=base_nodes, ideal_speedup=ideal, ratio_interval=ratio.method)
            row.update(speedup=ratio.value, speedup_low=ratio.low, speedup_high=ratio.high)
    for row in rows:
        for name in ("", "_low", "_high"):
            row[f"efficiency{name}"] = row[f"speedup{name}"] / row["ideal_speedup"]


def _add_flags(rows: list[dict[str, Any]]) -> None:
    """``excluded``, ``flag``, ``not_crowned_for`` and ``note`` of every cell, in place."""
    fixed = {
        tuple(row[k] for k in ("framework", *SETUP, "nodes")): row["exposed_comm_share"]
        for row in rows
        if row["world_size"] == 1 and row["exposed_comm_share"] > FIXED_OVERHEAD_SHARE
    }
    for row in rows:
        flags: list[str] = []
        blocks: set[str] = set()
        notes: list[str] = []
        row["excluded"] = row["repeats"] == 0 and row["contended_runs"] > 0
        if row["excluded"]:
            flags.append(
                f"contended: all {row['contended_runs']} ok repeat(s) ran beside other work "
                f"(other_busy_share up to {_fmt(row['other_busy_share'])}); excluded from the findings"
            )
            blocks.update(QUESTIONS)
        elif row["contended_runs"] > 0:
            notes.append(f"{row['contended_runs']} contended repeat(s) left out")
        if row["learned"] is False and not row["excluded"]:
            row["excluded"] = True
            flags.append(
                f"did not learn: final held-out {row['quality_metric']} {_fmt(row['final_quality'])} is no better"
                " than chance; its speed is not comparable work, excluded from the findings"
            )
            blocks.update(QUESTIONS)
        if row["failed_runs"] > 0:
            notes.append(f"{row['failed_runs']} failed run(s)")
        if row["interval"] in (RANGE_LOW_N, SINGLE_RUN):
            notes.append(f"low-n: {row['repeats'] or row['runs'] - row['failed_runs']} repeat(s)")
        share = row["exposed_comm_share"]
        if row["world_size"] == 1 and share > FIXED_OVERHEAD_SHARE:
            flags.append(
                f"fixed overhead: exposed 'communication' is {_fmt(share)} of the step with one rank, "
                "where nothing is communicated (per-iteration framework overhead)"
            )
            blocks.add(BEST_COMMUNICATION)
        base_nodes = row["baseline_nodes"]
        if not math.isnan(base_nodes) and row["nodes"] > base_nodes:
            efficiency, low = row["efficiency"], row["efficiency_low"]
            if efficiency > 1 and (low > 1 or math.isnan(low)):
                why = "its whole interval is above 1" if low > 1 else "no interval to excuse it"
                flags.append(
                    f"superlinear: efficiency {_fmt_interval(efficiency, low, row['efficiency_high'])} "
                    f"(speedup {_fmt(row['speedup'])} above the node ratio {_fmt(row['ideal_speedup'])}; "
                    f"{why}): likely a busy baseline, the {int(base_nodes)}-node runs slowed by other work "
                    "on shared cores"
                )
                blocks.add(BEST_SCALING)
            base_share = fixed.get((row["framework"], *(row[k] for k in SETUP), base_nodes))
            if base_share is not None and row["scaling"] == "weak":
                flags.append(
                    f"baseline is fixed overhead: the {int(base_nodes)}-node step is {_fmt(base_share)} "
                    "per-iteration overhead, spread over a global batch that grows with the nodes: the "
                    "efficiency measures that amortisation, not communication"
                )
                blocks.add(BEST_SCALING)
        row["flag"] = "; ".join(flags) or None
        row["not_crowned_for"] = ";".join(q for q in QUESTIONS if q in blocks) or None
        row["note"] = "; ".join(notes) or None


# --- findings -------------------------------------------------------------------------------


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
        return f"{self.framework} {_fmt_interval(self.value, self.low, self.high)}"


@dataclass
class Decision:
    """A question's answer: winner (or why none), leader, runner-up and the reasons."""

    verdict: str
    leader: Competitor | None = None
    runner_up: Competitor | None = None
    notes: list[str] = field(default_factory=list)
    competitors: list[Competitor] = field(default_factory=list)


def _better(a: float, b: float, higher: bool) -> bool:
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
    above = [e for e in flagged if _better(e.value, leader.value, higher)]
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


def _setups(table: pd.DataFrame) -> Iterable[tuple[tuple[Any, ...], pd.DataFrame]]:
    """(set-up, its cells) in the cells' order."""
    return table.groupby(list(SETUP), sort=False, dropna=False)


def competitors(
    setup_cells: pd.DataFrame, question: str
) -> tuple[list[Competitor], int | None, int | None, str | None]:
    """The cells of one set-up that compete in ``question``.

    Returns ``(competitors, nodes, baseline_nodes, n/a reason)``; the node count is where
    the question is asked: the set-up's smallest node count for ``fastest_compute``, its
    largest multi-rank one for ``best_communication``, its largest for ``best_scaling``
    (against each framework's own baseline, which must be smaller).
    """
    column, _, _ = QUESTIONS[question]
    have = setup_cells[setup_cells["throughput"].notna()]
    if have.empty:
        return [], None, None, "n/a (no ok runs)"
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
                f"slower per sample: {_fmt_interval(*_tps(entry))} s vs {fastest.framework}'s "
                f"{_fmt_interval(*_tps(fastest))} s"
            )


def _tps(entry: Competitor) -> tuple[float, float, float]:
    t = entry.time_per_sample
    assert t is not None
    return t.value, t.low, t.high


def _findings_columns() -> tuple[str, ...]:
    columns: list[str] = [*SETUP, "frameworks", "node_counts", "repeats"]
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
    """Answer the study's three questions per model, network and set-up, from the cells.

    * ``fastest_compute``: the highest median throughput at the set-up's smallest node
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
        return _empty(columns)
    rows = []
    for setup, mine in _setups(cell_table):
        row: dict[str, Any] = {name: np.nan for name in columns}
        row.update(dict(zip(SETUP, setup, strict=True)))
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
                        f"{nodes} nodes ({_fmt(_tps(fastest)[0])} s vs {_fmt(tps[0])} s; intervals overlap)"
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


# --- the seed study's claims ---------------------------------------------------------------


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
        if not separated(mine, e, higher) and not (e.blocked and _better(mine.value, e.value, higher))
    ]
    if threats:
        return INCONCLUSIVE, "intervals overlap or unknown: " + "; ".join(e.text() for e in threats), mine
    return REPRODUCED, "clear of every other framework", mine


def claims(
    cell_table: pd.DataFrame, claim_list: Sequence[Claim] = CLAIMS, runs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The seed study's claims checked per model, network and set-up (``CLAIM_COLUMNS``).

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
        return _empty(CLAIM_COLUMNS)
    rows = []
    for setup, mine in _setups(cell_table):
        asked = {question: competitors(mine, question) for question in {c.question for c in claim_list}}
        for claim in claim_list:
            _, metric, higher = QUESTIONS[claim.question]
            row: dict[str, Any] = {name: np.nan for name in CLAIM_COLUMNS}
            row.update(dict(zip(SETUP, setup, strict=True)))
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


def _ran_with(row: dict[str, Any], runs: pd.DataFrame | None, framework: str, setup: tuple[Any, ...]) -> None:
    """Fill a claim row's ``threads_per_rank`` and ``settings`` from the framework's ok runs
    of that set-up's model (``;``-joined when they differ)."""
    if runs is None or runs.empty or "settings" not in runs:
        return
    model = setup[SETUP.index("model")]
    mine = runs[runs["framework"].eq(framework) & runs["model"].eq(model) & runs["status"].eq("ok")]
    if mine.empty:
        return
    row["threads_per_rank"] = ";".join(str(t) for t in sorted(mine["threads_per_rank"].dropna().unique()))
    row["settings"] = ";".join(sorted(str(v) for v in mine["settings"].dropna().unique()))


__all__: Sequence[str] = (
    "CELL_COLUMNS",
    "CLAIMS",
    "CLAIM_COLUMNS",
    "FINDINGS_COLUMNS",
    "Claim",
    "Competitor",
    "cells",
    "claims",
    "decide",
    "findings",
    "judge",
)
