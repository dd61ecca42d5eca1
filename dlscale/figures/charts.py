"""The study's four figures, drawn with altair from the runs, iterations and cells tables the
aggregation wrote (never recomputed here).

Each figure is written as self-contained HTML (Vega bundled inline, so the report opens on
a cluster login node without internet), SVG and PNG (rendered by vl-convert, no browser).
Every file is written to a temporary name in the same directory and renamed into place,
so a figure on disk is always whole.

Only ok runs are drawn: a failed run has no numbers to plot (its row and reason are in
the runs table). Colours are fixed per framework across all figures so that a reader can
move between them without re-reading legends.

Throughput and speedup show each cell of cells.csv (a set-up at one node count, over its
repeats) as its median with its interval as an error bar, and mark
flagged cells and runs (superlinear, fixed overhead at one rank, contended) with a
different shape whose tooltip gives the reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.analysis.runstats import loss_curve
from dlscale.base import atomic
from dlscale.outputs import FIGURE_FORMATS, FIGURES

FORMATS = FIGURE_FORMATS
#: The figures ``make_figures`` draws (the others of ``FIGURES``: dlscale.figures.quality).
STUDY_FIGURES: tuple[str, ...] = ("throughput", "speedup", "breakdown", "loss")
__all__ = ["FIGURES", "FORMATS", "HTML_JSON", "STUDY_FIGURES", "draw", "make_figures", "save_chart"]

#: How a point is marked: plain, or flagged (hover for the reason).
MARKERS: tuple[str, ...] = ("ok", "flagged")
_SHAPES = alt.Scale(domain=list(MARKERS), range=["circle", "triangle-up"])

#: The study's frameworks in the catalog's order, so each keeps its colour in every figure.
FRAMEWORK_ORDER: tuple[str, ...] = catalog.FRAMEWORK_NAMES
MODEL_ORDER: tuple[str, ...] = catalog.MODEL_NAMES

#: Most points drawn per loss curve; longer curves are thinned evenly (keeping the ends).
MAX_LOSS_POINTS = 300

_PANEL_WIDTH = 200
_PANEL_HEIGHT = 160


def ordered(values: pd.Series, preferred: tuple[str, ...]) -> list[str]:
    present = [str(v) for v in pd.unique(values.dropna())]
    return [v for v in preferred if v in present] + sorted(v for v in present if v not in preferred)


def _ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Ok runs with a throughput, plus a ``series`` label (see ``_series``)."""
    if runs.empty or "status" not in runs:
        return runs.iloc[0:0]
    ok = runs[runs["status"].eq("ok") & runs["throughput"].notna()].copy()
    ok["series"] = _series(ok)
    ok["ideal"] = ok["nodes"] / ok["baseline_nodes"]
    return ok


def _series(ok: pd.DataFrame) -> pd.Series:
    """One line per framework, split further only when a framework ran several set-ups.

    Points of different ranks-per-node, batch, scaling mode or network are not one scaling
    curve; when a study mixes them for one framework and model, the label names the set-up.
    """
    if ok.empty:
        return pd.Series([], index=ok.index, dtype=object)
    if "batch" in ok:  # a cells table: the batch that stays fixed is already there
        batch = ok["batch"]
    else:
        batch = ok["global_batch"].where(ok["scaling"].eq("strong"), ok["batch_per_rank"])
    setup = (
        ok["scaling"].astype(str)
        + ", "
        + ok["ranks_per_node"].astype(str)
        + " ranks/node, batch "
        + batch.astype(str)
    )
    if "network" in ok:
        setup = setup + ", " + ok["network"].fillna("host").astype(str)
    setups = setup.groupby([ok["model"], ok["framework"]]).transform("nunique")
    return ok["framework"].astype(str).where(setups.le(1), ok["framework"].astype(str) + " (" + setup + ")")


def framework_colour(frameworks: list[str], field: str = "framework", title: str = "framework") -> alt.Color:
    """Colour by framework (or by ``field``, e.g. the projection's set-ups), its legend's
    symbols solid (a band's or a point's opacity would otherwise pale them)."""
    return alt.Color(
        f"{field}:N",
        title=title,
        scale=alt.Scale(domain=frameworks, scheme="tableau10"),
        legend=alt.Legend(symbolOpacity=1),
    )


