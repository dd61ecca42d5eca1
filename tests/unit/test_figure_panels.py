"""Figures that show their tables: every panel of every figure, read back from Vega's
rendering, holds exactly its table's rows (dlscale.figures.panels, dlscale.figures.shown);
a chart that puts rows in the wrong panel fails, naming the figure and the panel. The
figures are drawn from the aggregation's tables on disk (dlscale.figures.study,
``python -m dlscale.figures``)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import pytest
from helpers.events import iteration, run_end, run_start
from helpers.paths import REPO

from dlscale import quality as metrics
from dlscale.analysis import aggregate
from dlscale.events import write_atomic
from dlscale.figures import panels, quality, shown
from dlscale.figures.__main__ import main
from dlscale.figures.study import StudyTables, draw_figures, figure_paths, read_results
from dlscale.outputs import FIGURE_FORMATS, FIGURES

#: The hand-made study: LeNet in four frameworks reaches its target; the AutoEncoder (torch
#: only) never does, so it has a throughput efficiency and no time-to-target efficiency,
#: the study whose efficiencies figure drew LeNet's rows in the wrong panels.
STEP_S = {"torch": 0.01, "tensorflow": 0.02, "bigdl": 0.015, "caffe": 0.013}
TARGETS = {"lenet": {"metric": "top1", "value": 0.9}, "autoencoder": {"metric": "mse", "value": 0.05}}
EVALS = {"lenet": [(4, 0.5), (8, 0.85), (12, 0.93)], "autoencoder": [(4, 0.2), (8, 0.2), (12, 0.2)]}


def learning_run(root: Path, framework: str, model: str, nodes: int, repeat: int) -> Path:
    """A run of 12 iterations (1 warm-up) with rank 0's evaluations and its model's target."""
    step = STEP_S[framework] * nodes * (1 + 0.02 * repeat)
    start = run_start(framework=framework, model=model, nodes=nodes, repeat=repeat, total=11)
    start["spec"] |= {"warmup": 1, "quality_target": TARGETS[model]}
    steps = [
        iteration(
            rank, index, step, compute=step * 0.8, comm=step * 0.2, loss=2.0 / (1 + index), warmup=index < 1
        )
        for index in range(12)
        for rank in range(nodes)
    ]
    evals = [
        {
            "event": "eval",
            "rank": 0,
            "iteration": done,
            "split": "test",
            "metric": metrics.primary_metric(model),
            "value": value,
            "samples": 10000,
            "eval_s": 0.5,
            "train_s": step * (done - 1),
            "time": 1050.0 + done,
        }  # fmt: skip
        for done, value in EVALS[model]
    ]
    return write_atomic(root / start["run_id"] / "events.jsonl", [start, *steps, *evals, run_end()])


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hand-made study's results folder: the aggregation's tables, as on disk."""
    root = tmp_path_factory.mktemp("study")
    paths = [
        learning_run(root / "runs", framework, model, nodes, repeat)
        for framework in STEP_S
        for model in ("lenet", "autoencoder")
        if model == "lenet" or framework == "torch"
        for nodes in (1, 2)
        for repeat in (0, 1)
    ]
    tables = aggregate.aggregate(paths)
    out = root / "results"
    aggregate.write_outputs(tables, {name: out / file for name, file in aggregate.OUTPUT_FILES.items()})
    return out


@pytest.fixture(scope="module")
def tables(results: Path) -> StudyTables:
    return read_results(results)


def efficiencies_spec(tables: StudyTables) -> dict[str, Any]:
    return quality.efficiencies_chart(tables.cells).to_dict()


