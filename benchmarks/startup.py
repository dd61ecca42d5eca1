"""Benchmark 5: start-up cost per framework, apart from training time.

A tiny single-rank study run goes through the real launcher (``python -m dlscale.launch``,
as the training rule runs it). From its events: ``to_first_step_s`` = launcher start to
the start of the first iteration (interpreter, framework import, data, model, runtime
set-up: Spark's JVM, TF tracing), ``warmup_s`` = the warm-up iterations, and ``startup_s``
= their sum, the launcher's own figure (start to first timed iteration). At small scale
these dominate a run's wall time, so the study reports them separately from step times.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.common import FrameworkBench, bench_spec, launch_run, log, startup_fields, write_csv
from benchmarks.stats import summarize
from dlscale import catalog
from dlscale.runspec import RunSpec

#: Start-up is measured on the smallest model: its steps are short, so start-up stands out.
STARTUP_MODELS = (min(catalog.MODEL_NAMES, key=catalog.PARAMETERS.__getitem__),)
STARTUP_COLUMNS = ("startup_s", "to_first_step_s", "warmup_s", "median_step_s", "wall_s")


def startup_once(entry: FrameworkBench, spec: RunSpec, data: Path, tmp: Path, repeat: int) -> dict:
    """One launch of ``spec``; its start-up figures."""
    python = entry.python()
    work = tmp / f"{entry.name}-{spec.model}-{repeat}"
    events = launch_run(python, spec, data, work, spec.timeout_s + 60, entry.launch_env(python))
    return {"framework": entry.name, "model": spec.model, "repeat": repeat, **startup_fields(events)}


def reused_rows(training_raw: pd.DataFrame | None, framework: str, models: tuple[str, ...]) -> list[dict]:
    """Start-up rows of ``framework`` taken from runner arms that ran through the launcher.

    BigDL's runner arm is a whole ``dlscale.launch`` run (a JVM + Spark start each), the same
    start-up this benchmark would pay for again; its rows carry the figures already.
    """
    if training_raw is None or "to_first_step_s" not in training_raw:
        return []
    mine = training_raw[
        (training_raw["framework"] == framework)
        & (training_raw["arm"] == "runner")
        & training_raw["model"].isin(models)
        & training_raw["to_first_step_s"].notna()
    ]
    columns = ["framework", "model", "repeat", *STARTUP_COLUMNS]
    return [
        {**{k: row[k] for k in columns}, "source": "training runner arm"} for row in mine.to_dict("records")
    ]


def measure(
    entries: list[FrameworkBench], studies: Mapping[str, dict[str, Any]], data: dict[str, Path], repeats: int,
    models: tuple[str, ...] = STARTUP_MODELS, training_raw: pd.DataFrame | None = None,
) -> pd.DataFrame:  # fmt: skip
    """Repeats alternate between frameworks (one run each per repeat); a framework whose
    training runner arms already went through the launcher (``training_raw``) is not run again."""
    rows = []
    reused = {e.name: reused_rows(training_raw, e.name, models) for e in entries}
    for entry in entries:
        if reused[entry.name]:
            log(f"start-up {entry.name}: from its {len(reused[entry.name])} training runner-arm launches")
            rows += reused[entry.name]
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-startup-") as name:
        for repeat in range(repeats):
            for entry in entries:
                if repeat >= entry.repeats(repeats, "startup") or reused[entry.name]:
                    continue
                for model in models:
                    spec = bench_spec(
                        studies, entry.name, model, iterations=(int(studies[model]["warmup"]), 5)
                    )
                    log(f"start-up repeat {repeat + 1}/{repeats}: {entry.name}/{model}")
                    row = startup_once(entry, spec, data[spec.dataset], Path(name), repeat)
                    rows.append({**row, "source": "launch"})
    return pd.DataFrame(rows)


def startup_table(raw: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (framework, model), group in raw.groupby(["framework", "model"], sort=False):
        rows.append(
            {
                "framework": framework,
                "model": model,
                **summarize(group["startup_s"]).as_row("startup_s"),
                **summarize(group["to_first_step_s"]).as_row("to_first_step_s"),
                **summarize(group["warmup_s"]).as_row("warmup_s"),
                "median_step_s": summarize(group["median_step_s"]).median,
                "startup_in_steps": summarize(group["startup_s"] / group["median_step_s"]).median,
                "runs": len(group),
                "source": ", ".join(sorted(set(group.get("source", pd.Series(["launch"])).fillna("launch")))),
            }
        )
    return pd.DataFrame(rows)


def write(raw: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    write_csv(raw, out_dir / "startup_raw.csv")
    table = startup_table(raw)
    write_csv(table, out_dir / "startup.csv")
    return table
