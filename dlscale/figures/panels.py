"""What a figure shows, read back from its rendering: every facet panel's labels and the
table rows its marks draw, compared with the rows of the table the figure claims to show.

A chart's embedded data can be right while the picture is wrong: a facet sort, a filter or
a layer can put one panel's rows under another panel's header (Vega-Lite orders the empty
panels of a row x column facet before the others). So the check renders the chart's own
Vega-Lite spec with Vega (vl-convert's scene graph, the renderer of the SVG and PNG and the
same Vega-Lite the HTML embeds), after giving every data row an id that each mark carries
as its description, and reads for every panel the header texts a reader sees beside it
(row and column headers, the panel's own title in a wrapped facet, the title of the
sub-chart it sits in) and the rows its marks were drawn from. The figure passes when, for
every panel, those rows are exactly the table's rows for the panel's labels.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import vl_convert

#: A mark's description when it was drawn from a data row: ``ROW_ID_PREFIX<dataset>#<index>``.
ROW_ID_PREFIX = "row:"
_ROW_FIELD = "_shown_row"
#: Where a panel's label sits: a row header, a column header, the panel's own title (a
#: wrapped facet) or the title of the sub-chart it is in (a vertical concatenation).
LABEL_PLACES: tuple[str, ...] = ("row", "column", "panel", "chart")
_HEADER_PLACES = {"row-header": "row", "column-header": "column"}
#: Digits a number is compared to (Vega's own default format shows 12).
_DIGITS = 12


@dataclass(frozen=True)
class Claim:
    """The table a figure claims to show, in the chart's column names.

    ``rows``: every row the figure should draw (rows it cannot draw, e.g. a missing value,
    left out); ``labels``: where each panel label sits -> the column it names (``{"row":
    "model", "column": "kind"}``); every column of ``rows`` is compared.
    """

    rows: pd.DataFrame
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Panel:
    """One facet panel as rendered: its labels by place and the data rows its marks drew."""

    labels: dict[str, str]
    rows: list[dict[str, Any]]


def spec_of_html(path: str | Path) -> dict[str, Any]:
    """The Vega-Lite spec a figure's self-contained HTML embeds (``const spec = {...};``)."""
    text = Path(path).read_text(encoding="utf-8")
    start = text.find("const spec = ")
    if start < 0:
        raise ValueError(f"{path}: no embedded Vega-Lite spec")
    spec, _ = json.JSONDecoder().raw_decode(text, start + len("const spec = "))
    return spec


