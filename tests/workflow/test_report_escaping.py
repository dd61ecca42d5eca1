"""The study's report and figures show a hostile sender's run strings as text (issue 33,
item 3), end to end: a copy of the session's four-framework study whose events carry markup
in every run's hosts and versions is aggregated and drawn again by the workflow, its Snakemake report is built, and neither the report's HTML, nor any page
or image embedded in it, nor the DOM headless Chromium builds from it holds an element made
from those strings, while the strings themselves reached the report as data.

(The report embeds every file as a base64 data URI: tables are shown as text, SVG figures as
images, which run no script. The unit test tests/unit/test_escaping.py covers the HTML
figures' writer with strings drawn on the chart itself.)"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers.markup import BREAKOUT, CHROMIUM, IMG, NO_CHROMIUM, SVG, browser_dom, live_markup
from helpers.workflow import snakemake

#: A data URI of the report: its mime type, file name and base64 payload.
DATA_URI = re.compile(r'"data:([\w/+.-]+);charset=utf8;filename=([^;"]+);base64,([A-Za-z0-9+/=]+)"')


def _hostile_copy(study: Path, copy: Path) -> None:
    """Copy the study (its MNIST linked, not copied) and rewrite what a sender controls."""
    results = study / "results"
    shutil.copytree(
        study, copy, symlinks=True, ignore=lambda d, names: ["data"] if Path(d) == results else []
    )
    os.symlink(results / "data", copy / "results" / "data")
    for events in sorted((copy / "results" / "runs").rglob("events.jsonl")):
        lines = events.read_text(encoding="utf-8").splitlines()
        start = json.loads(lines[0])
        start["hosts"] = [f"{BREAKOUT}/node{i}" for i in range(len(start["hosts"]))]
        start["versions"] = {**start["versions"], "python": SVG}
        lines[0] = json.dumps(start)
        events.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def hostile_report(four_framework_study: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("hostile-report") / "study"
    _hostile_copy(four_framework_study, copy)
    redone = snakemake(copy, timeout=600)
    assert redone.returncode == 0, redone.stdout[-2000:] + redone.stderr[-3000:]
    assert "aggregate" in redone.stdout + redone.stderr  # the tables were made again from the events
    report = copy / "results" / "report.html"
    made = snakemake(copy, "--report", str(report))
    assert made.returncode == 0, made.stderr[-3000:]
    return report


def test_the_run_strings_reach_the_report_as_data(hostile_report: Path) -> None:
    embedded = {name: (mime, payload) for mime, name, payload in DATA_URI.findall(hostile_report.read_text())}
    mime, payload = embedded["runs.csv"]
    runs_csv = base64.b64decode(payload).decode("utf-8")
    assert mime == "text/csv" and BREAKOUT in runs_csv and SVG in runs_csv
    assert {m for m, _ in embedded.values()} <= {"text/csv", "image/svg+xml", "text/html"}


def test_no_element_arises_in_the_report_or_what_it_embeds(hostile_report: Path) -> None:
    text = hostile_report.read_text(encoding="utf-8")
    assert IMG not in text and SVG not in text  # raw only inside the base64 tables
    assert live_markup(text) == []
    pages = [
        (name, base64.b64decode(payload).decode("utf-8"))
        for mime, name, payload in DATA_URI.findall(text)
        if mime in ("image/svg+xml", "text/html")
    ]
    assert len(pages) >= 8
    for name, page in pages:
        assert live_markup(page) == [], name
    for figure in sorted((hostile_report.parent / "figures").glob("*.*")):
        if figure.suffix in (".html", ".svg"):
            assert live_markup(figure.read_text(encoding="utf-8")) == [], figure.name


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_a_browser_builds_no_element_from_the_report(hostile_report: Path, tmp_path: Path) -> None:
    dom = browser_dom(hostile_report, tmp_path / "profile")
    assert "<svg" in dom  # the report's page was built by its scripts
    assert live_markup(dom) == []
