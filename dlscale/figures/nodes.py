"""How many nodes to a trained model, drawn from its tables, and what each figure claims.

Two figures, both read from the files the aggregation and the projection wrote:

- ``steps_to_target``: steps to the target against the global batch, a panel per model:
  the medians of ``steps_to_target.csv`` with their intervals per framework and rule, and
  the fitted S(B) of ``batch_fit.csv`` over the measured batches;
- ``nodes_to_target``: time to target (row 1) and node-hours (row 2) against the node
  count, a column per model: the measured medians of ``nodes_to_target.csv`` with their
  intervals, and the projection of ``time_to_target_projection.csv`` to
  ``projection.max_nodes`` with its band.

Each figure's ``claim`` is the rows it must draw in each panel, checked against the rendered
chart by ``dlscale.figures.panels`` (a figure that shows what its table does not say is a
wrong number too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import altair as alt
import numpy as np
import pandas as pd

from dlscale.analysis.batch_scaling import steps_curve
from dlscale.figures.charts import empty_chart, framework_colour, save_chart
from dlscale.figures.panels import Claim, check_chart, spec_of_html
from dlscale.outputs import NODES_FIGURE_CAPTIONS

#: The figures, by name (their captions: dlscale.outputs).
NODES_FIGURES: tuple[str, ...] = tuple(NODES_FIGURE_CAPTIONS)
TIME = "time to target (s)"
COST = "node-hours"
#: Points of each fitted curve drawn between the smallest and the largest measured batch.
CURVE_POINTS = 40
_STEPS_COLUMNS = ["kind", "model", "framework", "lr_rule", "global_batch", "steps", "low", "high"]
_NODES_COLUMNS = ["kind", "model", "quantity", "framework", "lr_rule", "nodes", "value", "low", "high"]


def _finite(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    if frame.empty or column not in frame:
        return frame.iloc[0:0]
    return frame[np.isfinite(pd.to_numeric(frame[column], errors="coerce").astype("float64"))]


#: Pixels between the points of two series (framework and rule) at one x: series whose
#: values agree (every framework's 80 steps at batch 64 in the demo) would otherwise be drawn
#: on top of one another, one colour hiding the others. A series keeps its offset in every
#: layer, so its points stay on its own line.
DODGE_PX = 6
#: Pixels between the outermost point and the panel's frame.
MARGIN_PX = 8
#: A panel's width in pixels (the dodge is set in pixels through it).
PANEL_WIDTH = 240


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _described(layers: list[alt.Chart]) -> list[alt.Chart]:
    """Every layer described by its row's table values (``_dodged_x``'s ``described``)."""
    return [layer.encode(description="described:N") for layer in layers]


def _series(rows: pd.DataFrame) -> pd.Series:
    return rows["framework"].astype(str) + "\x00" + rows["lr_rule"].astype(str)


def _dodged_x(rows: pd.DataFrame, field: str, title: str) -> tuple[pd.DataFrame, alt.X]:
    """``rows`` with ``x_drawn`` (``field`` moved a few pixels per series, multiplicatively
    on the log axis; the tables' values stay in ``field``, which tooltips and the read-back
    check use) and the log2 axis that draws it: ticks at the powers of two across the rows'
    values (every other one past eight, so labels never run together), not at every point of
    a fitted or projected curve; the domain padded so no dodged point leaves the panel."""
    finite = [float(v) for v in rows[field] if math.isfinite(float(v)) and float(v) > 0]
    low, high = (math.floor(math.log2(min(finite))), math.ceil(math.log2(max(finite)))) if finite else (0, 0)
    powers = [2.0**k for k in range(low, high + 1)]
    values = powers if len(powers) <= 8 else powers[:: math.ceil(len(powers) / 8)]
    series = sorted(set(_series(rows)))
    centre = (len(series) - 1) / 2
    # The domain: the ticks' octaves (one octave around a single value), and a margin of
    # the outermost dodge plus MARGIN_PX on each side, so no point is cut at the frame.
    core_low, core_high = (low, high) if high > low else (low - 0.5, high + 0.5)
    # Many series share at most half the panel's width: their dodge narrows.
    dodge_px = min(DODGE_PX, (PANEL_WIDTH / 4 - MARGIN_PX) / centre) if centre else 0.0
    margin_px = centre * dodge_px + MARGIN_PX
    octave_px = (PANEL_WIDTH - 2 * margin_px) / (core_high - core_low)
    offsets = _series(rows).map(
        {name: (index - centre) * dodge_px / octave_px for index, name in enumerate(series)}
    )
    drawn = rows.assign(x_drawn=rows[field].astype("float64") * np.exp2(offsets.astype("float64")))
    # What a screen reader (and the SVG's aria-label) says of a mark: the table's values, not
    # the dodged x Vega would describe by default.
    drawn["described"] = [
        "; ".join(
            f"{column}: {value}" for column, value in row.items() if column != "kind" and not _blank(value)
        )
        for row in rows.to_dict("records")
    ]
    pad = margin_px / octave_px
    x = alt.X(
        "x_drawn:Q",
        title=title,
        scale=alt.Scale(
            type="log", base=2, domain=[2.0 ** (core_low - pad), 2.0 ** (core_high + pad)], nice=False
        ),
        axis=alt.Axis(values=values, format="d", grid=False),
    )
    return drawn, x


def steps_rows(steps: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    """What the steps figure draws: every batch with a median (steps_to_target.csv, kind
    ``median``, with its interval), each fitted S(B) over its measured batches
    (batch_fit.csv, kind ``fit``), and each batch where runs diverged and none has a
    median (kind ``diverged``, no number)."""
    have = _finite(steps, "steps_to_target")
    medians = pd.DataFrame(
        {
            "kind": "median",
            "model": have.get("model", pd.Series(dtype=str)),
            "framework": have.get("framework", pd.Series(dtype=str)),
            "lr_rule": have.get("lr_rule", pd.Series(dtype=str)).fillna("fixed"),
            "global_batch": have.get("global_batch", pd.Series(dtype=float)).astype("float64"),
            "steps": have.get("steps_to_target", pd.Series(dtype=float)).astype("float64"),
            "low": have.get("steps_low", pd.Series(dtype=float)).astype("float64"),
            "high": have.get("steps_high", pd.Series(dtype=float)).astype("float64"),
        }
    )
    curves = []
    for fit in _finite(fits, "b_noise").to_dict("records"):
        batches = [float(b) for b in str(fit.get("batches") or "").split(";") if b]
        if len(batches) < 2:
            continue
        grid = np.geomspace(min(batches), max(batches), CURVE_POINTS)
        curve = steps_curve(grid, float(fit["s_min"]), float(fit["b_noise"]))
        curves.append(
            pd.DataFrame(
                {
                    "kind": "fit",
                    "model": fit["model"],
                    "framework": fit["framework"],
                    "lr_rule": fit["lr_rule"] if isinstance(fit["lr_rule"], str) else "fixed",
                    "global_batch": grid,
                    "steps": curve,
                    "low": curve,
                    "high": curve,
                }
            )
        )
    # Batches where runs diverged and none reached the target: a vertical mark, no number.
    gone = steps[(steps.get("diverged", 0) > 0) & ~steps.index.isin(have.index)] if not steps.empty else steps
    diverged = pd.DataFrame(
        {
            "kind": "diverged",
            "model": gone.get("model", pd.Series(dtype=str)),
            "framework": gone.get("framework", pd.Series(dtype=str)),
            "lr_rule": gone.get("lr_rule", pd.Series(dtype=str)).fillna("fixed"),
            "global_batch": gone.get("global_batch", pd.Series(dtype=float)).astype("float64"),
            "steps": float("nan"),
            "low": float("nan"),
            "high": float("nan"),
        }
    )
    frames = [f for f in (medians, *curves, diverged) if not f.empty]
    if not frames:
        return pd.DataFrame(columns=_STEPS_COLUMNS)
    return pd.concat(frames, ignore_index=True)[_STEPS_COLUMNS]


#: Reasons named in a title, at most; the rest are counted (their tables name each).
TITLE_REASONS = 3


def _label(framework: object, model: object, rule: object) -> str:
    return f"{framework} {model} ({rule})"


def _row_label(row: Mapping[str, object]) -> str:
    """A table row's series label; a row without a rule is the fixed rate, as ``*_rows`` say."""
    rule = row.get("lr_rule")
    return _label(row.get("framework"), row.get("model"), rule if isinstance(rule, str) else "fixed")