def nodes_axis(ok: pd.DataFrame) -> alt.X:
    """Nodes on a log2 axis, ticks at the node counts that were run."""
    counts = sorted(int(n) for n in ok["nodes"].unique())
    low, high = counts[0], counts[-1]
    if low == high:
        low, high = max(low / 2, 0.5), high * 2
    return alt.X(
        "nodes:Q",
        title="nodes",
        scale=alt.Scale(type="log", base=2, domain=[low, high], nice=False),
        axis=alt.Axis(values=counts, format="d", grid=False),
    )


def empty_chart(message: str) -> alt.Chart:
    """A chart that says why there is nothing to plot (zero ok runs, no loss recorded...)."""
    frame = pd.DataFrame({"message": [message]})
    return (
        alt.Chart(frame)
        .mark_text(fontSize=16)
        .encode(text="message:N")
        .properties(title=message, width=420, height=120)
    )


def _cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells table as the aggregation wrote it (cells.csv: medians over repeats with
    intervals, flags), the cells with a throughput, with a series and a marker."""
    if cells is None or cells.empty or "throughput" not in cells:
        return pd.DataFrame()
    table = cells[cells["throughput"].notna()].copy()
    table["series"] = _series(table)
    table["marker"] = np.where(table["flag"].notna(), MARKERS[1], MARKERS[0])
    # A cells table with no flag at all reads its column as float (all NaN): text first.
    table["flag"] = table["flag"].astype(object).fillna("")
    return table


def _questions_speed(flag: pd.Series) -> pd.Series:
    """Whether a run's flag questions the speed a scaling figure plots: a flag about its
    roofline fraction alone (``roofline: ...``, dlscale.host.roofline.flag_of) does not."""
    return flag.map(
        lambda text: isinstance(text, str) and any(not p.startswith("roofline: ") for p in text.split("; "))
    ).astype(bool)


def _scaling_data(runs: pd.DataFrame, cells: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ok runs, runs and cells) for a per-node-count figure of ``metric``, in one long table.

    Returns the runs (with ``series``, ``ideal`` and ``marker``) and one table with a row
    per run (``kind`` run) and per cell (``kind`` cell: median, ``low``/``high`` interval,
    ``flag``), so that one faceted layer chart can draw both.
    """
    ok = _ok_runs(runs)
    ok = ok[ok[metric].notna()] if not ok.empty else ok
    if ok.empty:
        return ok, ok
    flag = ok["flag"] if "flag" in ok else pd.Series(None, index=ok.index, dtype=object)
    run_rows = ok.assign(
        kind="run",
        marker=np.where(_questions_speed(flag), MARKERS[1], MARKERS[0]),
        flag=flag.fillna(""),
        value=ok[metric],
        cell="",
    )[["kind", "run_id", "cell", "model", "framework", "series", "nodes", "value", "marker", "flag", "ideal"]]
    cells = _cells(cells)
    cells = cells[cells[metric].notna()] if not cells.empty else cells
    cell_rows = cells.assign(
        kind="cell",
        run_id="",
        value=cells[metric],
        low=cells[f"{metric}_low"],
        high=cells[f"{metric}_high"],
        interval=cells["interval"] if metric == "throughput" else cells["ratio_interval"],
        ideal=cells["ideal_speedup"],
    )
    columns = [
        "kind",
        "run_id",
        "cell",
        "model",
        "framework",
        "series",
        "nodes",
        "value",
        "marker",
        "flag",
        "ideal",
    ]
    data = pd.concat(
        [run_rows, cell_rows[[*columns, "low", "high", "repeats", "interval", "note"]]], ignore_index=True
    )
    for name in ("flag", "note", "interval", "run_id", "cell"):
        data[name] = data[name].astype(object).where(data[name].notna(), "")
    return ok, data