def _with_row_ids(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``spec`` whose every inline row carries an id and whose every mark that
    encodes a data field describes itself by that id (layout and data otherwise as drawn)."""
    marked = copy.deepcopy(spec)
    for name, rows in marked.get("datasets", {}).items():
        for index, row in enumerate(rows):
            row[_ROW_FIELD] = f"{ROW_ID_PREFIX}{name}#{index}"

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if "values" in node.get("data", {}):
                raise ValueError("inline data outside 'datasets' cannot be traced")
            encoding = node.get("encoding")
            if "mark" in node and isinstance(encoding, dict) and _encodes_a_field(encoding):
                encoding["description"] = {"field": _ROW_FIELD, "type": "nominal"}
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit({key: value for key, value in marked.items() if key != "datasets"})
    return marked


def _encodes_a_field(encoding: Mapping[str, Any]) -> bool:
    def has_field(channel: Any) -> bool:
        if isinstance(channel, list):
            return any(has_field(c) for c in channel)
        return isinstance(channel, dict) and "field" in channel

    return any(has_field(channel) for name, channel in encoding.items() if name != "tooltip")


def rendered_panels(spec: dict[str, Any]) -> list[Panel]:
    """Every facet panel of ``spec`` as Vega renders it (one unlabelled panel for a chart
    without facets), with the rows its marks were drawn from."""
    marked = _with_row_ids(spec)
    datasets = marked.get("datasets", {})
    # No data from anywhere but the spec: a figure from elsewhere (verify reads them back)
    # could name a URL, which Vega would fetch (vl-convert allows every URL by default).
    scene = vl_convert.vegalite_to_scenegraph(marked, allowed_base_urls=[])["scenegraph"]
    panels = [panel for frame in _items(scene) for panel in _panels(frame, {}, datasets=datasets)]
    if not panels:
        panels = [Panel({}, _drawn_rows(scene, datasets))]
    return panels


def _items(group_mark: Mapping[str, Any]) -> list[dict[str, Any]]:
    return group_mark.get("items", []) or []


def _title_text(item: Mapping[str, Any]) -> str | None:
    """The text of the title group directly inside a group item, if it has one."""
    for child in _items(item):
        if child.get("marktype") == "group" and child.get("role") == "title":
            for title in _items(child):
                for text in _items(title):
                    if text.get("role") == "title-text":
                        words = [t.get("text") for t in _items(text)]
                        return " ".join(_flat(words))
    return None


def _flat(words: Iterable[Any]) -> Iterator[str]:
    for word in words:
        if isinstance(word, list):
            yield from _flat(word)
        elif word is not None:
            yield str(word)


def _panels(
    item: Mapping[str, Any], labels: dict[str, str], *, datasets: Mapping[str, list[dict[str, Any]]]
) -> Iterator[Panel]:
    """Walk a group item: its sub-charts (concatenation) and its facet cells."""
    children = [c for c in _items(item) if c.get("marktype") == "group"]
    # A row header sits level with its row's cells, a column header above its column's.
    headers: dict[str, list[tuple[float, str]]] = {"row": [], "column": []}
    for child in children:
        place = _HEADER_PLACES.get(str(child.get("role")))
        if place is None:
            continue
        for header in _items(child):
            text = _title_text(header)
            if text is not None:
                headers[place].append((float(header.get("y" if place == "row" else "x") or 0.0), text))
    for child in children:
        name = str(child.get("name") or "")
        if child.get("role") == "scope" and name.endswith("cell"):
            for cell in _items(child):
                found = dict(labels)
                for place, axis in (("row", "y"), ("column", "x")):
                    at = float(cell.get(axis) or 0.0)
                    match = [text for start, text in headers[place] if abs(start - at) < 0.5]
                    if match:
                        found[place] = match[0]
                own = _title_text(cell)
                if own is not None:
                    found["panel"] = own
                yield Panel(found, _drawn_rows(cell, datasets))
        elif child.get("role") == "scope" and name.endswith("_group"):
            for sub in _items(child):
                title = _title_text(sub)
                inner = dict(labels) | ({"chart": title} if title is not None else {})
                yield from _panels(sub, inner, datasets=datasets)


def _drawn_rows(
    node: Mapping[str, Any], datasets: Mapping[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The data rows behind every mark under ``node`` (a mark, or a group item holding
    marks), by the ids they describe themselves with: one entry per mark item."""
    rows: list[dict[str, Any]] = []

    def visit(mark: Mapping[str, Any]) -> None:
        for item in _items(mark):
            description = item.get("description")
            shown = item.get("defined", True) is not False  # a line's break at a missing value
            if mark.get("role") == "mark" and shown and str(description).startswith(ROW_ID_PREFIX):
                name, _, index = str(description).removeprefix(ROW_ID_PREFIX).rpartition("#")
                rows.append(datasets[name][int(index)])
            if mark.get("marktype") == "group":
                for child in _items(item):
                    visit(child)

    for mark in [node] if "marktype" in node else _items(node):
        visit(mark)
    return rows


def _normal(value: Any) -> Any:
    """A value as compared: numbers to 12 significant digits, a missing value None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) or hasattr(value, "dtype"):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return str(value)
        if math.isnan(number):
            return None
        return float(f"{number:.{_DIGITS}g}")
    if pd.isna(value):
        return None
    return str(value)


def _key(row: Mapping[str, Any], columns: list[str]) -> tuple[Any, ...]:
    return tuple(_normal(row.get(column)) for column in columns)


def _show(columns: list[str], key: tuple[Any, ...]) -> str:
    return "(" + ", ".join(f"{c}={v}" for c, v in zip(columns, key, strict=True)) + ")"


def check_chart(name: str, spec: dict[str, Any], claim: Claim, *, most: int = 3) -> list[str]:
    """Problems of figure ``name``: each names the figure and the panel (by its labels),
    with up to ``most`` rows drawn there that the table does not put there, and rows the
    table puts there that it does not draw. Empty when every panel shows its rows."""
    columns = [str(c) for c in claim.rows.columns]
    places = {place: column for place, column in claim.labels.items()}
    unknown = sorted(set(places) - set(LABEL_PLACES))
    if unknown:
        raise ValueError(f"{name}: unknown label place(s) {unknown}; expected {LABEL_PLACES}")
    expected: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    for row in claim.rows.to_dict("records"):
        labels = tuple(_normal(row[places[p]]) for p in places)
        expected.setdefault(labels, set()).add(_key(row, columns))
    problems = []
    seen: set[tuple[Any, ...]] = set()
    for panel in rendered_panels(spec):
        labels = tuple(_normal(panel.labels.get(p)) for p in places)
        where = ", ".join(f"{places[p]}={panel.labels.get(p)}" for p in places) or "the whole chart"
        seen.add(labels)
        drawn = {_key(row, columns) for row in panel.rows if all(c in row for c in columns)}
        want = expected.get(labels, set())
        extra, missing = sorted(drawn - want, key=repr), sorted(want - drawn, key=repr)
        if extra or missing:
            text = f"{name}: panel {where}:"
            if extra:
                text += f" {len(extra)} row(s) drawn that the table does not put there, e.g. " + "; ".join(
                    _show(columns, k) for k in extra[:most]
                )
            if missing:
                text += (
                    f"{';' if extra else ''} {len(missing)} row(s) of the table not drawn there, e.g. "
                    + "; ".join(_show(columns, k) for k in missing[:most])
                )
            problems.append(text)
    for labels in sorted(set(expected) - seen, key=repr):
        where = ", ".join(f"{places[p]}={v}" for p, v in zip(places, labels, strict=True))
        problems.append(f"{name}: no panel {where}, where the table has {len(expected[labels])} row(s)")
    return problems


def facet_fields(spec: Mapping[str, Any]) -> dict[str, str]:
    """Where a panel's label sits -> the data field the chart facets by there, from every
    facet in ``spec`` (a place two facets fill with different fields is left out)."""
    found: dict[str, set[str]] = {}

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            facet = node.get("facet")
            if isinstance(facet, dict) and "spec" in node:
                if "field" in facet:
                    found.setdefault("panel", set()).add(str(facet["field"]))
                for place in ("row", "column"):
                    if isinstance(facet.get(place), dict) and "field" in facet[place]:
                        found.setdefault(place, set()).add(str(facet[place]["field"]))
            for key, value in node.items():
                if key != "datasets":
                    visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(spec)
    return {place: next(iter(fields)) for place, fields in found.items() if len(fields) == 1}


def _same_label(value: Any, label: str) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return _normal(value) == _normal(float(label))
        except ValueError:
            return False
    return str(value) == label


def check_placement(name: str, spec: dict[str, Any], *, most: int = 3) -> list[str]:
    """Problems of figure ``name`` whatever table it shows: a panel whose marks draw rows
    whose facet field is not the panel's label (the rows are in another's panel). Weaker
    than ``check_chart``, which also finds a table's rows missing from their panel; for
    figures without a claim (the scaling model's, the Caffe per-layer time)."""
    fields = facet_fields(spec)
    problems = []
    for panel in rendered_panels(spec):
        wrong = [
            row
            for row in panel.rows
            for place, column in fields.items()
            if place in panel.labels and column in row and not _same_label(row[column], panel.labels[place])
        ]
        if wrong:
            where = ", ".join(f"{fields[p]}={panel.labels[p]}" for p in fields if p in panel.labels)
            distinct = dict.fromkeys(
                "(" + ", ".join(f"{c}={row.get(c)}" for c in fields.values()) + ")" for row in wrong
            )
            shown = "; ".join(list(distinct)[:most])
            problems.append(
                f"{name}: panel {where}: {len(wrong)} mark(s) drawn from another panel's rows, e.g. {shown}"
            )
    return problems
