"""The per-layer time figure of one model, from its ``caffe time`` events.

One horizontal bar per layer, in net order, split into forward and backward time: where
one training iteration's compute goes inside Caffe (for AlexNet the convolutions and the
first fully connected layer; for ResNet-50 the many 3x3 convolutions and the batch
normalisations around them). Runs in the workflow environment (pandas, altair); the
layer types come from the generated net (``models.layer_types``), so no caffe import.

It lives on the figures floor (it draws; the runner only measures) and reads the layer
types from the Caffe runner's net writer, which is plain text generation.

``python -m dlscale.figures.layers --events E --model M --out F.html F.svg F.png``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from dlscale.catalog import MODEL_NAMES
from dlscale.figures.charts import save_chart
from dlscale.parse.caffe import layer_table
from dlscale.runners.caffe.models import layer_types


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def layer_frame(events: list[dict[str, Any]], model: str) -> pd.DataFrame:
    """Long table: one row per layer and phase (forward/backward), with the layer's type."""
    types = layer_types(model)
    rows = []
    for row in layer_table(events):
        for phase in ("forward", "backward"):
            rows.append(
                {
                    "layer": row["layer"],
                    "order": row["order"],
                    "type": types.get(row["layer"], "?"),
                    "phase": phase,
                    "phase_order": 0 if phase == "forward" else 1,
                    "ms": row[f"{phase}_ms"],
                    "share": row["share"],
                }
            )
    return pd.DataFrame(rows)


def layer_chart(events: list[dict[str, Any]], model: str) -> alt.TopLevelMixin:
    """Stacked forward/backward bars per layer, titled with the benchmark's setting."""
    frame = layer_frame(events, model)
    bench = next((e for e in events if e.get("event") == "benchmark"), {})
    title = (
        f"Caffe per-layer time: {model}, batch {bench.get('batch')}, "
        f"{bench.get('forward_backward_ms', float('nan')):.1f} ms forward-backward "
        f"(mean of {bench.get('iterations')} iterations)"
    )
    order = list(frame.drop_duplicates("layer").sort_values("order")["layer"])
    height = max(120, 11 * len(order))
    chart = (
        alt.Chart(frame, title=title)
        .mark_bar()
        .encode(
            y=alt.Y("layer:N", sort=order, title="layer (net order)", axis=alt.Axis(labelFontSize=8)),
            x=alt.X("ms:Q", stack="zero", title="time per iteration (ms)"),
            color=alt.Color("phase:N", sort=["forward", "backward"], title="phase"),
            order=alt.Order("phase_order:Q"),  # forward first, as it runs
            tooltip=[
                "layer",
                "type",
                "phase",
                alt.Tooltip("ms:Q", format=".3f"),
                alt.Tooltip("share:Q", format=".1%"),
            ],
        )
        .properties(width=420, height=height)
    )
    return chart.configure(background="white").configure_title(fontSize=13, anchor="start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", required=True, type=Path)
    parser.add_argument("--model", required=True, choices=MODEL_NAMES)
    parser.add_argument("--out", required=True, nargs="+", type=Path)
    args = parser.parse_args(argv)
    chart = layer_chart(read_jsonl(args.events), args.model)
    for target in args.out:
        save_chart(chart, target)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
