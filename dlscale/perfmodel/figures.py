"""The scaling model's figures: projection with its band, validation, latency sensitivity, micro-benchmarks,
and the published record replayed (``replay``).

Drawn with altair from the tables of ``dlscale.perfmodel.pipeline`` and written in every format of
``dlscale.outputs.FIGURE_FORMATS`` through ``dlscale.figures.charts.save_chart`` (atomic). A table
with nothing in it gives a chart that says why, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import altair as alt
import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.figures.charts import draw, empty_chart, framework_colour
from dlscale.outputs import REPLAY_FIGURE
from dlscale.perfmodel.replay import PATTERN_NAMES
from dlscale.perfmodel.runs import setup_of
from dlscale.perfmodel.validation import VALIDATION_TARGET

_WIDTH, _HEIGHT = 200, 160


def _setup_order(values: pd.Series) -> list[str]:
    preferred = [s for fw in catalog.FRAMEWORKS.values() for s in fw.setups]
    present = [str(v) for v in pd.unique(values.dropna())]
    return [s for s in preferred if s in present] + sorted(s for s in present if s not in preferred)


def _model_order(values: pd.Series) -> list[str]:
    present = set(values.astype(str))
    return [m for m in catalog.MODEL_NAMES if m in present] + sorted(present - set(catalog.MODEL_NAMES))


def _colour(setups: list[str], title: str = "framework") -> alt.Color:
    return framework_colour(setups, field="setup", title=title)


def _nodes_x(top: int) -> alt.X:
    ticks = [n for n in (1, 4, 16, 64, 256, 1024, 4096, 16384) if n <= top]
    if top not in ticks:
        ticks.append(top)
    return alt.X(
        "nodes:Q",
        title="nodes",
        scale=alt.Scale(type="log", base=2, domain=[1, top], nice=False),
        axis=alt.Axis(values=ticks, format="d"),
    )


def projection_chart(
    projection: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    host_model: pd.DataFrame | None = None,
    efficiency50: pd.DataFrame | None = None,
) -> alt.TopLevelMixin:
    """Projected speedup and efficiency vs nodes, each with its 95% bootstrap band.

    Lines: the model on the projection's network (solid) and on this host (dashed, over the
    measured node counts); bands: the 2.5-97.5 percentiles of the bootstrap; points: the
    measured host-network runs; grey: ideal. The 50% efficiency line is marked, and each
    framework's node count from which it stays below it, with its band and any node counts
    where it dips below and recovers (``efficiency50``'s summary), is written in the
    efficiency panel: the projection's answer, where a reader looks.
    """
    if projection.empty:
        return empty_chart("Projection: no framework to project (needs micro-benchmarks or ok host runs)")
    network = str(projection["network"].iloc[0])
    lines = projection.assign(curve=f"model on {network}")
    if host_model is not None and not host_model.empty:
        lines = pd.concat([lines, host_model.assign(curve="model on this host")], ignore_index=True)
    points = pd.DataFrame(columns=["model", "setup", "nodes", "speedup", "efficiency", "run_id"])
    if runs is not None and not runs.empty and "status" in runs:
        ok = runs[runs["status"].eq("ok") & runs.get("speedup", pd.Series(np.nan, index=runs.index)).notna()]
        if "network" in ok:
            ok = ok[ok["network"].fillna("host").eq("host")]
        if not ok.empty:
            versions = ok["versions"] if "versions" in ok else pd.Series(None, index=ok.index)
            points = ok.assign(setup=[setup_of(f, v) for f, v in zip(ok["framework"], versions, strict=True)])
            points = points[["model", "setup", "nodes", "speedup", "efficiency", "run_id"]]
    models = _model_order(projection["model"])
    points = points[points["model"].isin(models)]
    setups = _setup_order(pd.concat([lines["setup"], points["setup"]]))
    colour = _colour(setups)
    x = _nodes_x(int(lines["nodes"].max()))
    notes = pd.DataFrame(columns=["model", "setup", "nodes", "efficiency", "label"])
    if efficiency50 is not None and not efficiency50.empty:
        notes = efficiency50[efficiency50["model"].isin(models)].copy()
        order = {setup: i for i, setup in enumerate(setups)}
        notes["rank"] = notes["setup"].map(order).fillna(len(order))
        notes = notes.sort_values(["model", "rank"])
        notes["efficiency"] = 0.04 + 0.07 * notes.groupby("model").cumcount()
        notes["nodes"] = 1.0
        notes["label"] = notes["setup"] + ": below 50% from " + notes["summary"].astype(str)
        notes = notes[["model", "setup", "nodes", "efficiency", "label"]]
    data = pd.concat(
        [
            lines.assign(kind="model"),
            points.assign(kind="measured", curve="measured (host)"),
            notes.assign(kind="e50"),
        ],
        ignore_index=True,
    )
    data["ideal"] = data["nodes"].astype(float)
    data["one"], data["half"] = 1.0, 0.5
    dash = alt.StrokeDash(
        "curve:N",
        title="line",
        scale=alt.Scale(domain=[f"model on {network}", "model on this host"], range=[[1, 0], [5, 3]]),
    )
    rows = []
    for metric, title, scale, ideal in (
        ("speedup", "speedup (x 1 node)", alt.Scale(type="log", base=2), "ideal"),
        ("efficiency", "parallel efficiency", alt.Scale(domain=[0, 1.05], clamp=True), "one"),
    ):
        y = alt.Y(f"{metric}:Q", title=title, scale=scale)
        model_rows = alt.datum.kind == "model"
        projected = (alt.datum.kind == "model") & (alt.datum.curve == f"model on {network}")
        layers = [
            alt.Chart()
            .transform_filter(model_rows)
            .mark_line(color="gray", strokeDash=[2, 2], strokeWidth=1)
            .encode(x=x, y=alt.Y(f"{ideal}:Q", title=title, scale=scale)),
            alt.Chart()
            .transform_filter(projected)
            .mark_area(opacity=0.18)
            .encode(
                x=x,
                y=alt.Y(f"{metric}_lo:Q", title=title, scale=scale),
                y2=f"{metric}_hi:Q",
                color=colour,
            ),
            alt.Chart()
            .transform_filter(model_rows)
            .mark_line(strokeWidth=2)
            .encode(
                x=x,
                y=y,
                color=colour,
                strokeDash=dash,
                detail="curve:N",
                tooltip=[
                    "setup:N",
                    "curve:N",
                    "nodes:Q",
                    alt.Tooltip("speedup:Q", format=".1f"),
                    alt.Tooltip("efficiency:Q", format=".0%"),
                    alt.Tooltip("efficiency_lo:Q", format=".0%"),
                    alt.Tooltip("efficiency_hi:Q", format=".0%"),
                    alt.Tooltip("compute_s:Q", format=".4f"),
                    alt.Tooltip("comm_s:Q", format=".4f"),
                ],
            ),
            alt.Chart()
            .transform_filter(alt.datum.kind == "measured")
            .mark_point(filled=True, size=45, opacity=0.8)
            .encode(x=x, y=y, color=colour, tooltip=["run_id:N", alt.Tooltip(f"{metric}:Q", format=".2f")]),
        ]
        if metric == "efficiency":
            layers.append(
                alt.Chart()
                .transform_filter(model_rows)
                .mark_rule(color="firebrick", strokeDash=[3, 3], strokeWidth=1)
                .encode(y=alt.Y("half:Q", title=title, scale=scale))
            )
            layers.append(
                alt.Chart()
                .transform_filter(alt.datum.kind == "e50")
                .mark_text(align="left", baseline="middle", fontSize=9, dx=2)
                .encode(x=x, y=y, text="label:N", color=colour)
            )
        rows.append(
            alt.layer(*layers, data=data)
            .properties(width=_WIDTH, height=_HEIGHT)
            .facet(column=alt.Column("model:N", title=None, sort=models))
        )
    return alt.vconcat(*rows).properties(
        title=f"Projected scaling on {network}: lines model, bands 95% bootstrap, points measured on this host"
    )


def validation_chart(validation: pd.DataFrame, summary: pd.DataFrame | None = None) -> alt.TopLevelMixin:
    """Predicted vs measured step time of the held-out runs, with y = x and the validation
    target's lines (``VALIDATION_TARGET``: +-10%)."""
    target = VALIDATION_TARGET
    table = validation
    if len(validation):
        table = validation[pd.to_numeric(validation["predicted_s"], errors="coerce").notna()]
    if table.empty:
        why = (
            "no runs on an emulated network (the held-out runs)"
            if validation.empty
            else "no run could be predicted"
        )
        return empty_chart(f"Validation: {why}")
    table = table.copy()
    labels: dict[str, str] = {}
    if summary is not None and not summary.empty:
        for row in summary.itertuples():
            if pd.notna(row.median_abs_error):
                given = getattr(row, "median_abs_error_given_compute", math.nan)
                labels[row.setup] = (
                    f"{row.setup} (cells' median |error| {row.median_abs_error:.0%}, worst"
                    f" {row.max_abs_error:.0%}"
                    + ("" if pd.isna(given) else f"; given each run's compute {given:.0%}")
                    + ")"
                )
    table["label"] = table["setup"].map(lambda s: labels.get(s, s))
    order = _setup_order(table["setup"])
    low = float(min(table["measured_s"].min(), table["predicted_s"].min())) * 0.8
    high = float(max(table["measured_s"].max(), table["predicted_s"].max())) * 1.25
    scale = alt.Scale(type="log", domain=[low, high], nice=False)
    x = alt.X("measured_s:Q", title="measured step (s, median)", scale=scale)
    y = alt.Y("predicted_s:Q", title="predicted step (s)", scale=scale)
    guide = pd.DataFrame(
        [
            {"measured_s": v, "predicted_s": v * f, "line": name}
            for f, name in ((1.0, "y = x"), (1 + target, f"+{target:.0%}"), (1 - target, f"-{target:.0%}"))
            for v in (low, high)
        ]
    )
    guides = (
        alt.Chart(guide)
        .mark_line(color="gray", strokeWidth=1)
        .encode(
            x=x,
            y=y,
            detail="line:N",
            strokeDash=alt.condition(alt.datum.line == "y = x", alt.value([1, 0]), alt.value([4, 4])),
        )
    )
    points = (
        alt.Chart(table)
        .mark_point(filled=True, size=60, opacity=0.8)
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "label:N",
                title="framework",
                scale=alt.Scale(domain=[labels.get(s, s) for s in order], scheme="tableau10"),
                legend=alt.Legend(labelLimit=480),
            ),
            shape=alt.Shape("network:N", title="network"),
            tooltip=[
                "run_id:N",
                "network:N",
                "world_size:Q",
                alt.Tooltip("measured_s:Q", format=".4f"),
                alt.Tooltip("predicted_s:Q", format=".4f"),
                alt.Tooltip("error:Q", format="+.0%"),
                alt.Tooltip("predicted_compute_s:Q", format=".4f"),
                alt.Tooltip("predicted_comm_s:Q", format=".4f"),
                "compute_source:N",
            ],
        )
    )
    return alt.layer(guides, points).properties(
        width=380, height=320, title="Held-out runs on emulated networks: predicted vs measured step time"
    )


