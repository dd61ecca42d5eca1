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

import math
import sys
from typing import Any

import pandas as pd

from benchmarks import worker_cli
from benchmarks.common import REPO, CommJob, FrameworkBench, log, run_json_lines, worker_env, write_csv
from benchmarks.mpi_env import ensure_mpi, mpirun_argv
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
    reference = worker_cli.arguments("allreduce", inner=inner, sizes=sizes)
    tcp = [sys.executable, "-m", "benchmarks.tcp_stream", *reference]
    mpi = [*mpirun_argv(mpirun), str(mpi_python), "-m", "benchmarks.mpi_allreduce", *reference]
    arms: dict[str, Any] = {
        "tcp": lambda: run_json_lines(tcp, worker_env(1), timeout_s, cwd=REPO),
        "mpi": lambda: run_json_lines(mpi, worker_env(1), timeout_s, cwd=REPO),
    }
    limits = {}
    for entry in entries:
        if entry.allreduce is not None:
            job = CommJob(entry.name, entry.python(), sizes, inner, timeout_s, dict(models or {}))
            arms[entry.name] = lambda entry=entry, job=job: entry.allreduce(job)
            limits[entry.name] = entry.repeats(repeats, "comm")
    rows = []
    for repeat in range(repeats):
        for name in arm_order(repeat, list(arms)):
            if repeat >= limits.get(name, repeats):
                continue  # a slow framework's fewer repeats; pairs form on the repeats it ran
            log(f"communication repeat {repeat + 1}/{repeats}: {name}")
            for row in arms[name]():
                nbytes, seconds = int(row["nbytes"]), float(row["seconds"])
                rows.append(
                    {"repeat": repeat, "transport": name, "nbytes": nbytes, "seconds": seconds,
                     "bytes_per_s": bandwidth(nbytes, seconds)}
                )  # fmt: skip
    return pd.DataFrame(rows, columns=list(RAW_COLUMNS))


def by_repeat(group: pd.DataFrame, transport: str) -> dict[int, float]:
    """One transport's bandwidth per repeat: the key the ratios pair on (a framework with
    fewer repeats pairs with the references of the repeats it ran, not of others)."""
    rows = group[group["transport"] == transport]
    return {int(r): float(v) for r, v in zip(rows["repeat"], rows["bytes_per_s"], strict=True)}


def comm_table(raw: pd.DataFrame, flops: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Per framework and model: its bandwidth, the TCP and MPI bandwidths, paired ratios."""
    models = dict(zip(flops["gradient_bytes"].astype(int), flops["model"], strict=True))
    rows = []
    for framework in frameworks:
        for nbytes, group in raw.groupby("nbytes", sort=True):
            own, tcp, mpi = (by_repeat(group, t) for t in (framework, "tcp", "mpi"))
            if not own:
                continue
            keys = sorted(own)
            rows.append(
                {
                    "framework": framework,
                    "model": models.get(int(nbytes), ""),
                    "nbytes": int(nbytes),
                    **summarize(own.values()).as_row("framework_bytes_per_s"),
                    **summarize(tcp.values()).as_row("tcp_bytes_per_s"),
                    **summarize(mpi.values()).as_row("mpi_bytes_per_s"),
                    **ratio_summary([own[k] for k in keys], [tcp.get(k, math.nan) for k in keys]).as_row(
                        "vs_tcp"
                    ),
                    **ratio_summary([own[k] for k in keys], [mpi.get(k, math.nan) for k in keys]).as_row(
                        "vs_mpi"
                    ),
                }
            )
    return pd.DataFrame(rows)


def write(raw: pd.DataFrame, flops: pd.DataFrame, frameworks: list[str], out_dir: Any) -> pd.DataFrame:
    write_csv(raw, out_dir / "comm_raw.csv")
    table = comm_table(raw, flops, frameworks)
    write_csv(table, out_dir / "comm_efficiency.csv")
    log(f"communication: {len(table)} rows")
    return table
