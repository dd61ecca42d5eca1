"""Benchmark 3: each framework's gradient synchronisation bandwidth per model gradient size.

For every model's gradient size (parameters x 4 bytes, from ``flops.csv``), three kinds of
transfer between two processes on loopback are measured, in rotated order per repeat,
each by its ``dlscale.commbench`` module (the micro-benchmarks the scaling model
calibrates on: one implementation of each transfer, one set of numbers):

* ``tcp``: a plain TCP ping-pong (``dlscale.commbench.tcp``, half a round trip): the
  host's raw loopback bandwidth;
* ``mpi``: Open MPI's ``MPI_Allreduce`` of one flat buffer (``dlscale.commbench.caffe``,
  in the caffe venv: mpi4py against Debian's Open MPI);
* each registered framework's own synchronisation (its entry's ``comm``: torch gloo
  all-reduce, TensorFlow's ring, Caffe's per-blob Allreduce, BigDL's Spark exchange).

One repeat of an arm is one run of its module with ``inner`` timed operations a size; the
repeat's value is their median. Bandwidth is bytes / seconds of one operation (for an
all-reduce of 2 ranks this "algorithm bandwidth" is also the bus bandwidth: each rank
sends and receives the whole size once). Ratios framework / tcp and framework / mpi are
paired per repeat (same repeat, same neighbours); ``comm_efficiency.csv`` holds their
medians with intervals over repeats (``benchmarks.stats``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.common import CommJob, FrameworkBench, commbench_arm, framework_python, log, write_csv
from benchmarks.stats import bandwidth, ratio_summary, summarize
from benchmarks.timing import arm_order

RAW_COLUMNS = ("repeat", "transport", "library", "op", "nbytes", "moved", "seconds", "bytes_per_s")


def tcp(job: CommJob) -> list[dict[str, Any]]:
    """The raw network: a TCP ping-pong of each size (any venv: this one)."""
    return commbench_arm(job, "tcp", ["--sizes", *job.sizes], "tcp", "pingpong")


def mpi(job: CommJob) -> list[dict[str, Any]]:
    """Open MPI's all-reduce of one flat buffer of each size between two ranks."""
    return commbench_arm(job, "caffe", ["--worlds", 2, "--sizes", *job.sizes], "mpi", "allreduce")


#: The reference arms: name -> (the venv whose python runs it, the arm).
REFERENCES = {"tcp": (None, tcp), "mpi": ("caffe", mpi)}


def measure(
    entries: list[FrameworkBench],
    sizes: list[int],
    repeats: int,
    inner: int = 3,
    timeout_s: float = 600,
    models: dict[int, str] | None = None,
) -> pd.DataFrame:
    """One row per repeat x transport x size."""
    arms: dict[str, Any] = {}
    for name, (venv, arm) in REFERENCES.items():
        python = Path(sys.executable) if venv is None else framework_python(venv)
        job = CommJob(name, python, sizes, inner, timeout_s, dict(models or {}))
        arms[name] = lambda arm=arm, job=job: arm(job)
    limits = {}
    for entry in entries:
        if entry.comm is not None:
            job = CommJob(entry.name, entry.python(), sizes, inner, timeout_s, dict(models or {}))
            arms[entry.name] = lambda entry=entry, job=job: entry.comm(job)
            limits[entry.name] = entry.repeats(repeats, "comm")
    rows = []
    for repeat in range(repeats):
        for name in arm_order(repeat, list(arms)):
            if repeat >= limits.get(name, repeats):
                continue  # a slow framework's fewer repeats; pairs form on the repeats it ran
            log(f"communication repeat {repeat + 1}/{repeats}: {name}")
            for row in arms[name]():
                seconds = float(row["seconds"])
                rows.append(
                    {"repeat": repeat, "transport": name, "library": row["library"], "op": row["op"],
                     "nbytes": int(row["nbytes"]), "moved": int(row["moved"]), "seconds": seconds,
                     "bytes_per_s": bandwidth(int(row["moved"]), seconds)}
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
