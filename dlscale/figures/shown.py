"""What each of the study's figures claims to show, from the tables on disk, and the check
that its rendered panels show exactly that (``dlscale.figures.panels``).

Each claim names the table rows a figure should draw, in the chart's column names, and
where its panels say which rows they hold: throughput and speedup show runs.parquet's ok
runs and cells.csv's cells, a panel per model; the time breakdown and the loss curves the
runs' medians, a sub-chart per model and a panel per framework; held-out quality
evals.csv's evaluations, a panel per model, node count and metric; the efficiencies
cells.csv's two efficiencies, a row per model and a column per kind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pandas as pd

from dlscale.figures import charts, quality
from dlscale.figures.panels import Claim, check_chart, spec_of_html
from dlscale.figures.study import StudyTables
from dlscale.outputs import FIGURES

_SCALING_COLUMNS = ["kind", "run_id", "cell", "model", "nodes", "value", "low", "high"]


def _scaling(tables: StudyTables, metric: str) -> Claim:
    """The ok runs with a ``metric`` (runs.parquet) and the cells with one (cells.csv)."""
    runs, cells = tables.runs, tables.cells
    rows = []
    if not runs.empty and "status" in runs:
        ok = runs[runs["status"].eq("ok") & runs["throughput"].notna() & runs[metric].notna()]
        rows.append(
            pd.DataFrame(
                {
                    "kind": "run",
                    "run_id": ok["run_id"],
                    "cell": "",
                    "model": ok["model"],
                    "nodes": ok["nodes"],
                }
            ).assign(value=ok[metric], low=None, high=None)
        )
    if not cells.empty and metric in cells:
        shown = cells[cells["throughput"].notna() & cells[metric].notna()]
        rows.append(
            pd.DataFrame(
                {
                    "kind": "cell",
                    "run_id": "",
                    "cell": shown["cell"],
                    "model": shown["model"],
                    "nodes": shown["nodes"],
                }
            ).assign(value=shown[metric], low=shown[f"{metric}_low"], high=shown[f"{metric}_high"])
        )
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=_SCALING_COLUMNS)
    return Claim(table[_SCALING_COLUMNS], {"panel": "model"})


def _breakdown(tables: StudyTables) -> Claim:
    table = charts.breakdown_table(tables.runs)
    table = table[table["seconds"].notna()]
    return Claim(
        table[["model", "series", "nodes", "component", "seconds"]], {"chart": "model", "column": "series"}
    )


def _loss(tables: StudyTables) -> Claim:
    table = charts.loss_table(tables.runs, tables.iterations)
    table = table[table["loss"].notna()]
    return Claim(
        table[["model", "series", "nodes", "iteration", "loss"]], {"chart": "model", "column": "series"}
    )


def _quality(tables: StudyTables) -> Claim:
    table = quality.quality_table(tables.evals, tables.runs)
    columns = ["run_id", "panel", "iteration", "value", "train_s"]
    table = table.reindex(columns=columns)
    return Claim(table[table["value"].notna() & table["train_s"].notna()], {"panel": "panel"})


def _efficiencies(tables: StudyTables) -> Claim:
    table = quality.efficiencies_table(tables.cells)
    table = table[table["value"].notna()]
    columns = ["framework", "model", "nodes", "kind", "value", "low", "high"]
    return Claim(table[columns], {"row": "model", "column": "kind"})


#: Every figure of ``dlscale.outputs.FIGURES`` -> what it claims to show.
CLAIMS: Mapping[str, Callable[[StudyTables], Claim]] = {
    "throughput": lambda tables: _scaling(tables, "throughput"),
    "speedup": lambda tables: _scaling(tables, "speedup"),
    "breakdown": _breakdown,
    "loss": _loss,
    "quality": _quality,
    "efficiencies": _efficiencies,
}


def check_figures(
    tables: StudyTables, folder: str | os.PathLike[str], names: Iterable[str] = FIGURES
) -> list[str]:
    """Every problem of the figures ``names`` drawn in ``folder`` (their HTML, whose spec
    the SVG and PNG were rendered from) against ``tables``: empty when each panel of each
    figure shows exactly its table's rows."""
    problems = []
    for name in names:
        spec = spec_of_html(Path(folder) / f"{name}.html")
        problems += check_chart(name, spec, CLAIMS[name](tables))
    return problems
