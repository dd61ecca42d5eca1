"""Studies against each other: ``python -m dlscale.compare BASE NEW [MORE ...] --out DIR``.

People re-check a framework decision when the software or the machine changes (torch
upgraded, a setting tuned, a new cluster, a laptop study repeated on the real machine).
This package says, cell by cell and with intervals, what changed between two or more
studies, and which verdicts changed with it.

* **Input.** Each argument is a study's results folder (``runs.csv`` with ``runs/``
  beside it, as the workflow or ``python -m dlscale.analysis`` writes it, or the study
  folder above it) or its archive from ``make artifact``. An archive, and a folder with a
  ``MANIFEST.json`` (an unpacked one), is checked with ``dlscale.archive.verify`` first: an archive
  that fails is refused, never read.
* **Cells** are matched by what they ran (``MATCH_KEYS``: framework, model, dataset,
  scaling, network, ranks per node, the batch that stays fixed, threads per rank, nodes).
  A cell of one study without its match in the other is listed (``unmatched.csv``),
  never dropped silently. ``--ignore-key threads_per_rank`` matches across a deliberate
  change of that key (it then shows among the differences).
* **Per matched cell and metric** (``METRICS``, each with the direction that is better):
  the NEW/BASE ratio of the medians over the repeats, with the interval of
  ``dlscale.analysis.stats.ratio_interval`` (the verdicts' rules: a seeded bootstrap with 6 or more
  repeats on each side, else the conservative range ratio with its coverage), and a
  Mann-Whitney U test with 2 or more repeats a side (``rank_test``). Efficiency is a
  ratio of ratios (each study's cell over its baseline cell): its interval comes from the
  four cells' repeats (``efficiency_ratio_interval``) and it has no rank test. ``change``
  is ``improved`` or ``regressed`` only with evidence at ``1 - CONFIDENCE``
  (``decide_change``): the interval excludes 1 and the rank test rejects (or, without a
  test, the interval is a 95 % bootstrap one) and the interval clears the between-study
  noise floor (``clears_floor``: wholly beyond ``1 +/- COMPARE_NOISE_FLOOR``, identical
  studies differ by offsets their own repeats do not see); otherwise ``no change``, and ``note`` says
  why when the interval alone excludes 1. With 2 or 3 repeats a side no rank test can
  reject (``smallest_p``): a range that happens to exclude 1 is no evidence (2 against 2
  separate completely one time in three by chance).
* **Verdict changes**: every finding (the three questions) and seed claim whose answer
  differs between the studies (a different winner, or a winner against "no clear
  winner").
* **Differences**: what the studies ran with, as their tables, run_start events and
  archive manifests record it (``study_facts``).

The repeats are the samples, as in the verdicts: a run contributes its median over timed
iterations (``runs.csv``), never its iterations. The CLI writes every output or none
(``atomic.replace_all``); bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dlscale.analysis.cells import NO_CLEAR_WINNER, QUESTIONS
from dlscale.analysis.claims import CONTRADICTED, INCONCLUSIVE, REPRODUCED
from dlscale.analysis.speedup import COMPARISON_GROUP
from dlscale.base import atomic
from dlscale.base.untrusted import shown, write_csv
from dlscale.compare import page as compare_page
from dlscale.compare.cells import (
    COMPARISON_COLUMNS,
    IGNORABLE_KEYS,
    IMPROVED,
    MATCH_KEYS,
    METRICS,
    NO_CHANGE,
    OUTPUT_FILES,
    REGRESSED,
    UNMATCHED_COLUMNS,
    VERDICT_CHANGE_COLUMNS,
    compare_efficiency,
    compare_metric,
    metric_applies,
    run_keys,
    study_cells,
)
from dlscale.compare.studies import (
    CompareError,
    Study,
    check_distinct,
    check_out,
    differences,
    hardware_differs,
    load_study_results,
    one_line,
    unique_labels,
)
from dlscale.networks import HOST
from dlscale.thresholds import threshold

#: The smallest relative change named (dlscale.thresholds; ``--noise-floor`` overrides it).
COMPARE_NOISE_FLOOR = threshold("compare_noise_floor").value


@dataclass
class Pair:
    """BASE against one NEW study: the comparison rows, the unmatched cells, the verdicts."""

    comparison: pd.DataFrame
    unmatched: pd.DataFrame
    verdict_changes: pd.DataFrame
    matched: int


def compare_pair(
    base: Study, new: Study, keys: Sequence[str] = MATCH_KEYS, floor: float = COMPARE_NOISE_FLOOR
) -> Pair:
    """Every matched cell's metrics (``compare_metric``), the cells of either study
    without a match, and the verdicts that changed. ``CompareError`` when no cell is in
    common."""
    mine, theirs = study_cells(base.runs, keys, base.label), study_cells(new.runs, keys, new.label)
    common = [k for k in mine if k in theirs]
    if not common:
        empty = [_why_no_cells(s) for s, cells in ((base, mine), (new, theirs)) if not cells]
        raise CompareError(
            f"no cell in common between {base.label} ({base.source}, {len(mine)} cells) and {new.label}"
            f" ({new.source}, {len(theirs)} cells): "
            + ("; ".join(empty) if empty else f"they ran different cells (matched on {', '.join(keys)})")
        )
    rows = []
    for key in common:
        for metric in METRICS:
            if not metric_applies(metric, mine[key], theirs[key]):
                continue
            if metric.name == "efficiency":
                baseline = _baseline_key(key, keys, mine[key].baseline_nodes)
                if baseline not in mine or baseline not in theirs:
                    continue
                numbers = compare_efficiency(mine[key], mine[baseline], theirs[key], theirs[baseline], floor)
            else:
                numbers = compare_metric(
                    mine[key].values[metric.name], theirs[key].values[metric.name], metric, floor
                )
            if numbers is not None:
                rows.append(
                    {
                        "study": new.label,
                        "base": base.label,
                        "cell": mine[key].name,
                        **_key_dict(key, keys),
                        **numbers,
                    }
                )
    ran = {base.label: run_keys(base.runs, keys), new.label: run_keys(new.runs, keys)}
    unmatched = [
        {"study": new.label, "base": base.label, "only_in": label, "cell": cell.name, **_key_dict(k, keys),
         "repeats": cell.repeats,
         "why": f"no ok, uncontended repeat in {other_label}" if k in ran[other_label] else f"not run in {other_label}"}
        for label, cells, other, other_label in (
            (base.label, mine, theirs, new.label), (new.label, theirs, mine, base.label)
        )
        for k, cell in cells.items()
        if k not in other
    ]  # fmt: skip
    return Pair(
        pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS)),
        pd.DataFrame(unmatched, columns=list(UNMATCHED_COLUMNS)),
        verdict_changes(base, new),
        len(common),
    )


def _why_no_cells(study: Study) -> str:
    """Why a study has no cell to compare: its runs' statuses (a cell is made of ok,
    uncontended runs)."""
    statuses = study.runs["status"].astype(str).value_counts() if "status" in study.runs else {}
    found = ", ".join(f"{count} {status!r}" for status, count in statuses.items()) or "no runs"
    return f"{study.label} has no ok, uncontended run with a throughput (statuses: {found})"


def _baseline_key(key: tuple[Any, ...], keys: Sequence[str], nodes: float) -> tuple[Any, ...]:
    """The key of a cell's baseline cell: the same cell at ``nodes``."""
    out = list(key)
    out[list(keys).index("nodes")] = int(nodes)
    return tuple(out)