def _scaling_layers(
    data: pd.DataFrame, ok: pd.DataFrame, title: str, number: str, extra: list[alt.Chart] | None = None
) -> alt.LayerChart:
    """Repeats as small points, cells as medians with interval bars, a line per series."""
    frameworks = ordered(ok["framework"], FRAMEWORK_ORDER)
    x = nodes_axis(ok)
    colour = framework_colour(frameworks)
    y = alt.Y("value:Q", title=title)
    shape = alt.Shape("marker:N", title="point", scale=_SHAPES)
    runs = (
        alt.Chart()
        .transform_filter(alt.datum.kind == "run")
        .mark_point(filled=True, opacity=0.35, size=25)
        .encode(
            x=x,
            y=y,
            color=colour,
            shape=shape,
            tooltip=[
                "run_id:N",
                "series:N",
                "nodes:Q",
                alt.Tooltip("value:Q", title=title, format=number),
                "flag:N",
            ],
        )
    )
    cells = alt.Chart().transform_filter(alt.datum.kind == "cell")
    bars = cells.mark_rule(strokeWidth=2, opacity=0.8).encode(
        x=x, y=alt.Y("low:Q", title=title), y2="high:Q", color=colour
    )
    lines = cells.mark_line(strokeWidth=2).encode(x=x, y=y, color=colour, detail="series:N")
    medians = cells.mark_point(filled=True, size=70, opacity=1.0).encode(
        x=x,
        y=y,
        color=colour,
        shape=shape,
        tooltip=[
            "cell:N",
            "series:N",
            "nodes:Q",
            alt.Tooltip("value:Q", title=f"median {title}", format=number),
            alt.Tooltip("low:Q", format=number),
            alt.Tooltip("high:Q", format=number),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("repeats:Q", title="repeats used"),
            "flag:N",
            "note:N",
        ],
    )
    return alt.layer(*(extra or []), runs, bars, lines, medians, data=data)


def throughput_chart(runs: pd.DataFrame, cells: pd.DataFrame) -> alt.TopLevelMixin:
    """Throughput (global samples/s) vs nodes: repeats, cell medians with intervals, lines."""
    ok, data = _scaling_data(runs, cells, "throughput")
    if ok.empty:
        return empty_chart("Throughput: no successful runs to plot")
    layers = _scaling_layers(data, ok, "throughput (samples/s)", ",.1f")
    return (
        layers.properties(width=_PANEL_WIDTH, height=_PANEL_HEIGHT)
        .facet(facet=alt.Facet("model:N", title=None, sort=ordered(ok["model"], MODEL_ORDER)), columns=4)
        .resolve_scale(y="independent")
        .properties(
            title="Throughput vs nodes (small points: repeats; large: medians over repeats with their "
            "interval; triangles: flagged)"
        )
    )


def speedup_chart(runs: pd.DataFrame, cells: pd.DataFrame) -> alt.TopLevelMixin:
    """Speedup vs nodes against the smallest ok node count, with intervals and the ideal line."""
    ok, data = _scaling_data(runs, cells, "speedup")
    if ok.empty:
        return empty_chart("Speedup: no successful runs to plot")
    title = "speedup (x baseline throughput)"
    ideal = (
        alt.Chart()
        .transform_filter(alt.datum.kind == "cell")
        .mark_line(color="gray", strokeDash=[4, 4], strokeWidth=1.5)
        .encode(x=nodes_axis(ok), y=alt.Y("ideal:Q", title=title), detail="series:N")
    )
    layers = _scaling_layers(data, ok, title, ".2f", extra=[ideal])
    return (
        layers.properties(width=_PANEL_WIDTH, height=_PANEL_HEIGHT)
        .facet(facet=alt.Facet("model:N", title=None, sort=ordered(ok["model"], MODEL_ORDER)), columns=4)
        .properties(
            title="Speedup vs nodes (dashed: ideal = nodes / baseline nodes; bars: intervals; "
            "triangles: flagged, e.g. superlinear)"
        )
    )


COMPONENTS: tuple[str, ...] = ("compute", "exposed communication", "step (not split)", "input wait")


