"""What the models learned, in two figures: held-out quality against training time, and the
two efficiencies side by side.

``quality``: every run's evaluations (held-out quality against the timed training seconds
so far, ``train_s``), one line a run, coloured by framework, a panel per model and node
count; the target, where the study set one, as a rule. A framework whose model stays at
chance shows as a flat line there, however fast its steps.

``efficiencies``: per model, throughput efficiency (samples/s at N nodes over N x the
baseline's, ``dlscale.analysis.cells``) beside time-to-target efficiency (the baseline's time to
target over N x the N-node time, ``dlscale.analysis.convergence.time_to_target_efficiency``), with
intervals: where the second falls below the first, more nodes stop shortening training
even while samples/s still scale (weak scaling grows the global batch, and a larger batch
may need more samples to reach the same quality).
"""

from __future__ import annotations

from collections.abc import Callable

import altair as alt
import pandas as pd

from dlscale.analysis import convergence
from dlscale.figures.charts import (
    FRAMEWORK_ORDER,
    MODEL_ORDER,
    draw,
    empty_chart,
    framework_colour,
    nodes_axis,
    ordered,
)

#: The figures this module draws (rule figures), in report order.
QUALITY_FIGURES: tuple[str, ...] = ("quality", "efficiencies")

_WIDTH, _HEIGHT = 200, 160