def latency_chart(sensitivity: pd.DataFrame) -> alt.TopLevelMixin:
    """Efficiency at the largest node count and the 50% node count against per-hop latency."""
    if sensitivity.empty:
        return empty_chart("Latency sensitivity: no framework to project")
    network = str(sensitivity["network"].iloc[0])
    top = int(sensitivity["nodes"].max())
    setups = _setup_order(sensitivity["setup"])
    models = _model_order(sensitivity["model"])
    x = alt.X("latency_us:Q", title="per-hop latency (us)", scale=alt.Scale(type="log", domain=[1, 100]))
    base = alt.Chart(sensitivity).mark_line(point=True).encode(x=x, color=_colour(setups))
    efficiency = (
        base.encode(
            y=alt.Y("efficiency:Q", title=f"efficiency at {top} nodes", scale=alt.Scale(domain=[0, 1])),
            tooltip=["setup:N", "latency_us:Q", alt.Tooltip("efficiency:Q", format=".0%"), "nodes50:Q"],
        )
        .properties(width=_WIDTH, height=_HEIGHT)
        .facet(column=alt.Column("model:N", title=None, sort=models))
    )
    n50 = (
        base.transform_filter("isValid(datum.nodes50)")
        .encode(
            y=alt.Y("nodes50:Q", title="nodes at 50% efficiency", scale=alt.Scale(type="log", base=2)),
            tooltip=["setup:N", "latency_us:Q", "nodes50:Q"],
        )
        .properties(width=_WIDTH, height=_HEIGHT)
        .facet(column=alt.Column("model:N", title=None, sort=models))
    )
    return alt.vconcat(efficiency, n50).properties(
        title=f"Sensitivity to latency on {network}'s bandwidth (missing points: never below 50% up to {top} nodes)"
    )


