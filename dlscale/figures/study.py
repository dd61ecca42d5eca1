"""The study's figures drawn from the tables the aggregation wrote, as they are on disk.

The figures package sits above the analysis: the aggregation writes runs.parquet,
iterations.parquet, cells.csv and evals.csv (``dlscale.outputs.AGGREGATE_FILES``),
and every figure is drawn from those files, so that a figure shows the numbers of the
table beside it and the cells are computed once. The workflow's figures rule and
``python -m dlscale.figures RESULTS_DIR`` (a results folder copied from a cluster) both go
through ``read_tables`` and ``draw_figures``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dlscale.base.untrusted import restored
from dlscale.figures import charts, quality
from dlscale.outputs import AGGREGATE_FILES, FIGURE_FORMATS, FIGURES

#: The aggregation's tables the figures read, by the aggregate rule's output names.
FIGURE_INPUTS: tuple[str, ...] = ("runs_parquet", "iterations_parquet", "cells_csv", "evals_csv")


@dataclass(frozen=True)
class StudyTables:
    """The tables the figures are drawn from, read back from the aggregation's files."""

    runs: pd.DataFrame
    iterations: pd.DataFrame
    cells: pd.DataFrame
    evals: pd.DataFrame


def read_csv_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A table written by the aggregation; an empty study writes a file with no columns.
    Cells the writer quoted against formula injection (dlscale.base.untrusted) read back whole."""
    try:
        return restored(pd.read_csv(path))
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def read_tables(
    runs: str | os.PathLike[str],
    iterations: str | os.PathLike[str],
    cells: str | os.PathLike[str],
    evals: str | os.PathLike[str],
) -> StudyTables:
    """The four tables from their files (runs.parquet, iterations.parquet, cells.csv, evals.csv)."""
    return StudyTables(
        pd.read_parquet(runs), pd.read_parquet(iterations), read_csv_table(cells), read_csv_table(evals)
    )


def read_results(folder: str | os.PathLike[str]) -> StudyTables:
    """The tables of a results folder, under the names the aggregation gives them."""
    root = Path(folder)
    runs, iterations, cells, evals = (root / AGGREGATE_FILES[name] for name in FIGURE_INPUTS)
    missing = [str(p) for p in (runs, iterations, cells, evals) if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"not the aggregation's tables: {', '.join(missing)} missing")
    return read_tables(runs, iterations, cells, evals)


def figure_paths(
    folder: str | os.PathLike[str], names: Iterable[str] = FIGURES, formats: Iterable[str] = FIGURE_FORMATS
) -> dict[str, dict[str, str]]:
    """``{figure: {format: folder/figure.format}}``: where the workflow writes each figure."""
    fmts = tuple(formats)
    return {name: {fmt: str(Path(folder) / f"{name}.{fmt}") for fmt in fmts} for name in names}


def draw_figures(tables: StudyTables, out: dict[str, dict[str, str]]) -> list[Path]:
    """Draw the figures ``out`` names (of ``dlscale.outputs.FIGURES``) from ``tables``;
    return the files written. An unknown name raises ``KeyError``."""
    unknown = sorted(set(out) - set(FIGURES))
    if unknown:
        raise KeyError(f"unknown figure(s) {', '.join(unknown)}; expected {', '.join(FIGURES)}")
    study = {name: paths for name, paths in out.items() if name in charts.STUDY_FIGURES}
    learned = {name: paths for name, paths in out.items() if name in quality.QUALITY_FIGURES}
    charts.make_figures(tables.runs, tables.iterations, tables.cells, study)
    quality.make_quality_figures(tables.runs, tables.cells, tables.evals, learned)
    return [Path(path) for paths in out.values() for path in paths.values()]
