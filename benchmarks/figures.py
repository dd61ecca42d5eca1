"""Two benchmark figures (altair): training efficiency (harness ratio and roofline fraction
per model) and communication bandwidth per size, each as html and png, saved atomically by
the study's own saver (``dlscale.figures.charts.save_chart``)."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from dlscale import catalog
from dlscale.figures.charts import save_chart
from dlscale.thresholds import threshold

FORMATS = (".html", ".png")


def _save(chart: alt.TopLevelMixin, stem: Path) -> list[Path]:
    chart = chart.configure(background="white")
    paths = [stem.with_suffix(suffix) for suffix in FORMATS]
    for path in paths:
        save_chart(chart, path)
    return paths


def _ranged_bars(table: pd.DataFrame, prefix: str, title: str, target: float | None) -> alt.TopLevelMixin:
    data = table.assign(
        value=table[f"{prefix}_median"], lo=table[f"{prefix}_low"], hi=table[f"{prefix}_high"]
    )
    x = alt.X("model:N", sort=list(catalog.MODEL_NAMES), title=None)
    colour = alt.Color("framework:N", sort=list(catalog.FRAMEWORK_NAMES))
    bars = (
        alt.Chart(data)
        .mark_bar(opacity=0.8)
        .encode(x=x, xOffset="framework:N", y=alt.Y("value:Q", title=title), color=colour)
    )
    ticks = alt.Chart(data).mark_rule(color="black").encode(x=x, xOffset="framework:N", y="lo:Q", y2="hi:Q")
    layers = [bars, ticks]
    if target is not None:
        layers.append(
            alt.Chart(pd.DataFrame({"target": [target]}))
            .mark_rule(strokeDash=[4, 4], color="red")
            .encode(y="target:Q")
        )
    return alt.layer(*layers).properties(width=260, height=200, title=title)


def training_chart(overhead: pd.DataFrame, compute: pd.DataFrame) -> alt.TopLevelMixin:
    return alt.hconcat(
        _ranged_bars(overhead, "ratio", "runner / bare loop throughput", threshold("harness_ratio").value),
        # Wall time: the one measure every framework has (BigDL's work is in JVMs, no CPU time).
        _ranged_bars(compute, "fraction", "achieved FLOP/s / matmul peak (wall time)", None),
    ).properties(title="Training: harness overhead and roofline fraction (median and interval)")


def comm_chart(raw: pd.DataFrame) -> alt.TopLevelMixin:
    data = raw.groupby(["transport", "nbytes"], as_index=False)["bytes_per_s"].median()
    data["MB"] = data["nbytes"] / 1e6
    data["MB/s"] = data["bytes_per_s"] / 1e6
    return (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X("MB:Q", scale=alt.Scale(type="log"), title="gradient size (MB)"),
            y=alt.Y("MB/s:Q", scale=alt.Scale(type="log"), title="bandwidth (MB/s, median)"),
            color=alt.Color("transport:N"),
        )
        .properties(width=360, height=240, title="Gradient synchronisation on loopback: bandwidth per size")
    )


def write(out_dir: Path) -> list[Path]:
    """Draw whichever figures the csv files allow; returns the files written."""
    written: list[Path] = []
    overhead, compute = out_dir / "harness_overhead.csv", out_dir / "compute_efficiency.csv"
    if overhead.exists() and compute.exists():
        written += _save(training_chart(pd.read_csv(overhead), pd.read_csv(compute)), out_dir / "training")
    comm = out_dir / "comm_raw.csv"
    if comm.exists() and pd.read_csv(comm).shape[0]:
        written += _save(comm_chart(pd.read_csv(comm)), out_dir / "communication")
    return written