def commbench_chart(cells: pd.DataFrame, predicted: pd.DataFrame) -> alt.TopLevelMixin:
    """Micro-benchmark medians (points) and the fitted model (lines), time vs size per world."""
    if cells.empty:
        return empty_chart("Micro-benchmarks: none run in this study")
    data = cells.copy()
    data["series"] = data["library"] + " " + data["op"]
    data["kind"] = "measured"
    lines = predicted.assign(series=predicted["library"] + " " + predicted["op"], kind="model")
    both = pd.concat([data, lines], ignore_index=True)
    both["world"] = both["world"].astype(int).astype(str)
    both = both[both["nbytes"] > 0]
    if both.empty:
        return empty_chart("Micro-benchmarks: no sized operations")
    x = alt.X("nbytes:Q", title="bytes per rank", scale=alt.Scale(type="log"))
    y = alt.Y("seconds:Q", title="seconds per operation", scale=alt.Scale(type="log"))
    colour = alt.Color("world:N", title="world (ranks, workers, executors)")
    shape = alt.Shape("network:N", title="network")
    points = (
        alt.Chart()
        .transform_filter(alt.datum.kind == "measured")
        .mark_point(filled=True, size=35)
        .encode(
            x=x,
            y=y,
            color=colour,
            shape=shape,
            tooltip=["series:N", "world:N", "network:N", "nbytes:Q", "seconds:Q"],
        )
    )
    fitted = (
        alt.Chart()
        .transform_filter(alt.datum.kind == "model")
        .mark_line()
        .encode(x=x, y=y, color=colour, detail="network:N")
    )
    return (
        alt.layer(points, fitted, data=both)
        .properties(width=_WIDTH, height=_HEIGHT)
        .facet(facet=alt.Facet("series:N", title=None), columns=3)
        .properties(title="Communication micro-benchmarks (points: medians) and the fitted model (lines)")
    )