def _labels(rows: pd.DataFrame) -> set[str]:
    """The series labels of drawn rows (their rule already filled in)."""
    return {_label(*key) for key in rows[["framework", "model", "lr_rule"]].itertuples(index=False)}


def _not_drawn(reasons: Mapping[str, str], everyone: int, what: str, table: str) -> list[str]:
    """Title lines for the series (``framework model (rule)`` -> why) that a layer does not
    draw: one line per reason, naming the series unless every one of ``everyone`` lacks it."""
    by_reason: dict[str, list[str]] = {}
    for series, reason in sorted(reasons.items()):
        by_reason.setdefault(reason, []).append(series)
    lines = []
    for reason, names in sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0])):
        who = "" if len(names) >= everyone else " for " + ", ".join(names[:TITLE_REASONS])
        if len(names) > TITLE_REASONS and who:
            who += f" and {len(names) - TITLE_REASONS} more"
        lines.append(f"{what}{who}: {reason}")
    if len(lines) > TITLE_REASONS:
        lines = [*lines[:TITLE_REASONS], f"and {len(lines) - TITLE_REASONS} more reason(s): {table}"]
    return lines


def steps_title(rows: pd.DataFrame, fits: pd.DataFrame) -> list[str]:
    """What the steps figure draws, and why a series has no fitted S(B) (batch_fit.csv's
    ``refused``): a title never promises a curve the figure does not show."""
    title = ["Steps to the target against the global batch"]
    drawn = _labels(rows[rows["kind"].eq("fit")])
    if drawn:
        title[0] += ","
        title.append("dashed: the fitted S(B) over the measured batches")
    everyone = _labels(rows[rows["kind"].eq("median")])
    refused: dict[str, str] = {}
    for fit in fits.to_dict("records") if not fits.empty else []:
        series = _row_label(fit)
        if series in everyone and series not in drawn:
            refused[series] = str(fit.get("refused") or "not fitted")
    for series in everyone - drawn - set(refused):
        refused[series] = "not fitted (no row in batch_fit.csv)"
    return title + _not_drawn(refused, len(everyone), "no S(B)", "batch_fit.csv")