def _key_dict(key: tuple[Any, ...], keys: Sequence[str]) -> dict[str, Any]:
    out = dict.fromkeys(MATCH_KEYS, "(any)")
    out.update(zip(keys, key, strict=True))
    return out


# --- verdicts ------------------------------------------------------------------------------------


def _group_key(row: Mapping[str, Any]) -> tuple[str, ...]:
    out = []
    for name in COMPARISON_GROUP:
        value = row.get(name)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out.append(HOST if name == "network" else "")
        elif isinstance(value, float) and value.is_integer():
            out.append(str(int(value)))
        else:
            out.append(str(value))
    return tuple(out)


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def what_changed(base: str, new: str) -> str:
    """How a verdict changed, in words: a different winner, a winner gained or lost."""
    undecided = ("", NO_CLEAR_WINNER)
    if base.startswith("n/a") or new.startswith("n/a") or not base or not new:
        return "asked in one study only"
    if base in undecided or new in undecided:
        return (
            f"winner {new} where there was no clear winner" if base in undecided else f"{base} no longer wins"
        )
    if base in (REPRODUCED, CONTRADICTED, INCONCLUSIVE):
        return f"claim {base} -> {new}"
    return f"different winner: {base} -> {new}"


def verdict_changes(base: Study, new: Study) -> pd.DataFrame:
    """Every finding (the three questions) and seed claim answered differently by ``new``
    than by ``base``, per comparison group in both studies."""
    rows: list[dict[str, Any]] = []
    theirs = {_group_key(r): r for r in new.findings.to_dict("records")}
    for row in base.findings.to_dict("records"):
        other = theirs.get(_group_key(row))
        if other is None:
            continue
        for question in QUESTIONS:
            was, now = _text(row.get(question)), _text(other.get(question))
            if was != now:
                rows.append(_verdict_row(base, new, "finding", row, question, was, now))
    claims = {(_group_key(r), str(r.get("claim"))): r for r in new.claims.to_dict("records")}
    for row in base.claims.to_dict("records"):
        other = claims.get((_group_key(row), str(row.get("claim"))))
        if other is None:
            continue
        was, now = _text(row.get("verdict")), _text(other.get("verdict"))
        if was != now:
            rows.append(_verdict_row(base, new, "claim", row, str(row.get("claim")), was, now))
    return pd.DataFrame(rows, columns=list(VERDICT_CHANGE_COLUMNS))


