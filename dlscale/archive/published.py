"""What a study shows a reader, checked against its tables: the figures' embedded data and
the report's embedded files. Part of verify's integrity check (``dlscale.archive.verify``).

The checksums only say that the files are those the manifest lists, and whoever edits the
tables can redo the manifest; the recomputation says that the tables follow from the
events. Neither looks at what a person reads: a figure whose embedded data say 8,814
samples/s where runs.csv says 17,628, or a report whose embedded tables are other tables,
passed verify. So:

* every study figure (``dlscale.outputs.FIGURES``, each with its claim in
  ``dlscale.figures.shown.CLAIMS``) whose HTML is in the study is read
  back (its Vega-Lite spec rendered, each panel's drawn rows, ``shown.check_figures``) and
  must show exactly its table's rows (runs.parquet, cells.csv, evals.csv, checked against
  their recomputation first). The SVG and PNG are rendered from that spec when the study is
  made and are covered by the checksums (and the SVG by the report check below);
* the report (Snakemake's ``report.html``) embeds each table and figure it shows as a data
  URI under the file's study path (``results/runs.csv``): each must be byte for byte the
  study's own file of that path. A report that embeds nothing (none made) is noted, not
  failed.

Names read from the study are hostile input: the report's paths are held to
``dlscale.archive.safety``'s rules (never followed out of the study). So is a figure's
spec, which Vega executes: before it is rendered, its data must come from its own
``datasets`` only (no URL, which Vega would fetch, no generator such as a ``sequence`` of
millions of rows, which ran V8 out of memory and killed verify with a C stack trace), at
most ``MAX_FIGURE_ROWS`` rows, and no transform parameter that multiplies rows
(``steps``, ``maxbins``) over ``MAX_FIGURE_STEPS`` (docs/verify.md).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from pathlib import Path
from typing import Any

from dlscale.archive.recompute import Report
from dlscale.archive.safety import Refused, confined
from dlscale.outputs import FIGURES

#: Where Snakemake's report embeds its results: ``var results = {path: {..., data_uri}}``.
_REPORT_RESULTS = re.compile(r'<script id="results">\s*var results = ')
#: The report a study holds, under its results folder.
REPORT = "report.html"
#: The study path of the results folder, as the report names its files.
RESULTS = "results/"
#: Where the figures are, under the results folder.
FIGURES_DIR = "figures"
#: Most data rows a figure from elsewhere may embed: the demo's largest has 898 (loss.html,
#: 2026-12-04); 100,000 render in 2.6 s and 0.5 GB here, 3,000,000 ran V8 out of memory.
MAX_FIGURE_ROWS = 100_000
#: Most steps or bins one transform may ask for (none of the study's figures uses either).
MAX_FIGURE_STEPS = 10_000
#: What a data definition in a figure may hold: a reference to one of its own datasets.
_DATA_KEYS = frozenset({"name"})


def check_figures(results: Path, report: Report, prefix: str = "results/") -> None:
    """Each study figure's HTML against the tables (see the module doc); a figure the
    study does not hold is not checked (it is named by the checksums if listed)."""
    present = [name for name in FIGURES if (results / FIGURES_DIR / f"{name}.html").is_file()]
    if not present:
        return
    # Imported here, as recompute imports the analysis: Altair, Vega and pandas take 4 s to
    # import (0.6 s for the rest of verify), and a study refused or without figures needs none.
    from dlscale.figures import shown
    from dlscale.figures.panels import spec_of_html
    from dlscale.figures.study import read_results

    try:
        tables = read_results(results)
    except Exception as err:  # noqa: BLE001 - tables the figures cannot read are the finding
        report.add(
            f"{prefix}{FIGURES_DIR}", f"the figures' tables cannot be read: {type(err).__name__}: {err}"
        )
        return
    for name in present:
        where = f"{prefix}{FIGURES_DIR}/{name}.html"
        try:
            unsafe = unsafe_spec(spec_of_html(results / FIGURES_DIR / f"{name}.html"))
            if unsafe:
                report.add(where, f"not read back: {unsafe}")
                continue
            problems = shown.check_figures(tables, results / FIGURES_DIR, [name])
        except Exception as err:  # noqa: BLE001 - a figure that cannot be read back is the finding
            report.add(where, f"its embedded data cannot be read back: {type(err).__name__}: {err}")
            continue
        report.add_many(where, [f"the figure disagrees with its tables: {problem}" for problem in problems])
    report.checked.append(f"{len(present)} figure(s) against their tables")


def unsafe_spec(spec: Any) -> str | None:
    """Why Vega must not run ``spec`` (a figure from elsewhere), None when it may: data
    from anything but its own datasets, too many rows, a transform asking for too many
    steps or bins (see the module doc)."""
    if not isinstance(spec, dict):
        return f"its spec is a JSON {type(spec).__name__}, not an object"
    datasets = spec.get("datasets") or {}
    if not isinstance(datasets, dict) or not all(isinstance(rows, list) for rows in datasets.values()):
        return "its datasets are not lists of rows"
    rows = sum(len(rows) for rows in datasets.values())
    if rows > MAX_FIGURE_ROWS:
        return f"{rows:,} data rows, over the {MAX_FIGURE_ROWS:,} a figure may embed"
    stack: list[tuple[str, Any]] = [(key, value) for key, value in spec.items() if key != "datasets"]
    while stack:
        key, node = stack.pop()
        if key == "data" and isinstance(node, dict):
            extra = sorted(set(node) - _DATA_KEYS)
            if extra or node.get("name") not in datasets:
                return f"its data {extra or node.get('name')!r} is not one of its own datasets (a URL or generator?)"
        if key == "sequence" or (key == "keyvals" and isinstance(node, dict)):
            return f"a {key!r} generator (rows made by Vega, not embedded)"
        if key in ("steps", "maxbins") and isinstance(node, (int, float)) and node > MAX_FIGURE_STEPS:
            return f"{key} {node:g}, over {MAX_FIGURE_STEPS:,}"
        if isinstance(node, dict):
            stack.extend(node.items())
        elif isinstance(node, list):
            stack.extend((key, value) for value in node)
    return None


def embedded_results(text: str, where: str) -> dict[str, Any] | None:
    """The report's ``var results`` object (path -> entry), None when it has none."""
    found = _REPORT_RESULTS.search(text)
    if found is None:
        return None
    try:
        results, _ = json.JSONDecoder().raw_decode(text, found.end())
    except (ValueError, RecursionError) as err:
        raise Refused(where, f"its embedded results are not JSON ({type(err).__name__})") from None
    if not isinstance(results, dict):
        raise Refused(where, f"its embedded results are a JSON {type(results).__name__}, not an object")
    return results


