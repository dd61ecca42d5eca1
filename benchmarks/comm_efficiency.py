"""Benchmark 3: each framework's gradient synchronisation bandwidth per model gradient size.

For every model's gradient size (parameters x 4 bytes, from ``flops.csv``), three kinds of
transfer between two processes on loopback are measured, in rotated order per repeat:

* ``tcp``: a plain TCP stream (benchmarks.tcp_stream): the host's raw loopback bandwidth;
* ``mpi``: mpi4py Allreduce over Open MPI's TCP transport on loopback;
* each registered framework's own synchronisation (torch: gloo all_reduce of the flat
  gradient, as the runner does it).

Bandwidth is bytes / seconds of one operation (for an all-reduce of 2 ranks this "algorithm
bandwidth" is also the bus bandwidth: each rank sends and receives the whole size once).
Ratios framework / tcp and framework / mpi are paired per repeat (same repeat, same
neighbours); ``comm_efficiency.csv`` holds medians with min/max.
"""

from __future__ import annotations

import sys
from typing import Any

import pandas as pd

from benchmarks.common import REPO, log, run_json_lines, worker_env
from benchmarks.mpi_env import ensure_mpi, mpirun_argv
from benchmarks.registry import CommJob, FrameworkBench
from benchmarks.stats import arm_order, bandwidth, ratio_summary, summarize

RAW_COLUMNS = ("repeat", "transport", "nbytes", "seconds", "bytes_per_s")


def measure(
    entries: list[FrameworkBench],
    sizes: list[int],
    repeats: int,
    inner: int = 3,
    timeout_s: float = 600,
    models: dict[int, str] | None = None,
) -> pd.DataFrame:
    """One row per repeat x transport x size."""
    mpirun, mpi_python = ensure_mpi()
    arms: dict[str, Any] = {
        "tcp": lambda: run_json_lines(
            [
                sys.executable,
                "-m",
                "benchmarks.tcp_stream",
                "--inner",
                str(inner),
                "--sizes",
                *map(str, sizes),
            ],
            worker_env(1),
            timeout_s,
            cwd=REPO,
        ),
        "mpi": lambda: run_json_lines(
            [
                *mpirun_argv(mpirun),
                str(mpi_python),
                "-m",
                "benchmarks.mpi_allreduce",
                "--inner",
                str(inner),
                "--sizes",
                *map(str, sizes),
            ],  # fmt: skip
            worker_env(1),
            timeout_s,
            cwd=REPO,
        ),
    }
    for entry in entries:
        if entry.allreduce is not None:
            job = CommJob(entry.python(), sizes, inner, timeout_s, dict(models or {}))
            arms[entry.name] = lambda entry=entry, job=job: entry.allreduce(job)
    rows = []
    for repeat in range(repeats):
        for name in arm_order(repeat, list(arms)):
            log(f"communication repeat {repeat + 1}/{repeats}: {name}")
            for row in arms[name]():
                nbytes, seconds = int(row["nbytes"]), float(row["seconds"])
                rows.append(
                    {"repeat": repeat, "transport": name, "nbytes": nbytes, "seconds": seconds,
                     "bytes_per_s": bandwidth(nbytes, seconds)}
                )  # fmt: skip
    return pd.DataFrame(rows, columns=list(RAW_COLUMNS))


def comm_table(raw: pd.DataFrame, flops: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Per framework and model: its bandwidth, the TCP and MPI bandwidths, paired ratios."""
    models = dict(zip(flops["gradient_bytes"].astype(int), flops["model"], strict=True))
    rows = []
    for framework in frameworks:
        for nbytes, group in raw.groupby("nbytes", sort=True):

            def series(transport: str, group: pd.DataFrame = group) -> list[float]:
                return [
                    float(v)
                    for v in group[group["transport"] == transport].sort_values("repeat")["bytes_per_s"]
                ]

            own, tcp, mpi = series(framework), series("tcp"), series("mpi")
            if not own:
                continue
            rows.append(
                {
                    "framework": framework,
                    "model": models.get(int(nbytes), ""),
                    "nbytes": int(nbytes),
                    **summarize(own).as_row("framework_bytes_per_s"),
                    **summarize(tcp).as_row("tcp_bytes_per_s"),
                    **summarize(mpi).as_row("mpi_bytes_per_s"),
                    **ratio_summary(own, tcp).as_row("vs_tcp"),
                    **ratio_summary(own, mpi).as_row("vs_mpi"),
                }
            )
    return pd.DataFrame(rows)


def write(raw: pd.DataFrame, flops: pd.DataFrame, frameworks: list[str], out_dir: Any) -> pd.DataFrame:
    raw.to_csv(out_dir / "comm_raw.csv", index=False)
    table = comm_table(raw, flops, frameworks)
    table.to_csv(out_dir / "comm_efficiency.csv", index=False)
    log(f"communication: {len(table)} rows")
    return table