def _verdict_row(
    base: Study, new: Study, kind: str, row: Mapping[str, Any], question: str, was: str, now: str
) -> dict[str, Any]:
    return {
        "study": new.label,
        "base": base.label,
        "kind": kind,
        **dict(zip(COMPARISON_GROUP, _group_key(row), strict=True)),
        "question": question,
        "base_verdict": was,
        "new_verdict": now,
        "what_changed": what_changed(was, now),
    }


# --- the whole comparison ---------------------------------------------------------------------


@dataclass
class Comparison:
    """Everything ``compare`` makes (``compare_page`` draws it)."""

    studies: list[Study]
    comparison: pd.DataFrame
    verdict_changes: pd.DataFrame
    differences: pd.DataFrame
    unmatched: pd.DataFrame
    hardware: list[str]
    keys: tuple[str, ...]
    matched: dict[str, int]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per NEW study: how many cell-metrics improved, regressed or did not change."""
        out: dict[str, dict[str, int]] = {}
        for study in self.studies[1:]:
            mine = self.comparison[self.comparison["study"].eq(study.label)]
            out[study.label] = {c: int(mine["change"].eq(c).sum()) for c in (IMPROVED, REGRESSED, NO_CHANGE)}
        return out


def compare(
    targets: Sequence[str | Path], ignore: Sequence[str] = (), noise_floor: float = COMPARE_NOISE_FLOOR
) -> Comparison:
    """Compare the studies at ``targets`` (the first is BASE) cell by cell; ``ignore``:
    match keys left out of the matching (``IGNORABLE_KEYS``); ``noise_floor``: the
    between-study band a change's interval must clear (``clears_floor``)."""
    if len(targets) < 2:
        raise CompareError("give at least two studies: BASE NEW [MORE ...]")
    if not 0.0 <= noise_floor < 1.0:
        raise CompareError(f"--noise-floor {noise_floor:g}: give a relative change in [0, 1), e.g. 0.1")
    unknown = [k for k in ignore if k not in IGNORABLE_KEYS]
    if unknown:
        raise CompareError(
            f"--ignore-key {', '.join(unknown)}: only {', '.join(IGNORABLE_KEYS)} may be ignored"
        )
    check_distinct(targets)
    keys = tuple(k for k in MATCH_KEYS if k not in ignore)
    studies = [load_study_results(t, label) for t, label in zip(targets, unique_labels(targets), strict=True)]
    pairs = [compare_pair(studies[0], other, keys, noise_floor) for other in studies[1:]]
    diffs = with_verdicts(differences(studies), studies)
    return Comparison(
        studies,
        _concat([p.comparison for p in pairs], COMPARISON_COLUMNS),
        _concat([p.verdict_changes for p in pairs], VERDICT_CHANGE_COLUMNS),
        diffs,
        _concat([p.unmatched for p in pairs], UNMATCHED_COLUMNS),
        hardware_differs(diffs),
        keys,
        {s.label: p.matched for s, p in zip(studies[1:], pairs, strict=True)},
    )


#: The differences table's row that says, for every study, what verify proved of it.
VERDICT_FACT = "verify verdict"


def with_verdicts(diffs: pd.DataFrame, studies: Sequence[Study]) -> pd.DataFrame:
    """``diffs`` with a first row, always there, holding each study's verify verdict
    ("consistent, origin not proven" unless its publisher's digest proved it)."""
    row = {"fact": VERDICT_FACT, "hardware": False, **{s.label: s.verified for s in studies}}
    return pd.concat([pd.DataFrame([row], columns=diffs.columns), diffs], ignore_index=True)


