"""Benchmark 1: each runner's single-rank throughput against a bare loop of its framework.

Writes ``training_raw.csv`` (one row per arm and repeat: the runner, the bare loop and the
matmul peak, measured side by side in one process set-up; compute_efficiency reads it too)
and ``harness_overhead.csv`` (per framework and model: the paired ratio runner / bare,
median with its interval over repeats, against ``dlscale.thresholds``' ``harness_ratio``; where a framework also ran
its bare loop in its plainest deployment, ``bare_local`` (BigDL: local mode against the
runner's standalone cluster), the deployment's ratio bare / bare_local beside it).

Every framework trains every model asked for (``--models``; all of the catalog's by
default), whatever the default study's ``models_per_framework`` leaves out of the study:
the benchmark measures the harness, which wraps every model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.common import (
    FAILED,
    BenchError,
    FrameworkBench,
    TrainingJob,
    bench_spec,
    log,
    training_repeats,
    write_csv,
)
from benchmarks.stats import interval_verdict, ratio_summary, summarize
from dlscale import catalog
from dlscale.thresholds import threshold

#: The harness's reference: runner / bare throughput at least its value, decided on the
#: ratio's interval over repeats (``stats.interval_verdict``).
HARNESS = threshold("harness_ratio")
RAW_COLUMNS = (
    "framework", "model", "batch", "threads", "engine", "repeat", "arm",
    "samples_per_s", "samples_per_cpu_s", "samples_per_cpu_q_s", "self_timed_samples_per_s", "peak_flops", "peak_flops_cpu",
    "step_s", "compute_s", "comm_s", "startup_s", "to_first_step_s", "warmup_s", "median_step_s", "wall_s",
    "failure", "warning",
)  # fmt: skip
#: An ImageNet-sized model's worker gets this many times the time-out: Caffe's ResNet-50
#: (3 repeats, two arms of 4 steps) passed 900 s on a host at load 15-25.
IMAGENET_TIMEOUT_FACTOR = 3


def measure(
    entries: list[FrameworkBench],
    models: list[str],
    studies: Mapping[str, dict[str, Any]],
    data: dict[str, Path],
    repeats: int,
    timeout_s: float = 900,
) -> pd.DataFrame:
    """Run every framework's training arms for every model; one row per arm and repeat."""
    rows: list[dict[str, Any]] = []
    for entry in entries:
        if entry.training is None:
            continue
        python = entry.python()
        for model in models:
            spec = bench_spec(studies, entry.name, model)
            mnist = catalog.model(model).mnist_sized
            asked = entry.repeats(repeats, "training" if mnist else "training-imagenet")
            mine_repeats = training_repeats(model, asked)
            log(f"training {entry.name}/{model}: runner vs bare vs peak, {mine_repeats} repeats")
            limit = timeout_s if spec.mnist_sized else timeout_s * IMAGENET_TIMEOUT_FACTOR
            job = TrainingJob(python, spec, data[spec.dataset], mine_repeats, limit)
            try:
                # The engine every arm ran (BigDL's; benchmarks.common.runnable_options).
                engine = {"engine": spec.options.get("engine")}
                found = [{"framework": entry.name, **engine, **row} for row in entry.training(job)]
            except BenchError as err:  # recorded with its reason; the other cells still run
                log(f"training {entry.name}/{model} failed: {err}")
                reason = " ".join(str(err).split())[:300]
                found = [{"framework": entry.name, "model": model, "batch": spec.batch,
                          "threads": spec.threads_per_rank, "repeat": -1, "arm": FAILED, "failure": reason}]  # fmt: skip
            rows += found
    raw = pd.DataFrame(rows)
    for name in RAW_COLUMNS:
        if name not in raw:
            raw[name] = pd.NA
    return raw[list(RAW_COLUMNS)]


def arm_values(group: pd.DataFrame, arm: str, column: str) -> list[float]:
    """One arm's values in repeat order (the pairing key of the ratios)."""
    rows = group[group["arm"] == arm].sort_values("repeat")
    # NaN where an arm has no such value (BigDL has no CPU time): a column that is empty
    # in every row of a run (one framework benchmarked alone) holds pd.NA, not NaN.
    return [float(v) for v in pd.to_numeric(rows[column], errors="coerce")]


def paired_values(
    group: pd.DataFrame, a: str, b: str, column: str, column_b: str | None = None
) -> tuple[list[float], list[float]]:
    """Arm ``a``'s ``column`` and arm ``b``'s ``column_b`` (default the same) in the repeats
    where both ran, in repeat order (the pairing key of the ratios): an arm that failed in
    one repeat takes that repeat out of their ratio, not the others out of step."""
    left = group.loc[group["arm"] == a, ["repeat", column]].rename(columns={column: "a"})
    right = group.loc[group["arm"] == b, ["repeat", column_b or column]].rename(
        columns={column_b or column: "b"}
    )
    both = left.merge(right, on="repeat").sort_values("repeat")
    numeric = [pd.to_numeric(both[side], errors="coerce") for side in ("a", "b")]
    return [float(v) for v in numeric[0]], [float(v) for v in numeric[1]]


