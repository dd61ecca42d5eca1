"""Synthetic micro-benchmark sweeps timed exactly as dlscale.perfmodel's patterns say (with
optional noise): the inputs of the scaling-model tests, whose fits must recover ``TRUE``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale import perfmodel as pm

SIZES = [1024, 16384, 262144, 4 << 20, 64 << 20]


def bench_rows(
    library: str, op: str, world: int, nbytes: int, seconds: float, noise: float, rng: Any, repeats: int = 5
) -> list[dict[str, Any]]:
    return [
        {
            "framework": "x", "library": library, "op": op, "network": "host", "world": world,
            "nbytes": nbytes, "parts": 1, "model": "", "algorithm": "default", "repeat": r,
            "seconds": seconds * (1 + noise * rng.standard_normal()), "host_cores": 2,
        }
        for r in range(repeats)
    ]  # fmt: skip


TRUE = {
    "gloo": {"c": 50e-6, "alpha": 20e-6, "gamma": 1 / 1.2e9},
    "tf-ring": {"c": 300e-6, "alpha": 150e-6, "gamma": 1 / 0.4e9},
    "mpi": {"c": 8e-6, "alpha": 6e-6, "gamma": 1 / 1.5e9},
    "tf-ps": {"c": 2e-3, "per_worker": 5e-4, "gamma_worker": 1e-9, "gamma_server": 2e-9},
    "job": {"c": 8e-3, "per_task": 2e-3},
    "shuffle": {"c": 30e-3, "alpha": 1e-3, "gamma": 1 / 0.3e9},
    "tcp": {"alpha": 12e-6, "gamma": 1 / 3e9},
}


#: Every ring set-up's library (the catalog's) but MPI's, whose all-reduce is timed by its
#: algorithm's own terms below.
RING_LIBRARIES = sorted(
    {lib for setup, lib in catalog.SETUP_LIBRARIES.items() if catalog.SETUP_PATTERNS[setup] == catalog.RING}
    - {"mpi"}
)


def synthetic_bench(
    noise: float = 0.0,
    seed: int = 0,
    sizes: list[int] = SIZES,
    repeats: int = 5,
    job_slope: float | None = None,
) -> pd.DataFrame:
    """Every library's sweep, timed exactly as the model says (times relative noise)."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for world in (2, 4, 8):
        rho = max(1.0, world / 2)
        for s in sizes:
            m, b = pm.ring_terms(world, s)
            for lib in RING_LIBRARIES:
                t = TRUE.get(lib, TRUE["gloo"])  # a ring library without its own: gloo's costs
                rows += bench_rows(
                    lib,
                    "allreduce",
                    world,
                    s,
                    rho * (t["c"] + m * t["alpha"] + b * t["gamma"]),
                    noise,
                    rng,
                    repeats,
                )
            t = TRUE["mpi"]
            m2, b2 = pm.mpi_algorithm_terms(pm.openmpi_allreduce_algorithm(world, s), world, s)
            rows += bench_rows(
                "mpi",
                "allreduce",
                world,
                s,
                rho * (t["c"] + m2 * t["alpha"] + b2 * t["gamma"]),
                noise,
                rng,
                repeats,
            )
    for workers in (1, 2, 4):
        t = TRUE["tf-ps"]
        for s in sizes:
            seconds = (
                t["c"] + workers * t["per_worker"] + s * t["gamma_worker"] + workers * s * t["gamma_server"]
            )
            rows += bench_rows("tf-ps", "pushpull", workers, s, seconds, noise, rng, repeats)
    job = dict(TRUE["job"], **({} if job_slope is None else {"per_task": job_slope}))
    for executors in (1, 2, 4, 8):
        rho = max(1.0, executors / 2)
        rows += bench_rows(
            "spark", "job", executors, 0, job["c"] + executors * job["per_task"], noise, rng, max(repeats, 10)
        )
        t = TRUE["shuffle"]
        for s in sizes[2:]:
            seconds = t["c"] + rho * (
                (executors - 1) * t["alpha"] + (executors - 1) / executors * s * t["gamma"]
            )
            rows += bench_rows("spark", "shuffle", executors, s, seconds, noise, rng, repeats)
    for s in sizes:
        rows += bench_rows(
            "tcp", "pingpong", 2, s, TRUE["tcp"]["alpha"] + s * TRUE["tcp"]["gamma"], noise, rng, repeats
        )
    return pd.DataFrame(rows)  # fmt: skip