def _concat(frames: Sequence[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(columns))


def write_comparison(result: Comparison, out: str | Path) -> list[Path]:
    """Write every output of ``OUTPUT_FILES`` under ``out``, all or none."""
    folder = Path(out)
    chart = compare_page.ratio_chart(
        result.comparison, [s.label for s in result.studies[1:]], result.hardware
    )
    svg = compare_page.chart_svg(chart)
    page = compare_page.page(
        [
            {"label": s.label, "role": "BASE" if i == 0 else "NEW", "source": s.source, "runs": str(len(s.runs)),
             "checked": s.verified, "table schema": str(s.schema)}
            for i, s in enumerate(result.studies)
        ],
        result.comparison,
        result.verdict_changes,
        result.differences,
        result.unmatched,
        result.hardware,
        result.counts(),
        {m.name: (m.label, m.higher_is_better, m.normalised) for m in METRICS},
        result.keys,
        svg,
    )  # fmt: skip
    tables = {
        "comparison": result.comparison,
        "verdict_changes": result.verdict_changes,
        "differences": result.differences,
        "unmatched": result.unmatched,
    }
    writers: dict[Path, Any] = {
        folder / OUTPUT_FILES[name]: (lambda tmp, t=table: write_csv(t, tmp))
        for name, table in tables.items()
    }
    writers[folder / OUTPUT_FILES["page"]] = lambda tmp: Path(tmp).write_text(page, encoding="utf-8")
    for fmt in compare_page.FIGURE_FORMATS:
        target = folder / OUTPUT_FILES[f"figure_{fmt}"]
        if fmt == "svg":
            writers[target] = lambda tmp: Path(tmp).write_text(svg, encoding="utf-8")
        else:
            writers[target] = lambda tmp, f=fmt: compare_page.save(chart, tmp, f)
    return atomic.replace_all(writers)


def summary(result: Comparison) -> list[str]:
    """Lines for the terminal: per NEW study the matched cells and the changes."""
    lines = []
    for label, counts in result.counts().items():
        changed = result.verdict_changes[result.verdict_changes["study"].eq(label)]
        only = result.unmatched[result.unmatched["study"].eq(label)]
        lines.append(
            f"{label} against {result.studies[0].label}: {result.matched[label]} cells matched"
            f" ({len(only)} unmatched); {counts[IMPROVED]} improved, {counts[REGRESSED]} regressed,"
            f" {counts[NO_CHANGE]} no change; {len(changed)} verdict(s) changed"
        )
    if result.hardware:
        lines.append(
            f"the hardware differs ({', '.join(result.hardware)}): raw throughput compares the machines"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dlscale.compare BASE NEW [MORE ...] --out DIR``."""
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.compare",
        description="Compare studies cell by cell with intervals: NEW/BASE ratios of each metric's median,"
        " the verdicts that changed and what the studies ran with (docs/compare.md).",
    )
    parser.add_argument("base", help="the reference study: a results folder, a study folder or an archive")
    parser.add_argument("new", nargs="+", help="the study (or studies) compared with BASE")
    parser.add_argument("--out", required=True, help="folder for the comparison (created if missing)")
    parser.add_argument(
        "--ignore-key",
        action="append",
        default=[],
        choices=IGNORABLE_KEYS,
        help="match cells without this key (a deliberate change of it, e.g. threads_per_rank); repeatable",
    )
    parser.add_argument(
        "--noise-floor",
        type=float,
        default=COMPARE_NOISE_FLOOR,
        help="a change is named only when its ratio's interval lies wholly beyond 1 +/- this"
        f" (default {COMPARE_NOISE_FLOOR:g}, measured on identical studies: docs/compare.md; 0: the test alone)",
    )
    args = parser.parse_args(argv)
    try:
        check_out(args.out, [args.base, *args.new])
        result = compare([args.base, *args.new], args.ignore_key, args.noise_floor)
    except CompareError as err:
        print(f"compare: {one_line(err)}", file=sys.stderr)
        return 2
    try:
        written = write_comparison(result, args.out)
    except atomic.WriteError as err:
        print(f"compare: {one_line(err)}", file=sys.stderr)
        return 1
    for line in summary(result):
        print(shown(line))
    for path in written:
        print(shown(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
