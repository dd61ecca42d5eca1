"""The JAX runner's tunable CPU settings: their names, the variables that carry them, the record.

XLA's CPU client sizes its intra-op thread pool from the variable ``NPROC`` where set, else
from the CPUs the process may run on (``DefaultThreadPoolSize`` in XLA's CPU client; JAX
has no thread-count option), so every rank gets ``NPROC`` = the run's threads per rank, as
torch's ``set_num_threads``. What JAX documents for CPU threading besides is XLA's
``--xla_cpu_multi_thread_eigen`` (Eigen's matrix kernels split over that pool, or one
thread each), set through ``XLA_FLAGS`` before jaxlib starts: option ``multi_thread_eigen``
(tuned). The cross-process collectives are gloo's TCP ones (``collectives``: the only
implementation that works here; JAX's other, MPI, needs an MPI library the venv lacks).
``env`` is what every rank gets, ``describe`` what the launcher records in run_start.
No JAX import: the launcher imports this from the workflow's python.
"""

from __future__ import annotations

from typing import Any

from dlscale.runspec import RunSpec


def xla_flags(spec: RunSpec) -> str:
    """The run's XLA_FLAGS (XLA reads them once, when the CPU client starts)."""
    return f"--xla_cpu_multi_thread_eigen={'true' if spec.options['multi_thread_eigen'] else 'false'}"


def env(spec: RunSpec) -> dict[str, str]:
    """The variables that carry the settings to every rank."""
    return {"XLA_FLAGS": xla_flags(spec), "NPROC": str(spec.threads_per_rank), "JAX_PLATFORMS": "cpu"}


def describe(spec: RunSpec) -> dict[str, Any]:
    """The settings a run of ``spec`` uses, by name."""
    return {
        "engine": "xla-cpu",
        "multi_thread_eigen": bool(spec.options["multi_thread_eigen"]),
        "XLA_FLAGS": xla_flags(spec),
        "collectives": spec.options["collectives"],
        "intra_op_threads": spec.threads_per_rank,  # NPROC: XLA's intra-op pool
    }