def steps_chart(steps: pd.DataFrame, fits: pd.DataFrame) -> alt.TopLevelMixin:
    """Steps to target against the global batch (log-log), a panel per model: the medians
    with their intervals, the fitted S(B) dashed, a dotted vertical line at a batch where
    the runs diverged and none reached the target."""
    rows = steps_rows(steps, fits)
    if rows.empty:
        return empty_chart("no batch reached the target: no steps to target to show")
    frameworks = sorted(rows["framework"].unique())
    drawn, x = _dodged_x(rows, "global_batch", "global batch")
    y = alt.Y("steps:Q", title="steps to target", scale=alt.Scale(type="log"))
    colour = framework_colour(frameworks)
    base = alt.Chart(drawn)
    medians = base.transform_filter(alt.datum.kind == "median")
    layers = [
        base.transform_filter(alt.datum.kind == "fit").mark_line(strokeDash=[4, 3]).encode(
            x=x, y=y, color=colour, detail="lr_rule:N"
        ),
        base.transform_filter(alt.datum.kind == "diverged").mark_rule(strokeDash=[2, 2], strokeWidth=2).encode(
            x=x, color=colour, tooltip=["framework", "lr_rule", "global_batch", "kind"]
        ),
        medians.mark_rule().encode(x=x, y=alt.Y("low:Q", scale=alt.Scale(type="log")), y2="high:Q", color=colour),
        medians.mark_point(filled=True, size=60).encode(
            x=x, y=y, color=colour, shape=alt.Shape("lr_rule:N", title="rule"),
            tooltip=["framework", "lr_rule", "global_batch", "steps", "low", "high"],
        ),
    ]  # fmt: skip
    return (
        alt.layer(*_described(layers))
        .properties(width=PANEL_WIDTH, height=180)
        .facet(facet=alt.Facet("model:N", title=None), columns=2)
        .resolve_scale(y="independent")
        .properties(title=alt.TitleParams(steps_title(rows, fits)))
    )


