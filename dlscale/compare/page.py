"""What a person reads first of a comparison of studies (``dlscale.compare.comparison``): one HTML page
and a figure of the NEW/BASE ratios with their intervals per cell.

Every string that comes from a study (labels, paths, framework and host names, settings,
verdicts) is escaped (``html.escape``) before it enters the page; the figure's text is
escaped by altair/Vega's own SVG writer. The page is self-contained (the figure inline as
SVG), so it opens on a login node without internet.

Across machines raw throughput compares the machines, not the frameworks: when a fact of
the hardware differs, the page says so first and leads with the normalised quantities
(efficiency, exposed-communication share) and the frameworks' ranking per comparison group.
"""

from __future__ import annotations

import html
import io
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.figures.charts import HTML_JSON
from dlscale.outputs import FIGURE_FORMATS

__all__ = ["FIGURE_FORMATS", "chart_svg", "page", "ranking", "ratio_chart", "save", "table_html"]
#: Colours of a change, the same in the figure and the page.
CHANGE_COLOURS: Mapping[str, str] = {"improved": "#1a9850", "regressed": "#d73027", "no change": "#7f7f7f"}
#: Ratio axis limits: an interval beyond them (a range ratio over a zero) is clipped.
RATIO_CLIP = (1.0 / 16.0, 16.0)
#: Most rows of the comparison table shown per metric on the page (the CSV has them all).
MAX_PAGE_ROWS = 400


def ratio_chart(
    comparison: pd.DataFrame, studies: Sequence[str], hardware: Sequence[str]
) -> alt.TopLevelMixin:
    """Each matched cell's NEW/BASE ratio with its interval, one panel per metric (the
    normalised ones first when the hardware differs), the NEW studies side by side."""
    if comparison.empty:
        return alt.Chart(pd.DataFrame({"text": ["no matched cell"]})).mark_text().encode(text="text:N")
    data = comparison.copy()
    low, high = RATIO_CLIP
    for column in ("ratio", "ratio_lower", "ratio_upper"):
        values = pd.to_numeric(data[column], errors="coerce").replace([np.inf, -np.inf], np.nan)
        data[column] = values.clip(low, high)
    data["ratio_lower"] = data["ratio_lower"].fillna(data["ratio"])
    data["ratio_upper"] = data["ratio_upper"].fillna(data["ratio"])
    data = data[
        ["study", "cell", "metric", "ratio", "ratio_lower", "ratio_upper", "change", "interval", "p_value"]
    ]
    data = data.astype({"study": str, "cell": str, "metric": str, "change": str, "interval": str})
    metrics = list(dict.fromkeys(data["metric"]))
    if hardware:
        metrics.sort(key=lambda m: m in ("throughput", "time_to_target_s"))
    colour = alt.Color(
        "change:N",
        scale=alt.Scale(domain=list(CHANGE_COLOURS), range=list(CHANGE_COLOURS.values())),
        title="change",
    )
    # A log axis symmetric about 1 (a halving and a doubling look alike), at least 1/2..2.
    spread = max(2.0, float(data["ratio_upper"].max()), float(1.0 / data["ratio_lower"].min()))
    spread = min(high, spread) if math.isfinite(spread) else high
    scale = alt.Scale(type="log", domain=[1.0 / spread, spread], clamp=True, nice=False)
    rows = []
    for metric in metrics:
        mine = data[data["metric"].eq(metric)]
        base = alt.Chart().encode(y=alt.Y("cell:N", sort=None, title=None))
        bars = base.mark_rule().encode(
            x=alt.X("ratio_lower:Q", scale=scale, title="NEW / BASE"), x2="ratio_upper:Q", color=colour
        )
        points = base.mark_point(filled=True).encode(
            x=alt.X("ratio:Q", scale=scale, title="NEW / BASE"),
            color=colour,
            tooltip=[
                "study:N",
                "cell:N",
                "ratio:Q",
                "ratio_lower:Q",
                "ratio_upper:Q",
                "interval:N",
                "p_value:Q",
            ],
        )
        one = alt.Chart().mark_rule(strokeDash=[4, 3], color="black").encode(x=alt.datum(1.0))
        layered = alt.layer(bars, points, one, data=mine).properties(width=260)
        if len(studies) > 1:
            layered = layered.facet(column=alt.Column("study:N", sort=list(studies), title=None))
        rows.append(layered.properties(title=metric))
    return (
        alt.vconcat(*rows)
        .properties(title="NEW / BASE per cell: median ratio and its interval (dashed: no change)")
        .configure(background="white")
        .configure_title(fontSize=14, anchor="start")
    )


def chart_svg(chart: alt.TopLevelMixin) -> str:
    """The chart as SVG text (vl-convert, no browser)."""
    buffer = io.StringIO()
    chart.save(buffer, format="svg")
    return buffer.getvalue()


def save(chart: alt.TopLevelMixin, target: str | os.PathLike[str], fmt: str) -> None:
    """Write the chart to ``target`` as ``fmt`` (html: Vega inline, self-contained)."""
    if fmt == "html":
        chart.save(str(target), format="html", inline=True, json_kwds=HTML_JSON)  # no </script> from a study
    elif fmt == "png":
        chart.save(str(target), format="png", scale_factor=2.0)
    else:
        chart.save(str(target), format=fmt)


