"""What a study shows a reader, checked against its tables: the figures' embedded data and
the report's embedded files. Part of verify's integrity check (``dlscale.archive.verify``).

The checksums only say that the files are those the manifest lists, and whoever edits the
tables can redo the manifest; the recomputation says that the tables follow from the
events. Neither looks at what a person reads: a figure whose embedded data say 8,814
samples/s where runs.csv says 17,628, or a report whose embedded tables are other tables,
passed verify. So:

* every study figure of ``dlscale.figures.shown.CLAIMS`` whose HTML is in the study is read
  back (its Vega-Lite spec rendered, each panel's drawn rows, ``shown.check_figures``) and
  must show exactly its table's rows (runs.parquet, cells.csv, evals.csv, checked against
  their recomputation first). The SVG and PNG are rendered from that spec when the study is
  made and are covered by the checksums (and the SVG by the report check below);
* the report (Snakemake's ``report.html``) embeds each table and figure it shows as a data
  URI under the file's study path (``results/runs.csv``): each must be byte for byte the
  study's own file of that path. A report that embeds nothing (none made) is noted, not
  failed.

Names read from the study are hostile input: the report's paths are held to
``dlscale.archive.safety``'s rules (never followed out of the study).
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
from dlscale.figures import shown
from dlscale.figures.study import read_results

#: Where Snakemake's report embeds its results: ``var results = {path: {..., data_uri}}``.
_REPORT_RESULTS = re.compile(r'<script id="results">\s*var results = ')
#: The report a study holds, under its results folder.
REPORT = "report.html"
#: The study path of the results folder, as the report names its files.
RESULTS = "results/"
#: Where the figures are, under the results folder.
FIGURES_DIR = "figures"


def check_figures(results: Path, report: Report, prefix: str = "results/") -> None:
    """Each study figure's HTML against the tables (see the module doc); a figure the
    study does not hold is not checked (it is named by the checksums if listed)."""
    present = [name for name in shown.CLAIMS if (results / FIGURES_DIR / f"{name}.html").is_file()]
    if not present:
        return
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
            problems = shown.check_figures(tables, results / FIGURES_DIR, [name])
        except Exception as err:  # noqa: BLE001 - a figure that cannot be read back is the finding
            report.add(where, f"its embedded data cannot be read back: {type(err).__name__}: {err}")
            continue
        report.add_many(where, [f"the figure disagrees with its tables: {problem}" for problem in problems])
    report.checked.append(f"{len(present)} figure(s) against their tables")


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