def steps_claim(steps: pd.DataFrame, fits: pd.DataFrame) -> Claim:
    return Claim(steps_rows(steps, fits), {"panel": "model"})


def nodes_rows(by_nodes: pd.DataFrame, projected: pd.DataFrame) -> pd.DataFrame:
    """What the nodes figure draws: the measured medians (nodes_to_target.csv; kind
    ``measured``, or ``excluded`` where the table excludes the node count from the verdicts,
    its repeats contended) and the projection (time_to_target_projection.csv), time and
    node-hours, each with its interval."""
    frames = []
    measured = by_nodes if not by_nodes.empty else pd.DataFrame(columns=["time_to_target_s"])
    for quantity, value, low, high, table, kind in (
        (TIME, "time_to_target_s", "time_low", "time_high", measured, "measured"),
        (COST, "node_hours", "node_hours_low", "node_hours_high", measured, "measured"),
        (TIME, "time_to_target_s", "time_lo", "time_hi", projected, "projected"),
        (COST, "node_hours", "node_hours_lo", "node_hours_hi", projected, "projected"),
    ):
        have = _finite(table, value)
        if have.empty:
            continue
        if kind == "measured" and "excluded" in have:
            excluded = have["excluded"].astype(str).str.lower().isin(("true", "1"))
            kind = excluded.map({True: "excluded", False: "measured"})
        frames.append(
            pd.DataFrame(
                {
                    "kind": kind,
                    "model": have["model"],
                    "quantity": quantity,
                    "framework": have["framework"],
                    "lr_rule": have["lr_rule"].fillna("fixed"),
                    "nodes": have["nodes"].astype("float64"),
                    "value": have[value].astype("float64"),
                    "low": have[low].astype("float64"),
                    "high": have[high].astype("float64"),
                }
            )
        )
    if not frames:
        return pd.DataFrame(columns=_NODES_COLUMNS)
    return pd.concat(frames, ignore_index=True)[_NODES_COLUMNS]


def nodes_title(rows: pd.DataFrame, summary: pd.DataFrame | None = None) -> list[str]:
    """What the nodes figure draws, and why a measured series is not projected
    (time_to_target_summary.csv's ``not_projected``): no promise of a line it lacks."""
    projected = rows[rows["kind"].eq("projected")]
    measured = rows[~rows["kind"].eq("projected")]
    drawn, everyone = _labels(projected), _labels(measured)
    said: dict[str, str] = {}
    if summary is not None and not summary.empty and "not_projected" in summary:
        for row in summary.to_dict("records"):
            if isinstance(row.get("not_projected"), str) and row["not_projected"]:
                said[_row_label(row)] = row["not_projected"]
    missing = {
        series: said.get(series, "no curve in time_to_target_projection.csv") for series in everyone - drawn
    }
    what = ["measured (points, with their intervals)"] if not measured.empty else []
    if drawn:
        what.append(f"projected to {int(projected['nodes'].max())} nodes (lines, bands)")
    title = ["Time and node-hours to the target against the node count:", "; ".join(what)]
    title += _not_drawn(missing, len(everyone), "not projected", "time_to_target_summary.csv")
    if rows["kind"].eq("excluded").any():
        title.append("hollow: contended repeats, excluded from the verdicts")
    return title