def failure_of(group: pd.DataFrame) -> Any:
    """Why a framework x model's training benchmark failed (NA when it did not)."""
    if "failure" not in group:
        return pd.NA
    return "; ".join(str(v) for v in group.loc[group["arm"] == FAILED, "failure"]) or pd.NA


def overhead_table(raw: pd.DataFrame) -> pd.DataFrame:
    """Per framework and model: runner and bare throughput and their paired ratio."""
    rows = []
    for (framework, model), group in raw.groupby(["framework", "model"], sort=False):
        runner = arm_values(group, "runner", "samples_per_s")
        bare = arm_values(group, "bare", "samples_per_s")
        ratio = ratio_summary(*paired_values(group, "runner", "bare", "samples_per_s"))
        cpu_ratio = ratio_summary(*paired_values(group, "runner", "bare", "samples_per_cpu_s"))
        # The low quantile of the per-step CPU times (timing.quantile_gap): the steadiest
        # measure on a shared host, where neighbours inflate wall and median CPU time alike.
        cpu_q_ratio = ratio_summary(*paired_values(group, "runner", "bare", "samples_per_cpu_q_s"))
        # The deployment's own cost, where the bare loop also ran in the plainest one.
        local = arm_values(group, "bare_local", "samples_per_s")
        deployment = (
            ratio_summary(*paired_values(group, "bare", "bare_local", "samples_per_s"))
            if local
            else summarize([])
        )
        rows.append(
            {
                "framework": framework,
                "model": model,
                "batch": int(group["batch"].iloc[0]),
                "threads": int(group["threads"].iloc[0]),
                **summarize(runner).as_row("runner_samples_per_s"),
                **summarize(bare).as_row("bare_samples_per_s"),
                **ratio.as_row("ratio"),
                **cpu_ratio.as_row("cpu_ratio"),
                **cpu_q_ratio.as_row("cpu_q_ratio"),
                "target": HARNESS.value,
                "verdict": interval_verdict(ratio, HARNESS),
                "verdict_cpu": interval_verdict(cpu_ratio, HARNESS),
                "verdict_cpu_q": interval_verdict(cpu_q_ratio, HARNESS),
                **summarize(local).as_row("bare_local_samples_per_s"),
                **deployment.as_row("deployment_ratio"),
                "failure": failure_of(group),
            }
        )
    return pd.DataFrame(rows)


def step_breakdown(raw: pd.DataFrame) -> pd.DataFrame:
    """Where an iteration's time goes, per framework, model and arm, for arms whose
    framework splits its own step (BigDL's log: step = compute + synchronisation).

    Medians over repeats of: ``iteration_s`` (the loop's wall time per iteration, from the
    throughput), ``step_s`` (the framework's own step time), ``compute_s`` and ``sync_s``
    (step - compute), and ``between_s`` = iteration - step (what happens between steps).
    """
    columns = [
        "framework",
        "model",
        "arm",
        "repeats",
        "iteration_s",
        "step_s",
        "compute_s",
        "sync_s",
        "between_s",
    ]
    if "step_s" not in raw:
        return pd.DataFrame(columns=columns)
    split = raw[raw["step_s"].notna() & raw["arm"].isin(["runner", "bare", "bare_local"])]
    rows = []
    for (framework, model, arm), group in split.groupby(["framework", "model", "arm"], sort=False):
        iteration = [float(b) / float(t) for b, t in zip(group["batch"], group["samples_per_s"], strict=True)]
        steps = [float(v) for v in group["step_s"]]
        rows.append(
            {
                "framework": framework,
                "model": model,
                "arm": arm,
                "repeats": len(group),
                "iteration_s": summarize(iteration).median,
                "step_s": summarize(steps).median,
                "compute_s": summarize(group["compute_s"]).median,
                "sync_s": summarize(group["comm_s"]).median,
                "between_s": summarize([i - t for i, t in zip(iteration, steps, strict=True)]).median,
            }
        )
    return pd.DataFrame(rows, columns=columns)


def failures(raw: pd.DataFrame) -> list[str]:
    """``framework/model: reason`` of every training benchmark that failed."""
    if "failure" not in raw:
        return []
    failed = raw[raw["arm"] == FAILED]
    return [f"{r.framework}/{r.model}: {r.failure}" for r in failed.itertuples()]


def write(raw: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    write_csv(raw, out_dir / "training_raw.csv")
    table = overhead_table(raw)
    write_csv(table, out_dir / "harness_overhead.csv")
    write_csv(step_breakdown(raw), out_dir / "step_breakdown.csv")
    return table