def test_the_efficiencies_figure_as_it_was_drew_lenet_in_the_wrong_panels(
    tables: StudyTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The chart as it was before the fix: no row for the AutoEncoder's missing
    # time-to-target panel, which Vega-Lite then lays out first.
    monkeypatch.setattr(quality, "every_panel", lambda data, row, column: data)
    problems = panels.check_chart(
        "efficiencies", efficiencies_spec(tables), shown.CLAIMS["efficiencies"](tables)
    )
    assert problems, "the mis-faceted efficiencies figure passed the check"
    assert problems[0].startswith("efficiencies: panel model=lenet, kind=throughput efficiency:")
    assert "8 row(s) of the table not drawn there" in problems[0]
    lenet_time = next(p for p in problems if "model=lenet, kind=time-to-target efficiency" in p)
    assert "row(s) drawn that the table does not put there" in lenet_time
    assert "kind=throughput efficiency" in lenet_time  # LeNet's throughput rows, under time to target
    by_panel = {tuple(p.labels.values()): p.rows for p in panels.rendered_panels(efficiencies_spec(tables))}
    assert by_panel[("lenet", "throughput efficiency")] == []  # the empty panel a reader saw


def test_each_efficiencies_panel_shows_the_cells_of_its_model_and_kind(tables: StudyTables) -> None:
    assert (
        panels.check_chart("efficiencies", efficiencies_spec(tables), shown.CLAIMS["efficiencies"](tables))
        == []
    )
    rendered = {tuple(p.labels.values()): p.rows for p in panels.rendered_panels(efficiencies_spec(tables))}
    assert set(rendered) == {
        ("lenet", "throughput efficiency"), ("lenet", "time-to-target efficiency"),
        ("autoencoder", "throughput efficiency"), ("autoencoder", "time-to-target efficiency"),
    }  # fmt: skip
    cells = tables.cells.set_index(["framework", "model", "nodes"])
    for model in ("lenet", "autoencoder"):
        drawn = {(r["framework"], r["nodes"]): r["value"] for r in rendered[(model, "throughput efficiency")]}
        mine = cells.xs(model, level="model")["efficiency"]
        assert drawn == pytest.approx({key: value for key, value in mine.items()})
    assert rendered[("autoencoder", "time-to-target efficiency")] == []  # never reached its target
    lenet_time = {r["framework"] for r in rendered[("lenet", "time-to-target efficiency")]}
    assert lenet_time == set(STEP_S)


def facet_chart(sort: list[str] | None = None, header: alt.Header | None = None) -> alt.FacetChart:
    """Points per model, a panel per model: the shape of the throughput figure."""
    data = pd.DataFrame(
        {"model": ["lenet", "lenet", "alexnet"], "nodes": [1, 2, 1], "value": [10.0, 18.0, 3.0]}
    )
    base = alt.Chart(data).mark_point().encode(x="nodes:Q", y="value:Q")
    return base.facet(facet=alt.Facet("model:N", title=None, sort=sort, header=header), columns=2)


def facet_claim() -> panels.Claim:
    rows = pd.DataFrame(
        {"model": ["lenet", "lenet", "alexnet"], "nodes": [1, 2, 1], "value": [10.0, 18.0, 3.0]}
    )
    return panels.Claim(rows, {"panel": "model"})


def test_a_chart_whose_headers_name_the_wrong_panels_fails_naming_figure_and_panel() -> None:
    assert panels.check_chart("toy", facet_chart().to_dict(), facet_claim()) == []
    swapped = alt.Header(labelExpr="datum.value == 'lenet' ? 'alexnet' : 'lenet'")
    problems = panels.check_chart("toy", facet_chart(header=swapped).to_dict(), facet_claim())
    assert len(problems) == 2
    assert problems[0].startswith("toy: panel model=alexnet:") or problems[1].startswith(
        "toy: panel model=alexnet:"
    )
    assert any(
        "toy: panel model=lenet:" in p and "model=alexnet, nodes=1.0, value=3.0" in p for p in problems
    )


def test_the_placement_check_needs_no_table(tables: StudyTables, monkeypatch: pytest.MonkeyPatch) -> None:
    """For figures without a claim (the scaling model's): each panel's marks carry its label."""
    assert panels.facet_fields(facet_chart().to_dict()) == {"panel": "model"}
    assert panels.check_placement("toy", facet_chart().to_dict()) == []
    swapped = alt.Header(labelExpr="datum.value == 'lenet' ? 'alexnet' : 'lenet'")
    problems = panels.check_placement("toy", facet_chart(header=swapped).to_dict())
    assert (
        "toy: panel model=alexnet: 2 mark(s) drawn from another panel's rows, e.g. (model=lenet)" in problems
    )
    assert panels.check_placement("efficiencies", efficiencies_spec(tables)) == []
    monkeypatch.setattr(quality, "every_panel", lambda data, row, column: data)
    problems = panels.check_placement("efficiencies", efficiencies_spec(tables))
    assert problems[0].startswith(
        "efficiencies: panel model=lenet, kind=time-to-target efficiency: 24 mark(s)"
    )


def test_a_layer_filter_that_drops_rows_and_a_missing_panel_are_named() -> None:
    data = pd.DataFrame(
        {"model": ["lenet", "lenet", "alexnet"], "nodes": [1, 2, 1], "value": [10.0, 18.0, 3.0]}
    )
    filtered = (
        alt.Chart(data)
        .transform_filter(alt.datum.nodes < 2)
        .mark_point()
        .encode(x="nodes:Q", y="value:Q")
        .facet(facet=alt.Facet("model:N", title=None), columns=2)
    )
    problems = panels.check_chart("toy", filtered.to_dict(), facet_claim())
    assert problems == [
        "toy: panel model=lenet: 1 row(s) of the table not drawn there, e.g. (model=lenet, nodes=2.0, value=18.0)"
    ]
    claim = facet_claim()
    more = panels.Claim(
        pd.concat([claim.rows, pd.DataFrame([{"model": "resnet", "nodes": 1, "value": 1.0}])]), claim.labels
    )
    problems = panels.check_chart("toy", facet_chart().to_dict(), more)
    assert problems == ["toy: no panel model=resnet, where the table has 1 row(s)"]


def test_every_figure_of_a_small_study_shows_its_tables(results: Path, tables: StudyTables) -> None:
    out = results / "figures"
    written = draw_figures(tables, figure_paths(out))
    assert sorted(p.name for p in written) == sorted(f"{n}.{f}" for n in FIGURES for f in FIGURE_FORMATS)
    assert shown.check_figures(tables, out) == []
    for name in FIGURES:  # each figure drew rows, in panels named by the table's labels
        drawn = panels.rendered_panels(panels.spec_of_html(out / f"{name}.html"))
        assert sum(len(p.rows) for p in drawn) > 0, name
        assert all(p.labels for p in drawn), name


def test_the_figures_command_draws_a_results_folder_and_checks_it(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(results), "--out", str(tmp_path / "figures")]) == 0
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(
        f"{n}.{f}" for n in FIGURES for f in FIGURE_FORMATS
    )
    assert main([str(tmp_path / "nothing")]) == 2
    assert "runs.parquet" in capsys.readouterr().err


def test_the_analysis_draws_nothing() -> None:
    """The figures sit above the analysis: no module of it imports dlscale.figures."""
    for path in sorted((REPO / "dlscale" / "analysis").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        ]
        names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not [n for n in names if n.startswith("dlscale.figures")], path.name