def _decoded(uri: Any) -> bytes | None:
    """The bytes of a ``data:...;base64,...`` URI, None when it is no such URI."""
    if not isinstance(uri, str) or not uri.startswith("data:"):
        return None
    head, _, body = uri.partition(",")
    if not head.endswith(";base64"):
        return None
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return None


def check_report(root: Path, results: Path, report: Report, prefix: str = "results/") -> None:
    """Each file the report embeds against the study's own file of that path."""
    path = results / REPORT
    if not path.is_file():
        return
    where = f"{prefix}{REPORT}"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        report.add(where, f"not UTF-8 ({err.reason} at byte {err.start})")
        return
    embedded = embedded_results(text, f"file {where!r}")
    if embedded is None:
        report.notes.append(f"{where} embeds no tables or figures (not a Snakemake report): not compared")
        return
    problems = []
    for name, entry in embedded.items():
        data = _decoded(entry.get("data_uri") if isinstance(entry, dict) else None)
        if data is None:
            problems.append(f"its entry {name!r} embeds no base64 data")
            continue
        # The report names files by their study path (results/...), wherever the results
        # folder is now (a copy given directly may have another name).
        base, rel = (results, name.removeprefix(RESULTS)) if name.startswith(RESULTS) else (root, name)
        own = confined(base, rel, f"file {where!r}", f"the embedded path {name!r}")
        if not own.is_file():
            problems.append(f"it embeds {name!r}, which the study does not hold")
        elif own.read_bytes() != data:
            problems.append(
                f"its embedded {name!r} differs from the study's {name!r} (the report shows other data)"
            )
    report.add_many(where, problems)
    report.checked.append(f"the report's {len(embedded)} embedded files")