def make_perfmodel_figures(
    out: dict[str, dict[str, str]],
    projection: pd.DataFrame,
    runs: pd.DataFrame,
    validation: pd.DataFrame,
    summary: pd.DataFrame,
    sensitivity: pd.DataFrame,
    cells: pd.DataFrame,
    predicted: pd.DataFrame,
    host_model: pd.DataFrame | None = None,
    efficiency50: pd.DataFrame | None = None,
) -> None:
    """Draw the figures ``out`` names (``dlscale.outputs.PERFMODEL_ALL_FIGURES``) into its paths."""
    builders: dict[str, Callable[[], alt.TopLevelMixin]] = {
        "projection": lambda: projection_chart(projection, runs, host_model, efficiency50),
        "validation": lambda: validation_chart(validation, summary),
        "latency_sensitivity": lambda: latency_chart(sensitivity),
        "commbench": lambda: commbench_chart(cells, predicted),
    }
    draw(builders, out)


_BAND_COLUMNS = [
    "panel",
    "name",
    "nodes",
    "communication",
    "error",
    "series",
    "efficiency",
    "efficiency_upper",
    "kind",
]


def _pattern_heading(row: pd.Series) -> str:
    name = PATTERN_NAMES.get(str(row["pattern"]), str(row["pattern"]))
    return (
        f"{name}: {int(row['systems'])} systems, {int(row['points'])} points, median |error|"
        f" {float(row['median_abs_error']):.3f}, worst {float(row['max_abs_error']):.3f} ({row['worst']})"
    )


