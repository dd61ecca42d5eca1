"""Every string that comes from a run stays text in the pages the project writes (issue 33,
item 3): a study whose hosts, versions, settings, hashes and failure reason carry markup is
aggregated and drawn, and no element or event-handler attribute arises from them, parsed
with ``html.parser`` and, where Debian's chromium is installed (``make test`` installs it:
scripts/ensure-system.sh), in the DOM a headless browser built after running the pages'
scripts."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import pytest
from helpers.events import iteration, run_start
from helpers.markup import BREAKOUT, CHROMIUM, HOSTILE, IMG, NO_CHROMIUM, SVG, browser_dom, live_markup

from dlscale.analysis import aggregate
from dlscale.events import write_atomic
from dlscale.figures import charts
from dlscale.figures.quality import QUALITY_FIGURES, make_quality_figures


def _hostile_study(root: Path) -> list[Path]:
    paths = []
    for nodes in (1, 2):
        for repeat in (0, 1, 2):
            start = {**run_start(nodes=nodes, repeat=repeat, total=4), **HOSTILE}
            start["hosts"] = HOSTILE["hosts"][:nodes]
            failed = nodes == 2 and repeat == 2
            steps = [
                iteration(rank, i, 0.1 * (1 + 0.1 * nodes + 0.01 * repeat), 0.08, 0.01, 2.0 - 0.1 * i)
                for i in range(4)
                for rank in range(nodes)
            ]
            end = {
                "event": "run_end",
                "status": "failed" if failed else "ok",
                "reason": f"rank 1 died: {BREAKOUT} {SVG}" if failed else None,
                "time": 1100.0,
            }
            paths.append(write_atomic(root / start["run_id"] / "events.jsonl", [start, *steps, end]))
    return paths


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> tuple[aggregate.Tables, list[Path]]:
    root = tmp_path_factory.mktemp("hostile")
    tables = aggregate.aggregate(_hostile_study(root / "runs"))
    out = root / "figures"

    def paths_of(names: tuple[str, ...]) -> dict[str, dict[str, str]]:
        return {name: {fmt: str(out / f"{name}.{fmt}") for fmt in ("html", "svg")} for name in names}

    study, learned = paths_of(charts.STUDY_FIGURES), paths_of(QUALITY_FIGURES)
    charts.make_figures(tables.runs, tables.iterations, tables.cells, study)
    make_quality_figures(tables.runs, tables.cells, tables.evals, learned)
    # A chart that shows the run strings themselves (title, axis, tooltip): the figures above
    # show few of them today, every later figure goes through the same writer.
    shown = tables.runs[["run_id", "hosts", "versions", "settings", "reason", "throughput"]].copy()
    shown["reason"] = shown["reason"].fillna("")
    chart = (
        alt.Chart(shown, title=f"hosts {HOSTILE['hosts'][0]}")
        .mark_point()
        .encode(x="throughput:Q", y="hosts:N", tooltip=["run_id", "hosts", "versions", "settings", "reason"])
    )
    for fmt in ("html", "svg"):
        charts.save_chart(chart, out / f"strings.{fmt}")
    written = sorted(out.iterdir())
    return tables, written


def test_the_run_strings_reach_the_tables_as_given(drawn: tuple[aggregate.Tables, list[Path]]) -> None:
    tables, _ = drawn
    runs = tables.runs
    assert IMG in runs["hosts"].iat[0] and SVG in runs["versions"].iat[0]
    assert BREAKOUT in runs.loc[runs["status"].eq("failed"), "reason"].iat[0]


def test_no_page_or_figure_makes_an_element_from_a_run_string(
    drawn: tuple[aggregate.Tables, list[Path]],
) -> None:
    _, written = drawn
    assert {p.suffix for p in written} == {".html", ".svg"} and len(written) >= 10
    strings = next(p for p in written if p.name == "strings.html").read_text(encoding="utf-8")
    assert "onerror=alert(1)" in strings  # the hostile text is there, as data
    for path in written:
        assert live_markup(path.read_text(encoding="utf-8")) == [], path.name


def test_the_html_writer_keeps_a_script_end_inside_its_data(tmp_path: Path) -> None:
    chart = alt.Chart(pd.DataFrame({"x": [1], "h": [BREAKOUT]})).mark_point().encode(x="x", tooltip="h")
    charts.save_chart(chart, tmp_path / "c.html")
    text = (tmp_path / "c.html").read_text(encoding="utf-8")
    assert BREAKOUT not in text and "\\u003c/script\\u003e\\u003cimg src=x onerror=alert(1)\\u003e" in text
    # Unescaped, altair's own writer would have made the element (what this guards against).
    chart.save(tmp_path / "raw.html", inline=True)
    assert live_markup((tmp_path / "raw.html").read_text(encoding="utf-8"))


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_a_browser_builds_no_element_from_a_run_string(
    drawn: tuple[aggregate.Tables, list[Path]], tmp_path: Path
) -> None:
    _, written = drawn
    pages = [p for p in written if p.name in ("strings.html", "throughput.html", "strings.svg")]
    for page in pages:
        dom = browser_dom(page, tmp_path / "profile")
        assert dom.strip(), f"{page.name}: empty DOM"
        assert live_markup(dom) == [], page.name
        if page.suffix == ".html":
            # Vega ran and drew the chart (its SVG in the DOM), with the strings as text.
            assert "<svg" in dom and 'role="graphics-document"' in dom, page.name
