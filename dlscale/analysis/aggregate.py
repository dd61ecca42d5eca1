"""The aggregation: every events file of a study -> the runs, iterations, cells, findings
and claims tables, written atomically.

The workflow's aggregate rule and ``python -m dlscale.analysis RUNS_DIR --out DIR`` (run
folders copied from a cluster) both go through ``aggregate`` and ``write_outputs``, so they
give the same tables. How each table is made: ``dlscale.analysis.tables`` (events -> runs and
iterations), ``dlscale.analysis.cells``, ``findings`` and ``claims``, ``dlscale.analysis.stats`` (intervals).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dlscale.analysis import claims, convergence, target_claims
from dlscale.analysis.cells import cells as cells_of
from dlscale.analysis.evals import Target, parse_target
from dlscale.analysis.findings import findings as findings_of
from dlscale.analysis.nodes_to_target import nodes_to_target
from dlscale.analysis.tables import add_roofline, load_study
from dlscale.analysis.wallsplit import WallSplit
from dlscale.base import atomic
from dlscale.base.untrusted import shown, write_csv
from dlscale.host import roofline
from dlscale.outputs import AGGREGATE_FILES


def findings(runs: pd.DataFrame, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """The study's three questions answered per model, network and set-up, with verdicts:
    ``dlscale.analysis.findings`` on the cells of ``runs`` (made here when not given)."""
    return findings_of(cells_of(runs) if cells is None else cells)


#: The tables ``aggregate`` makes -> their file names (the aggregate rule's output names).
OUTPUT_FILES: Mapping[str, str] = AGGREGATE_FILES


#: Rows per row group of iterations.parquet: the parquet writer holds a whole row group
#: encoded before it writes it, so a long run's table is written in pieces of this many rows
#: (docs/memory.md); the file reads back as the same table.
ITERATION_ROW_GROUP = 1 << 16


@dataclass(frozen=True)
class Tables:
    """Everything one aggregation makes."""

    runs: pd.DataFrame
    iterations: pd.DataFrame
    cells: pd.DataFrame
    findings: pd.DataFrame
    claims: pd.DataFrame
    #: One row per eval event (held-out quality during and after training).
    evals: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Per model, set-up and node count with a quality target: who trains to it fastest.
    time_to_target: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: How many nodes to a trained model (dlscale.analysis.nodes_to_target): every run's
    #: outcome against its target, steps to target per global batch with the S(B) fit, the
    #: fit per framework, model and rule, time and node-hours per node count with the winners.
    target_runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps_to_target: pd.DataFrame = field(default_factory=pd.DataFrame)
    batch_fit: pd.DataFrame = field(default_factory=pd.DataFrame)
    nodes_to_target: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Where the study's time goes, per framework (dlscale.analysis.wallsplit).
    wall_split: pd.DataFrame = field(default_factory=pd.DataFrame)


def aggregate(
    paths: Iterable[str | os.PathLike[str]],
    peak: Mapping[str, Any] | None = None,
    targets: Mapping[str, Target] | None = None,
    same_work_only: bool = True,
) -> Tables:
    """Events files -> every table. Files are read in sorted order, so the tables do not
    depend on the order the paths come in (a rule's input list, a directory walk).
    ``peak``: the host's matmul peak (dlscale.host.roofline) for the roofline fraction;
    ``targets``: model -> quality target, over what the runs' specs carry (dlscale.analysis.evals);
    ``same_work_only``: time to target compares only set-ups that run the reference
    optimisation (dlscale.analysis.convergence)."""
    split = WallSplit()
    runs, iterations, evals = load_study(sorted(paths, key=str), targets, on_run=split)
    runs = add_roofline(runs, peak)
    cells = cells_of(runs)
    nodes = nodes_to_target(runs, evals, iterations)
    return Tables(
        runs,
        iterations,
        cells,
        findings_of(cells),
        target_claims.add_time_to_target(claims.claims(cells, runs=runs), cells),
        evals,
        convergence.fastest_to_target(cells, same_work_only),
        nodes.target_runs,
        nodes.steps_to_target,
        nodes.batch_fit,
        nodes.nodes_to_target,
        split.table(),
    )


def write_outputs(tables: Tables, targets: Mapping[str, str | os.PathLike[str]]) -> list[Path]:
    """Write the tables named in ``targets`` (keys of ``OUTPUT_FILES``), all or none
    (``atomic.replace_all``): a table that cannot be written (a full disk) raises
    ``atomic.WriteError`` naming it, and every table keeps its old contents."""
    unknown = sorted(set(targets) - set(OUTPUT_FILES))
    if unknown:
        raise KeyError(f"unknown output(s) {', '.join(unknown)}; expected {', '.join(OUTPUT_FILES)}")
    writers = {
        "runs_csv": lambda tmp: write_csv(tables.runs, tmp),
        "runs_parquet": lambda tmp: tables.runs.to_parquet(tmp, index=False),
        "iterations_parquet": lambda tmp: tables.iterations.to_parquet(
            tmp, index=False, row_group_size=ITERATION_ROW_GROUP
        ),
        "cells_csv": lambda tmp: write_csv(tables.cells, tmp),
        "findings_csv": lambda tmp: write_csv(tables.findings, tmp),
        "claims_csv": lambda tmp: write_csv(tables.claims, tmp),
        "evals_csv": lambda tmp: write_csv(tables.evals, tmp),
        "time_to_target_csv": lambda tmp: write_csv(tables.time_to_target, tmp),
        "target_runs_csv": lambda tmp: write_csv(tables.target_runs, tmp),
        "steps_to_target_csv": lambda tmp: write_csv(tables.steps_to_target, tmp),
        "batch_fit_csv": lambda tmp: write_csv(tables.batch_fit, tmp),
        "nodes_to_target_csv": lambda tmp: write_csv(tables.nodes_to_target, tmp),
        "wall_split_csv": lambda tmp: write_csv(tables.wall_split, tmp),
    }
    return atomic.replace_all({target: writers[name] for name, target in targets.items()})


def write_tables(
    runs: pd.DataFrame,
    iterations: pd.DataFrame,
    findings: pd.DataFrame,
    runs_csv: str | os.PathLike[str],
    runs_parquet: str | os.PathLike[str],
    iterations_parquet: str | os.PathLike[str],
    findings_csv: str | os.PathLike[str],
) -> None:
    """Write the runs, iterations and findings tables, each atomically (``write_outputs``)."""
    empty = pd.DataFrame()
    write_outputs(
        Tables(runs, iterations, empty, findings, empty),
        {
            "runs_csv": runs_csv,
            "runs_parquet": runs_parquet,
            "iterations_parquet": iterations_parquet,
            "findings_csv": findings_csv,
        },
    )


def find_events(runs_dir: str | os.PathLike[str]) -> list[Path]:
    """Every ``events.jsonl`` under ``runs_dir``, sorted (attempt copies are not named so),
    but the tuning stage's (a ``tune/`` folder, dlscale.tune.grid): they repeat the 1-node
    runs' ids with other settings and are not the study's runs."""
    root = Path(runs_dir)
    return sorted(p for p in root.rglob("events.jsonl") if "tune" not in p.relative_to(root).parts[:-1])


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


def parse_targets(texts: Sequence[str]) -> dict[str, Target]:
    """``--target`` values as model -> target; ValueError for a model given twice (the
    last would silently win)."""
    targets: dict[str, Target] = {}
    for text in texts:
        model, target = parse_target(text)
        if model in targets:
            raise ValueError(
                f"--target {text!r}: {model} has a target already"
                f" ({targets[model].metric}:{targets[model].value:g}): give one a model"
            )
        targets[model] = target
    return targets


def _one_line(err: BaseException) -> str:
    return shown(str(err) or type(err).__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dlscale.analysis RUNS_DIR --out DIR``: the aggregate rule, by hand. Bad
    input (an events file that breaks the contract or is refused as hostile, a target given
    twice) is one line on stderr and exit status 2."""
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.analysis",
        description="Build runs.csv/.parquet, iterations.parquet, cells.csv, findings.csv and claims.csv "
        "from every events.jsonl under RUNS_DIR (run folders copied from a cluster), exactly as "
        "the workflow's aggregate rule does. The figures are drawn from these tables by "
        "python -m dlscale.figures OUT.",
    )
    parser.add_argument("runs_dir", help="folder searched for events.jsonl files (e.g. results/runs)")
    parser.add_argument("--out", required=True, help="folder for the tables (created if missing)")
    parser.add_argument(
        "--peak",
        help="the host's matmul peak (results/host/matmul_peak.json) for the roofline fraction",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="MODEL=METRIC:VALUE",
        help="judge MODEL's runs by time to this held-out quality (e.g. lenet=top1:0.98; repeatable),"
        " over the target their specs carry",
    )
    parser.add_argument(
        "--allow-designed-differences",
        action="store_true",
        help="let set-ups whose optimisation differs by design (BigDL's FP16 exchange, parameter"
        " servers) compete for time to target (the study key same_work_only: false)",
    )
    args = parser.parse_args(argv)
    try:
        targets = parse_targets(args.target)
        if not Path(args.runs_dir).is_dir():
            raise ValueError(f"{args.runs_dir}: not a folder (give the run folders, e.g. results/runs)")
        paths = find_events(args.runs_dir)
        if not paths:
            raise ValueError(f"{args.runs_dir}: no events.jsonl found")
        tables = aggregate(paths, roofline.read_peak(args.peak), targets, not args.allow_designed_differences)
    except (ValueError, OSError) as err:  # EventError, foreign.Refused: FILE:LINE and the rule
        print(f"python -m dlscale.analysis: {_one_line(err)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        written = write_outputs(tables, {name: out / filename for name, filename in OUTPUT_FILES.items()})
    except atomic.WriteError as err:  # a full disk: one line naming the file, not pandas' traceback
        print(f"python -m dlscale.analysis: {_one_line(err)}", file=sys.stderr)
        return 1
    print(shown(summary(tables.runs)))
    for row in tables.runs[tables.runs["status"].eq("failed")].itertuples():
        print(shown(f"failed run {row.run_id}: {row.reason}"), file=sys.stderr)
    for path in written:
        print(shown(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