def breakdown_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Median compute and exposed communication per model, set-up and node count, long form.

    Where a framework cannot split a step (compute_s null), the whole median step is one
    ``step (not split)`` bar, so that the framework is still on the figure without a
    made-up split. Where runs recorded ``input_s`` (the wait for the next batch, outside
    the step), an ``input wait`` part goes on top: the bar is then the whole iteration
    (input + step), and a growing top part is input becoming the bottleneck (``input:
    pipeline``). Runs without it (NaN) get no such part.
    """
    ok = _ok_runs(runs)
    columns = ["model", "framework", "series", "nodes", "component", "order", "seconds", "step_s", "runs"]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    if "input_s" not in ok:
        ok = ok.assign(input_s=np.nan)  # a table written before input_s existed
    medians = ok.groupby(["model", "framework", "series", "nodes"], as_index=False).agg(
        compute_s=("compute_s", "median"),
        exposed_comm_s=("exposed_comm_s", "median"),
        step_s=("step_s", "median"),
        input_s=("input_s", "median"),
        runs=("run_id", "size"),
    )
    split = medians["compute_s"].notna()
    waited = medians["input_s"].notna()
    parts = [
        # Each part's seconds from its own rows: a Series assigned to an empty part would
        # give it the Series' rows, with no model, set-up or node count.
        medians[split].assign(component=COMPONENTS[0], order=0, seconds=lambda d: d["compute_s"]),
        medians[split].assign(component=COMPONENTS[1], order=1, seconds=lambda d: d["exposed_comm_s"]),
        medians[~split].assign(component=COMPONENTS[2], order=2, seconds=lambda d: d["step_s"]),
        medians[waited].assign(component=COMPONENTS[3], order=3, seconds=lambda d: d["input_s"]),
    ]
    return pd.concat(parts, ignore_index=True)[columns]


def breakdown_chart(runs: pd.DataFrame) -> alt.TopLevelMixin:
    """Per-iteration time split into compute and exposed communication (stacked medians).

    One row of panels per model (each with its own time axis: LeNet steps take
    milliseconds, ResNet-50 steps seconds), one panel per framework, node counts on x.
    """
    table = breakdown_table(runs)
    if table.empty:
        return empty_chart("Time breakdown: no successful runs to plot")
    components = [c for c in COMPONENTS if c in set(table["component"])]
    colour = alt.Color(
        "component:N",
        title="per-iteration time",
        scale=alt.Scale(
            domain=list(COMPONENTS),
            range=["#4c78a8", "#f58518", "#9d9d9d", "#54a24b"],
        ),
        legend=alt.Legend(values=components),
    )
    rows = []
    for model in ordered(table["model"], MODEL_ORDER):
        mine = table[table["model"].eq(model)]
        series = ordered(mine["series"], FRAMEWORK_ORDER)
        chart = (
            alt.Chart(mine)
            .mark_bar()
            .encode(
                x=alt.X("nodes:O", title="nodes", axis=alt.Axis(labelAngle=0)),
                y=alt.Y("seconds:Q", title="median time per iteration (s)", stack="zero"),
                color=colour,
                order=alt.Order("order:Q"),
                tooltip=[
                    "series:N",
                    "nodes:O",
                    "component:N",
                    alt.Tooltip("seconds:Q", format=".4f"),
                    alt.Tooltip("step_s:Q", title="median step_s", format=".4f"),
                    alt.Tooltip("runs:Q", title="ok runs"),
                ],
            )
            .properties(width=140, height=_PANEL_HEIGHT)
            .facet(column=alt.Column("series:N", title=None, sort=series))
            .properties(title=model)
        )
        rows.append(chart)
    title = "Per-iteration time: compute vs exposed communication (medians)"
    if COMPONENTS[3] in components:
        title += "; input wait on top where recorded"
    return alt.vconcat(*rows).resolve_scale(y="independent", color="shared").properties(title=title)


def loss_table(runs: pd.DataFrame, iterations: pd.DataFrame) -> pd.DataFrame:
    """Loss curves of ok runs (rank 0, warm-up included), median over repeats.

    Long curves are thinned to at most ``MAX_LOSS_POINTS`` iterations per curve, which keeps
    the HTML small without changing the shape of the curve.
    """
    columns = ["model", "framework", "series", "nodes", "iteration", "loss", "repeats"]
    ok = _ok_runs(runs)
    if ok.empty or iterations.empty:
        return pd.DataFrame(columns=columns)
    mine = iterations[iterations["run_id"].isin(ok["run_id"])]
    curve = loss_curve(mine)
    if curve.empty:
        return pd.DataFrame(columns=columns)
    curve = curve.merge(ok[["run_id", "series"]], on="run_id", how="left")
    table = curve.groupby(["model", "framework", "series", "nodes", "iteration"], as_index=False).agg(
        loss=("loss", "median"), repeats=("run_id", "nunique")
    )
    last = table.groupby(["model", "series", "nodes"])["iteration"].transform("max")
    first = table.groupby(["model", "series", "nodes"])["iteration"].transform("min")
    stride = np.maximum(1, np.ceil((last - first + 1) / MAX_LOSS_POINTS)).astype("int64")
    keep = ((table["iteration"] - first) % stride).eq(0) | table["iteration"].eq(last)
    return table[keep][columns].reset_index(drop=True)


def loss_chart(runs: pd.DataFrame, iterations: pd.DataFrame) -> alt.TopLevelMixin:
    """Loss vs iteration, one colour per node count, a row of panels per model."""
    table = loss_table(runs, iterations)
    if table.empty:
        ok = _ok_runs(runs)
        why = "no successful runs" if ok.empty else "no loss recorded"
        return empty_chart(f"Loss: {why} to plot")
    rows = []
    for model in ordered(table["model"], MODEL_ORDER):
        mine = table[table["model"].eq(model)]
        series = ordered(mine["series"], FRAMEWORK_ORDER)
        chart = (
            alt.Chart(mine)
            .mark_line(strokeWidth=1.5)
            .encode(
                x=alt.X("iteration:Q", title="iteration"),
                y=alt.Y("loss:Q", title="training loss (rank 0)", scale=alt.Scale(zero=False)),
                color=alt.Color("nodes:O", title="nodes", scale=alt.Scale(scheme="viridis")),
                tooltip=[
                    "series:N",
                    "nodes:O",
                    "iteration:Q",
                    alt.Tooltip("loss:Q", format=".4f"),
                    "repeats:Q",
                ],
            )
            .properties(width=_PANEL_WIDTH, height=140)
            .facet(column=alt.Column("series:N", title=None, sort=series))
            .properties(title=model)
        )
        rows.append(chart)
    return (
        alt.vconcat(*rows)
        .resolve_scale(y="independent", color="shared")
        .properties(title="Training loss vs iteration (median over repeats; warm-up iterations included)")
    )


class HtmlSafeJSONEncoder(json.JSONEncoder):
    """JSON that cannot end the ``<script>`` element it is embedded in: ``<``, ``>`` and ``&``
    (only ever inside strings in JSON) written as ``\\u`` escapes, the same values to any
    JSON reader. altair writes a chart's data raw into its HTML's script, so a run's host
    named ``</script><img src=x onerror=...>`` would otherwise end the script there and
    become a live element of the page."""

    def encode(self, o: object) -> str:
        text = super().encode(o)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


#: ``json_kwds`` for altair's HTML writer: every string from a run stays data.
HTML_JSON = {"cls": HtmlSafeJSONEncoder}


def save_chart(chart: alt.TopLevelMixin, target: str | os.PathLike[str]) -> None:
    """Save ``chart`` to ``target`` atomically; the format comes from the extension. HTML
    embeds the chart's data as escaped JSON (``HTML_JSON``); SVG text is escaped by Vega's
    own SVG writer."""
    suffix = Path(target).suffix
    if suffix == ".html":
        atomic.replace_with(target, lambda tmp: chart.save(tmp, inline=True, json_kwds=HTML_JSON))
    elif suffix == ".png":
        atomic.replace_with(target, lambda tmp: chart.save(tmp, format="png", scale_factor=2.0))
    else:
        atomic.replace_with(target, lambda tmp: chart.save(tmp, format=suffix.lstrip(".")))


def _styled(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    return chart.configure(background="white").configure_title(fontSize=14, anchor="start")


def make_figures(
    runs: pd.DataFrame, iterations: pd.DataFrame, cells: pd.DataFrame, out: dict[str, dict[str, str]]
) -> None:
    """Draw the four figures from the tables the aggregation wrote (runs, iterations,
    cells) and write each in every format asked.

    ``out`` maps a figure name (``throughput``, ``speedup``, ``breakdown``, ``loss``) to
    ``{"html": path, "svg": path, "png": path}``. Figures not named in ``out`` are not
    drawn; an unknown name raises ``KeyError`` (a typo in a rule should fail loudly).
    A table with zero ok runs gives charts that say so rather than an error, so a study
    whose every run failed still gets a report that shows the failures.
    """
    builders: dict[str, Callable[[], alt.TopLevelMixin]] = {
        "throughput": lambda: throughput_chart(runs, cells),
        "speedup": lambda: speedup_chart(runs, cells),
        "breakdown": lambda: breakdown_chart(runs),
        "loss": lambda: loss_chart(runs, iterations),
    }
    draw(builders, out)


def draw(builders: dict[str, Callable[[], alt.TopLevelMixin]], out: dict[str, dict[str, str]]) -> None:
    """Build the charts ``out`` names and save each in the formats it lists.

    An unknown name raises ``KeyError``, a path whose suffix is not its format
    ``ValueError``: a typo in a rule fails loudly instead of writing the wrong file.
    """
    unknown = sorted(set(out) - set(builders))
    if unknown:
        raise KeyError(f"unknown figure(s) {', '.join(unknown)}; expected {', '.join(builders)}")
    for name, paths in out.items():
        chart = _styled(builders[name]())
        for fmt, target in paths.items():
            if Path(target).suffix != f".{fmt}":
                raise ValueError(f"{name} {fmt} output {target} does not end in .{fmt}")
            save_chart(chart, target)