# --- the page ----------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def table_html(frame: pd.DataFrame, columns: Sequence[str] | None = None, limit: int = MAX_PAGE_ROWS) -> str:
    """An HTML table of ``frame`` (every value escaped; ``change`` coloured)."""
    if frame.empty:
        return "<p><em>none</em></p>"
    columns = list(columns or frame.columns)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for row in frame.head(limit).to_dict("records"):
        cells = []
        for column in columns:
            value = row.get(column)
            style = ""
            if column == "change" and str(value) in CHANGE_COLOURS:
                style = f' style="color:{CHANGE_COLOURS[str(value)]};font-weight:bold"'
            cells.append(f"<td{style}>{_cell(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (
        f"<p>... and {len(frame) - limit} more rows (the CSV has them all)</p>" if len(frame) > limit else ""
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"


def ranking(comparison: pd.DataFrame) -> pd.DataFrame:
    """The frameworks' order by median throughput per comparison group and node count, in BASE and in
    each NEW study, from the matched cells: the ranking survives a change of machine that
    scales every framework alike, where raw throughput does not."""
    mine = comparison[comparison["metric"].eq("throughput")]
    if mine.empty:
        return pd.DataFrame(columns=["study", "group", "base_ranking", "new_ranking", "same"])
    group_keys = [
        c for c in ("model", "dataset", "scaling", "network", "ranks_per_node", "batch", "threads_per_rank")
    ]
    rows = []
    order = {name: i for i, name in enumerate(catalog.FRAMEWORK_NAMES)}
    for key, group in mine.groupby(["study", *group_keys, "nodes"], sort=False):
        if group["framework"].nunique() < 2:
            continue

        def ranked(column: str, group: pd.DataFrame = group) -> str:
            g = group.assign(_o=group["framework"].map(lambda f: order.get(f, 99)))
            return " > ".join(g.sort_values([column, "_o"], ascending=[False, True])["framework"].astype(str))

        base, new = ranked("base_median"), ranked("new_median")
        fields = dict(zip(["study", *group_keys, "nodes"], key, strict=True))
        label = (
            f"{fields['model']}/{fields['network']} n{fields['nodes']}x{fields['ranks_per_node']}"
            f" b{fields['batch']}"
        )
        rows.append(
            {"study": key[0], "group": label, "base_ranking": base, "new_ranking": new, "same": base == new}
        )
    return pd.DataFrame(rows, columns=["study", "group", "base_ranking", "new_ranking", "same"])


_STYLE = """
body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}
th{background:#f0f0f0}.warn{background:#fff3cd;border:1px solid #e0c36a;padding:.5em 1em}
"""


def page(
    studies: Sequence[Mapping[str, str]],
    comparison: pd.DataFrame,
    verdict_changes: pd.DataFrame,
    differences: pd.DataFrame,
    unmatched: pd.DataFrame,
    hardware: Sequence[str],
    counts: Mapping[str, Mapping[str, int]],
    metrics: Mapping[str, tuple[str, bool, bool]],
    keys: Sequence[str],
    svg: str,
) -> str:
    """The comparison's page. ``studies``: label, source and how it was checked, BASE
    first; ``metrics``: name -> (label, higher is better, normalised)."""
    esc = html.escape
    base = esc(studies[0]["label"]) if studies else ""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>dlscale comparison: {' vs '.join(esc(s['label']) for s in studies)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Studies compared against {base}</h1>",
    ]
    if hardware:
        parts.append(
            "<p class='warn'><strong>The hardware differs</strong> ("
            + esc(", ".join(hardware))
            + "): raw throughput compares the machines, not the frameworks. Read the normalised"
            " quantities first (efficiency, exposed-communication share) and the frameworks' ranking.</p>"
        )
    parts.append("<h2>The studies</h2>")
    parts.append(table_html(pd.DataFrame(list(studies))))
    summary = pd.DataFrame(
        [{"study": label, **dict(c)} for label, c in counts.items()],
        columns=["study", "improved", "regressed", "no change"],
    )
    parts += [
        "<h2>What changed</h2>",
        "<p>Per cell and metric, the ratio NEW/BASE of the medians over the repeats, with its interval"
        " (bootstrap with 6 or more repeats on each side, else the conservative range ratio, whose coverage"
        " is given) and a Mann-Whitney U test with 2 or more repeats a side (efficiency, a ratio of ratios,"
        " has none; its interval comes from both studies' cells and baseline cells). A change is named only"
        " when the interval excludes 1 and the test rejects at 0.05 (without a test: a 95 % bootstrap"
        " interval); otherwise <em>no change</em>, and <code>note</code> says why. With 2 or 3 repeats a"
        " side no test can reject: run 4 or more (6 for bootstrap intervals) to see a change."
        f" Cells are matched on {esc(', '.join(keys))}.</p>",
        table_html(summary),
        "<h2>Verdicts that changed</h2>",
        table_html(verdict_changes),
    ]
    ranks = ranking(comparison)
    ranking_html = ["<h2>The frameworks' ranking by throughput (matched cells)</h2>", table_html(ranks)]
    if hardware:
        parts += ranking_html
    parts += ["<h2>Ratios</h2>", f"<div>{svg}</div>"]
    order = list(metrics)
    if hardware:
        order.sort(key=lambda m: not metrics[m][2])
    shown = [
        "study", "cell", "base_median", "new_median", "ratio", "ratio_lower", "ratio_upper", "coverage",
        "interval", "base_repeats", "new_repeats", "p_value", "change", "note",
    ]  # fmt: skip
    for name in order:
        label, higher, _ = metrics[name]
        mine = comparison[comparison["metric"].eq(name)]
        if mine.empty:
            continue
        better = "higher" if higher else "lower"
        parts.append(f"<h3>{esc(label)} ({esc(better)} is better)</h3>")
        parts.append(table_html(mine, shown))
    if not hardware:
        parts += ranking_html
    parts += [
        "<h2>What the studies ran with, where it differs</h2>",
        "<p>From the runs tables, each run's run_start record and, for archives, the manifest."
        " A fact a study did not record is empty.</p>",
        table_html(differences),
        "<h2>Cells without a match</h2>",
        table_html(unmatched, ["study", "only_in", "cell", "repeats", "why"]),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