def replay_chart(
    table: pd.DataFrame, summary: pd.DataFrame | None = None, note: str = ""
) -> alt.TopLevelMixin:
    """Predicted (line) against measured (points) efficiency of every replayed system per node
    count, one panel a system, coloured by its communication pattern; the band where the
    replay has one (``efficiency_lower``/``efficiency_upper``, with a study's calibration).
    The title gives each pattern's median and worst |error| (``summary``) and ``note``."""
    if table.empty:
        return empty_chart("Against the published record: no system file replayed")
    data = table.copy()
    data["communication"] = [PATTERN_NAMES.get(str(p), str(p)) for p in data["pattern"]]
    data["panel"] = data["name"].astype(str) + " (" + data["communication"] + ")"
    patterns = [PATTERN_NAMES[p] for p in PATTERN_NAMES if PATTERN_NAMES[p] in set(data["communication"])]
    patterns += sorted(set(data["communication"]) - set(patterns))
    pattern_scale = alt.Scale(domain=patterns, scheme="tableau10")
    colour = alt.Color("communication:N", title="pattern", scale=pattern_scale)
    long = data.melt(
        id_vars=["panel", "name", "nodes", "communication", "error"],
        value_vars=["measured_efficiency", "predicted_efficiency"],
        var_name="series",
        value_name="efficiency",
    )
    long["series"] = long["series"].str.removesuffix("_efficiency")
    long = long[long["efficiency"].notna()]
    band = data[data["efficiency_lower"].notna() & data["efficiency_upper"].notna()]
    top = int(data["nodes"].max())
    low = int(data["nodes"].min())
    ticks = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if low <= n <= top] or [low, top]
    x = alt.X(
        "nodes:Q",
        title="nodes",
        scale=alt.Scale(type="log", base=2, domain=[low, max(top, low * 2)], nice=False),
        axis=alt.Axis(values=ticks, format="d"),
    )
    y = alt.Y(
        "efficiency:Q", title="efficiency (x the anchor's)", scale=alt.Scale(domain=[0, 1.2], clamp=True)
    )
    dash = alt.StrokeDash(
        "series:N",
        title="efficiency",
        scale=alt.Scale(domain=["predicted", "measured"], range=[[1, 0], [4, 3]]),
    )
    tooltip = ["name:N", "series:N", "nodes:Q", alt.Tooltip("efficiency:Q", format=".3f"),
               alt.Tooltip("error:Q", format="+.3f")]  # fmt: skip
    both = pd.concat(
        [
            long.assign(kind="point"),
            band.assign(kind="band", series="predicted", efficiency=band["efficiency_lower"])[_BAND_COLUMNS],
        ],
        ignore_index=True,
    )
    points = alt.datum.kind == "point"
    layers = [
        alt.Chart()
        .transform_filter(points)
        .mark_line(strokeWidth=1.5)
        .encode(x=x, y=y, color=colour, strokeDash=dash, detail="series:N"),
        alt.Chart()
        .transform_filter(points)
        .mark_point(filled=True, size=40)
        .encode(
            x=x,
            y=y,
            color=colour,
            shape=alt.Shape(
                "series:N", title="efficiency", scale=alt.Scale(domain=["predicted", "measured"])
            ),
            tooltip=tooltip,
        ),
        alt.Chart()
        .transform_filter(alt.datum.kind == "band")
        .mark_area(opacity=0.2)
        .encode(
            x=x,
            y=y,
            y2="efficiency_upper:Q",
            color=colour,
        ),
    ]
    lines = ["Against the published record: predicted (solid) and measured (dashed) efficiency"]
    if summary is not None and not summary.empty:
        lines += [_pattern_heading(row) for _, row in summary.iterrows()]
    if note:
        lines.append(note)
    panels = list(dict.fromkeys(data.sort_values(["pattern", "name"])["panel"]))
    return (
        alt.layer(*layers, data=both)
        .properties(width=_WIDTH, height=_HEIGHT)
        .facet(facet=alt.Facet("panel:N", title=None, sort=panels), columns=4)
        .properties(title=alt.TitleParams(text=lines))
    )


def make_replay_figure(
    out: dict[str, str], table: pd.DataFrame, summary: pd.DataFrame | None = None, note: str = ""
) -> None:
    """Draw ``replay_chart`` into ``out`` (format -> path), through ``dlscale.figures.charts.draw``."""
    draw({REPLAY_FIGURE: lambda: replay_chart(table, summary, note)}, {REPLAY_FIGURE: out})