def nodes_chart(
    by_nodes: pd.DataFrame, projected: pd.DataFrame, summary: pd.DataFrame | None = None
) -> alt.TopLevelMixin:
    """Time and node-hours to target against nodes (log-log): measured points with their
    intervals (hollow and dashed where the table excludes them: contended seconds, shown,
    never compared), the projection's line and band; ``summary`` (the projection's) says in
    the title why a series has none."""
    rows = nodes_rows(by_nodes, projected)
    if rows.empty:
        return empty_chart("no node count reached the target: no time to target to show")
    frameworks = sorted(rows["framework"].unique())
    drawn, x = _dodged_x(rows, "nodes", "nodes")
    y = alt.Y("value:Q", title=None, scale=alt.Scale(type="log"))
    colour = framework_colour(frameworks)
    base = alt.Chart(drawn)
    band = base.transform_filter(alt.datum.kind == "projected")
    points = base.transform_filter(alt.datum.kind == "measured")
    excluded = base.transform_filter(alt.datum.kind == "excluded")
    layers = [
        band.mark_area(opacity=0.2).encode(x=x, y=alt.Y("low:Q", scale=alt.Scale(type="log")), y2="high:Q", color=colour, detail="lr_rule:N"),
        band.mark_line().encode(x=x, y=y, color=colour, detail="lr_rule:N"),
        points.mark_rule().encode(x=x, y=alt.Y("low:Q", scale=alt.Scale(type="log")), y2="high:Q", color=colour),
        points.mark_point(filled=True, size=60).encode(
            x=x, y=y, color=colour, shape=alt.Shape("lr_rule:N", title="rule"),
            tooltip=["framework", "lr_rule", "nodes", "value", "low", "high"],
        ),
        excluded.mark_rule(strokeDash=[2, 2], opacity=0.6).encode(
            x=x, y=alt.Y("low:Q", scale=alt.Scale(type="log")), y2="high:Q", color=colour
        ),
        excluded.mark_point(filled=False, size=60, opacity=0.6).encode(
            x=x, y=y, color=colour, shape=alt.Shape("lr_rule:N", title="rule"),
            tooltip=["framework", "lr_rule", "nodes", "value", "low", "high", "kind"],
        ),
    ]  # fmt: skip
    return (
        alt.layer(*_described(layers))
        .properties(width=PANEL_WIDTH, height=160)
        .facet(row=alt.Row("quantity:N", title=None), column=alt.Column("model:N", title=None))
        .resolve_scale(y="independent")
        .properties(title=alt.TitleParams(nodes_title(rows, summary)))
    )


def nodes_claim(by_nodes: pd.DataFrame, projected: pd.DataFrame) -> Claim:
    return Claim(nodes_rows(by_nodes, projected), {"row": "quantity", "column": "model"})


def claims(tables: Mapping[str, pd.DataFrame]) -> dict[str, Claim]:
    """Each figure's claim from the tables (``steps``, ``fits``, ``by_nodes``, ``projected``)."""
    return {
        "steps_to_target": steps_claim(tables["steps"], tables["fits"]),
        "nodes_to_target": nodes_claim(tables["by_nodes"], tables["projected"]),
    }


def charts(tables: Mapping[str, pd.DataFrame]) -> dict[str, alt.TopLevelMixin]:
    return {
        "steps_to_target": steps_chart(tables["steps"], tables["fits"]),
        "nodes_to_target": nodes_chart(tables["by_nodes"], tables["projected"], tables.get("summary")),
    }


class FigureMismatch(RuntimeError):
    """A drawn figure whose panels do not show what its table says; the message names
    the figure and the panel."""


def draw_checked(tables: Mapping[str, pd.DataFrame], out: Mapping[str, Mapping[str, str]]) -> None:
    """Draw both figures in the formats ``out`` names (``{figure: {format: path}}``, the
    HTML among them), then read each rendered chart back and compare its panels with its
    claim: ``FigureMismatch`` naming the figure and panel where one differs."""
    built = charts(tables)
    claimed = claims(tables)
    problems = []
    for name, paths in out.items():
        chart = built[name].configure(background="white").configure_title(fontSize=14, anchor="start")
        for target in paths.values():
            save_chart(chart, target)
        problems += check_chart(name, spec_of_html(paths["html"]), claimed[name])
    if problems:
        raise FigureMismatch("; ".join(problems))
