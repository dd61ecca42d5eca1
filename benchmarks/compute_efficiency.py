"""Benchmark 2: achieved training FLOP/s against the measured matmul peak (roofline fraction).

FLOPs per sample are counted once, from the torch models (forward + backward, FlopCounter
Mode) and written to ``flops.csv``: every framework trains the same architectures (their
parameter counts are tested equal), so every framework is charged the same count. The peak
is a float32 matmul with the same threads, measured in the same process right beside each
training repeat (``training_raw.csv``), so each repeat's fraction is a side-by-side ratio.
``fraction`` uses wall time on both sides; ``cpu_fraction`` uses process CPU time on both
sides (FLOP per core-second with one thread), which a noisy neighbour does not distort.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from benchmarks.common import write_csv
from benchmarks.harness_overhead import arm_values, paired_values
from benchmarks.stats import roofline_fraction, summarize


def flops_table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    return table[["model", "flops_per_sample", "parameters", "gradient_bytes", "counter"]]


def paired_fractions(
    group: pd.DataFrame, arm: str, rate: str, peak: str, flops_per_sample: float
) -> list[float]:
    """Roofline fractions of ``arm`` against the peak measured in the same repeat."""
    samples, peaks = paired_values(group, arm, "peak", rate, peak)
    return [roofline_fraction(s, flops_per_sample, p) for s, p in zip(samples, peaks, strict=True)]


def efficiency_table(raw: pd.DataFrame, flops: pd.DataFrame) -> pd.DataFrame:
    """Per framework and model: achieved FLOP/s of the runner and of the bare loop vs peak."""
    per_sample = dict(zip(flops["model"], flops["flops_per_sample"], strict=True))
    rows = []
    for (framework, model), group in raw.groupby(["framework", "model"], sort=False):
        peaks = arm_values(group, "peak", "peak_flops")
        runner = arm_values(group, "runner", "samples_per_s")
        count = float(per_sample[model])
        # Each repeat's own peak (paired by repeat: an arm that failed in a repeat drops
        # only that repeat's fraction).
        fractions = paired_fractions(group, "runner", "samples_per_s", "peak_flops", count)
        bare_fractions = paired_fractions(group, "bare", "samples_per_s", "peak_flops", count)
        cpu_fractions = paired_fractions(group, "runner", "samples_per_cpu_s", "peak_flops_cpu", count)
        rows.append(
            {
                "framework": framework,
                "model": model,
                "threads": int(group["threads"].iloc[0]),
                "flops_per_sample": count,
                **summarize([s * count for s in runner]).as_row("achieved_flops"),
                **summarize(peaks).as_row("peak_flops"),
                **summarize(fractions).as_row("fraction"),
                **summarize(bare_fractions).as_row("bare_fraction"),
                **summarize(cpu_fractions).as_row("cpu_fraction"),
            }
        )
    return pd.DataFrame(rows)


def write(raw: pd.DataFrame, flops: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    write_csv(flops, out_dir / "flops.csv")
    table = efficiency_table(raw, flops)
    write_csv(table, out_dir / "compute_efficiency.csv")
    return table
