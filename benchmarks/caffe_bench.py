"""Caffe's benchmark entry (driver side of benchmarks.caffe_worker).

pycaffe is not pip-installable: the worker finds it as the Caffe runs do
(``dlscale.runners.caffe.launcher``), in the build the workflow's ``caffe_build`` rule makes
(``scripts/build_caffe.sh``, cached per machine; its marker is named by
``dlscale.envs.caffe_build_marker``). Communication: one MPI_Allreduce per learnable blob
of each model under ``mpirun -n 2``, as the runner's GradientAllreduce does it
(``dlscale.commbench.caffe``'s ``allreduce-blobs``; mpi4py only, no pycaffe).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ENVS_DIR,
    CommJob,
    FrameworkBench,
    TrainingJob,
    commbench_arm,
    log,
    worker_training,
)


def caffe_home(python: Path) -> Path:
    """The Caffe build tree, found as a run finds it; built (as the caffe_build rule
    builds it) when there is none yet."""
    from dlscale.envs import CAFFE_BUILD_SCRIPT, caffe_build_marker
    from dlscale.runners.caffe.launcher import CaffeNotFound, read_marker
    from dlscale.runners.caffe.launcher import caffe_home as find_home

    marker = caffe_build_marker(ENVS_DIR, None)  # the default study names no caffe.home
    env = {**os.environ, "DLSCALE_CAFFE_MARKER": str(marker)} if marker.exists() else os.environ
    try:
        return find_home({}, env, str(python))
    except CaffeNotFound:
        log(f"building Caffe with {CAFFE_BUILD_SCRIPT.name} (once per machine)")
        subprocess.run(["bash", str(CAFFE_BUILD_SCRIPT), str(python), str(marker)], check=True, timeout=3600)
        return read_marker(marker)


def launch_env(python: Path) -> dict[str, str]:
    """How a study run (dlscale.launch) of this bench finds Caffe."""
    return {"DLSCALE_CAFFE_HOME": str(caffe_home(python))}


def caffe_env(python: Path) -> dict[str, str]:
    """A worker's extra environment: pycaffe importable, Caffe's glog below warnings."""
    from dlscale.runners.caffe.launcher import caffe_env as runner_env

    return {**runner_env(caffe_home(python), {}), "GLOG_minloglevel": "2"}


def training(job: TrainingJob) -> list[dict[str, Any]]:
    return worker_training(job, caffe_env(job.python))


#: The flat all-reduce the blob pattern's run also times (``--sizes`` takes one): a float.
NO_FLAT_SIZES = (4,)


def comm(job: CommJob) -> list[dict[str, Any]]:
    """Caffe-MPI's per-blob all-reduce of each model's gradient between two ranks."""
    models = [job.models[size] for size in job.sizes if size in job.models]
    if not models:
        return []
    args = ["--worlds", 2, "--sizes", *NO_FLAT_SIZES, "--models", *models]
    return commbench_arm(job, "caffe", args, "mpi", "allreduce-blobs")


BENCH = FrameworkBench(
    "caffe",
    training=training,
    comm=comm,
    comm_label="Caffe MPI_Allreduce per blob",
    launch_env=launch_env,
)
