"""The Caffe runner's CPU settings: its BLAS and the BLAS's threads, described for the run record.

``describe`` is what the launcher records in run_start (``settings``, with the thread
variables every rank gets). Caffe computes convolutions as im2col + one BLAS SGEMM per
sample and inner products as SGEMM, so its speed is its BLAS's: the option ``blas``
(``openblas``, the default, or ``mkl``: one Caffe build per BLAS, ``caffe_build``) and
``threads_per_rank``. No caffe import: the launcher imports this from the workflow's python.
"""

from __future__ import annotations

from typing import Any

from dlscale.envs import CAFFE_BUILD_SCRIPT, SPEC_DIR, parse_lock
from dlscale.runspec import RunSpec


def blas(spec: RunSpec) -> str:
    """The run's BLAS: the option, or (absent / null) OpenBLAS."""
    return str(spec.options.get("blas") or "openblas")


def blas_library(blas: str) -> str:
    """The BLAS library a Caffe build of ``blas`` links, with its version where the repository
    pins it (MKL: the PyPI wheel in envs/caffe-mkl.lock; OpenBLAS: Debian's, as installed)."""
    if blas == "mkl":
        try:
            version = parse_lock(SPEC_DIR / "caffe-mkl.lock")["mkl"]["version"]
        except (OSError, KeyError, ValueError):
            version = "unknown"
        return f"Intel MKL {version} (PyPI mkl, envs/caffe-mkl.lock; libmkl_rt, Intel OpenMP threads)"
    return f"OpenBLAS (Debian libopenblas-dev, pthread build; {CAFFE_BUILD_SCRIPT.name} BLAS=open)"


def describe(spec: RunSpec) -> dict[str, Any]:
    """The settings a run of ``spec`` uses, by name: the BLAS and its threads.

    Every BLAS gets the rank's threads (the launcher's environment: OPENBLAS_NUM_THREADS,
    MKL_NUM_THREADS, OMP_NUM_THREADS = threads_per_rank); the variable named is the one the
    run's BLAS reads.
    """
    name = blas(spec)
    variable = "MKL_NUM_THREADS" if name == "mkl" else "OPENBLAS_NUM_THREADS"
    return {
        "engine": "caffe (CPU_ONLY, im2col + BLAS)",
        "blas": name,
        "blas_library": blas_library(name),
        "blas_threads": {variable: spec.threads_per_rank},
    }