def quality_table(evals: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The evaluations the quality figure shows: the ok runs' evaluations of their model's
    primary metric, each with the label of its panel (model, node count, metric)."""
    if evals is None or evals.empty or runs.empty:
        return pd.DataFrame(columns=[*(evals.columns if evals is not None else []), "panel"])
    ok_ids = set(runs.loc[runs["status"].eq("ok"), "run_id"]) if "status" in runs else set()
    data = evals[evals["run_id"].isin(ok_ids)].copy()
    primary = runs.drop_duplicates("model").set_index("model")["quality_metric"].to_dict()
    data = data[
        [metric == primary.get(model) for model, metric in zip(data["model"], data["metric"], strict=True)]
    ]
    data["panel"] = (
        data["model"].astype(str)
        + ", "
        + data["nodes"].astype(str)
        + " node(s), "
        + data["metric"].astype(str)
    )
    return data


def quality_chart(evals: pd.DataFrame, runs: pd.DataFrame) -> alt.TopLevelMixin:
    """Held-out quality against training seconds, one line per run, per model and nodes."""
    if evals is None or evals.empty:
        return empty_chart("Held-out quality: no run recorded an evaluation")
    data = quality_table(evals, runs)
    if data.empty:
        return empty_chart("Held-out quality: no ok run recorded an evaluation")
    frameworks = ordered(data["framework"], FRAMEWORK_ORDER)
    tooltip = ["run_id:N", "iteration:Q", "metric:N", alt.Tooltip("value:Q", format=".4f"), "train_s:Q"]
    x = alt.X("train_s:Q", title="timed training seconds")
    y = alt.Y("value:Q", title="held-out quality")
    colour = framework_colour(frameworks)
    lines = alt.Chart().mark_line(opacity=0.7).encode(x=x, y=y, color=colour, detail="run_id:N")
    # Hollow points shaped by framework: runs of the same work on frameworks of the same
    # speed (torch's and Caffe's AutoEncoder) draw the same line, and one colour would hide
    # the other; two shapes at one place show both.
    points = (
        alt.Chart()
        .mark_point(filled=False, size=45, strokeWidth=1.5)
        .encode(
            x=x,
            y=y,
            color=colour,
            shape=alt.Shape("framework:N", title="framework", scale=alt.Scale(domain=frameworks)),
            detail="run_id:N",
            tooltip=tooltip,
        )
    )
    layers = [lines, points]
    targets = runs.dropna(subset=["target_value"]) if "target_value" in runs else runs.iloc[0:0]
    if len(targets):
        rule_data = targets.drop_duplicates("model")[["model", "target_value"]]
        data = data.merge(rule_data, on="model", how="left")
        layers.append(alt.Chart().mark_rule(strokeDash=[4, 4], color="grey").encode(y="target_value:Q"))
    order = [p for m in MODEL_ORDER for p in sorted(data.loc[data["model"].eq(m), "panel"].unique())]
    return (
        alt.layer(*layers, data=data)
        .properties(width=_WIDTH, height=_HEIGHT)
        .facet(facet=alt.Facet("panel:N", title=None, sort=order), columns=4)
        .resolve_scale(x="independent", y="independent")
        .properties(
            title="Held-out quality vs timed training seconds (one line per run, points shaped by framework; dashed: the target)"
        )
    )


def efficiencies_table(cells: pd.DataFrame) -> pd.DataFrame:
    """The rows the efficiencies figure shows: ``convergence.efficiencies`` of cells.csv."""
    if cells is None or cells.empty:
        return pd.DataFrame(columns=["framework", "model", "nodes", "kind", "value", "low", "high"])
    return convergence.efficiencies(cells)


def every_panel(data: pd.DataFrame, row: str, column: str) -> pd.DataFrame:
    """``data`` with one empty row (no value) for each ``row`` x ``column`` panel it has no
    row for. Vega-Lite sorts the panels of a row x column facet by the data's sort index,
    and a panel with no data has none, so it is laid out first and pushes every other
    panel's marks one place on, under the next panel's headers (a model without a time to
    target drew LeNet's throughput efficiencies under "time-to-target efficiency"). With a
    row in every panel, each panel keeps its place; the empty row draws nothing."""
    present = set(zip(data[row], data[column], strict=True))
    missing = [
        {row: r, column: c}
        for r in pd.unique(data[row])
        for c in pd.unique(data[column])
        if (r, c) not in present
    ]
    return (
        pd.concat([data, pd.DataFrame(missing, columns=[row, column])], ignore_index=True)
        if missing
        else data
    )


def efficiencies_missing(cells: pd.DataFrame, both: pd.DataFrame) -> list[str]:
    """Title lines for the models with throughput efficiencies but no time-to-target ones,
    and why (their empty panel would otherwise say nothing): no quality target set for the
    model, or no two node counts of one framework both reached it."""
    kinds = both.groupby("model")["kind"].agg(set) if not both.empty else pd.Series(dtype=object)
    lines = []
    for model in ordered(both["model"], MODEL_ORDER):
        if convergence.EFFICIENCY_KINDS[1] in kinds.get(model, set()):
            continue
        mine = cells[cells["model"].eq(model)] if "model" in cells else cells.iloc[0:0]
        targeted = "target_value" in mine and mine["target_value"].notna().any()
        why = (
            "no two node counts of one framework reached its target"
            if targeted
            else "the study sets no quality target for it"
        )
        lines.append(f"no time-to-target efficiency for {model}: {why}")
    return lines


def efficiencies_chart(cells: pd.DataFrame) -> alt.TopLevelMixin:
    """Throughput efficiency and time-to-target efficiency vs nodes, per model; the title
    names each model whose time-to-target panel is empty, and why."""
    if cells is None or cells.empty:
        return empty_chart("Efficiencies: no cells to plot")
    both = efficiencies_table(cells)
    if both.empty:
        return empty_chart("Efficiencies: no set-up with two node counts")
    frameworks = ordered(both["framework"], FRAMEWORK_ORDER)
    x = nodes_axis(both)
    colour = framework_colour(frameworks)
    y = alt.Y("value:Q", title="efficiency")
    points = (
        alt.Chart()
        .mark_point(filled=True, size=60)
        .encode(
            x=x,
            y=y,
            color=colour,
            tooltip=[
                "framework:N",
                "nodes:Q",
                "kind:N",
                alt.Tooltip("value:Q", format=".3f"),
                "low:Q",
                "high:Q",
            ],
        )
    )
    lines = alt.Chart().mark_line().encode(x=x, y=y, color=colour, detail="framework:N")
    bars = (
        alt.Chart()
        .mark_rule(strokeWidth=2)
        .encode(x=x, y=alt.Y("low:Q", title="efficiency"), y2="high:Q", color=colour)
    )
    ideal = alt.Chart().mark_rule(strokeDash=[4, 4], color="grey").encode(y=alt.datum(1.0))
    models = ordered(both["model"], MODEL_ORDER)
    return (
        alt.layer(ideal, bars, lines, points, data=every_panel(both, "model", "kind"))
        .properties(width=_WIDTH, height=_HEIGHT)
        .facet(
            row=alt.Row("model:N", title=None, sort=models),
            column=alt.Column("kind:N", title=None, sort=list(convergence.EFFICIENCY_KINDS)),
        )
        .properties(
            title=alt.TitleParams(
                [
                    "Throughput efficiency beside time-to-target efficiency (medians with intervals; 1 = ideal)",
                    *efficiencies_missing(cells, both),
                ]
            )
        )
    )


def make_quality_figures(
    runs: pd.DataFrame, cells: pd.DataFrame, evals: pd.DataFrame, out: dict[str, dict[str, str]]
) -> None:
    """Draw the figures ``out`` names (``QUALITY_FIGURES``) in every format it lists, from
    the tables the aggregation wrote (runs, cells.csv, evals.csv)."""
    builders: dict[str, Callable[[], alt.TopLevelMixin]] = {
        "quality": lambda: quality_chart(evals, runs),
        "efficiencies": lambda: efficiencies_chart(cells),
    }
    draw(builders, out)
