"""The Caffe runner's CPU settings: its BLAS and the BLAS's threads, described for the run record.

``describe`` is what the launcher records in run_start (``settings``, with the thread
variables every rank gets). Caffe computes convolutions as im2col + one BLAS SGEMM per
sample and inner products as SGEMM, so its speed is its BLAS's: the option ``blas``
(``openblas``, the default, ``blis`` or ``mkl``: one Caffe build linked to the generic
``libblas.so.3``, the implementation chosen at run time, ``blas.py``) and
``threads_per_rank``. What a rank really loaded is measured by the rank itself (run_start
``measured.blas``); this is what the launcher meant it to load. No caffe import: the
launcher imports this from the workflow's python.
"""

from __future__ import annotations

import os
from typing import Any

from dlscale.envs import SPEC_DIR, parse_lock
from dlscale.runners.caffe import blas as caffe_blas
from dlscale.runspec import RunSpec


def blas(spec: RunSpec) -> str:
    """The run's BLAS: the option, or (absent / null) OpenBLAS."""
    return str(spec.options.get("blas") or "openblas")


def blas_library(blas: str) -> str:
    """The BLAS implementation a run of ``blas`` is given, with its version where the
    repository pins it (MKL: the PyPI wheel in envs/caffe-mkl.lock; OpenBLAS and BLIS:
    Debian's, as installed) and the file ``libblas.so.3`` is linked to on this machine."""
    if blas == "mkl":
        try:
            version = parse_lock(SPEC_DIR / "caffe-mkl.lock")["mkl"]["version"]
        except (OSError, KeyError, ValueError):
            version = "unknown"
        name = f"Intel MKL {version} (PyPI mkl, envs/caffe-mkl.lock; libmkl_rt, Intel OpenMP threads)"
    elif blas == "blis":
        name = "BLIS (Debian libblis4-pthread 0.9)"
    else:
        name = "OpenBLAS (Debian libopenblas0-pthread)"
    try:
        return f"{name}: {caffe_blas.library(blas, os.environ)}"
    except caffe_blas.BlasNotInstalled:
        return f"{name}: not installed here"


def describe(spec: RunSpec) -> dict[str, Any]:
    """The settings a run of ``spec`` uses, by name: the BLAS and its threads.

    Every BLAS gets the rank's threads (the launcher's environment: OPENBLAS_NUM_THREADS,
    MKL_NUM_THREADS, OMP_NUM_THREADS and, for BLIS, BLIS_NUM_THREADS = threads_per_rank);
    the variable named is the one the run's BLAS reads.
    """
    name = blas(spec)
    return {
        "engine": "caffe (CPU_ONLY, im2col + BLAS)",
        "blas": name,
        "blas_library": blas_library(name),
        "blas_threads": {caffe_blas.THREAD_VARIABLES[name]: spec.threads_per_rank},
    }
