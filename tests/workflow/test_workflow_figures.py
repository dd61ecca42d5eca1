"""Every figure the workflow drew for the session's four-framework study (tests/workflow/
conftest.py: LeNet in four frameworks, the AutoEncoder in torch only at learning rate 0, so
it never reaches a target) shows its tables: each panel, read back from Vega's rendering
of the figure's HTML, holds exactly the rows of runs.parquet, cells.csv, evals.csv or the
runs' medians that its labels name (dlscale.figures.shown). The efficiencies figure is the
one that drew LeNet's throughput efficiencies under "time-to-target efficiency" in the
demo; here each of its panels is compared with cells.csv directly as well. The other figures
(the scaling model's, the replay's, the Caffe per-layer time) are checked for placement."""

from __future__ import annotations

import pytest

from dlscale.figures import panels
from dlscale.figures.shown import check_figures
from dlscale.figures.study import read_results
from dlscale.outputs import FIGURE_FORMATS, FIGURES

pytestmark = pytest.mark.workflow


def test_every_figure_of_the_study_shows_its_tables(four_framework_study):
    results = four_framework_study / "results"
    figures = results / "figures"
    for name in FIGURES:
        for fmt in FIGURE_FORMATS:
            assert (figures / f"{name}.{fmt}").stat().st_size > 0, f"{name}.{fmt}"
    problems = check_figures(read_results(results), figures)
    assert problems == [], "\n".join(problems)
    for name in FIGURES:  # not vacuous: each figure drew rows in labelled panels
        drawn = panels.rendered_panels(panels.spec_of_html(figures / f"{name}.html"))
        assert sum(len(panel.rows) for panel in drawn) > 0, name
        assert all(panel.labels for panel in drawn), name


def test_no_other_figure_draws_a_row_in_another_panel(four_framework_study):
    """The scaling model's, the replay's and the Caffe per-layer figures: each facet panel's
    marks carry the panel's own label (no table claim for them yet: placement only)."""
    figures = four_framework_study / "results" / "figures"
    others = sorted(p for p in figures.glob("*.html") if p.stem not in FIGURES)
    assert {"projection", "validation", "replay"} <= {p.stem for p in others}
    problems = [problem for p in others for problem in panels.check_placement(p.stem, panels.spec_of_html(p))]
    assert problems == [], "\n".join(problems)


def test_each_efficiencies_panel_holds_its_models_cells(four_framework_study):
    results = four_framework_study / "results"
    cells = read_results(results).cells
    drawn = panels.rendered_panels(panels.spec_of_html(results / "figures" / "efficiencies.html"))
    by_panel = {(p.labels["row"], p.labels["column"]): p.rows for p in drawn}
    for model, mine in cells[cells["efficiency"].notna()].groupby("model"):
        rows = by_panel[(model, "throughput efficiency")]
        assert {r["model"] for r in rows} == {model}
        shown = {(r["framework"], int(r["nodes"])): r["value"] for r in rows}
        want = {
            (f, int(n)): e
            for f, n, e in zip(mine["framework"], mine["nodes"], mine["efficiency"], strict=True)
        }
        assert shown == pytest.approx(want), model
    for (model, kind), rows in by_panel.items():
        assert all(r["model"] == model and r["kind"] == kind for r in rows), (model, kind)
