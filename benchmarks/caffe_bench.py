"""Caffe's benchmark entry (driver side of benchmarks.caffe_worker).

pycaffe is not pip-installable: the worker finds it as the Caffe runs do
(``dlscale.runners.caffe.launcher``), in the build the workflow's ``caffe_build`` rule makes
(``scripts/build_caffe.sh``, cached per machine; its marker is named by
``dlscale.envs.caffe_build_marker``). Communication: one MPI_Allreduce per learnable blob
under ``mpirun -n 2``, as the runner's GradientAllreduce does it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ENVS_DIR,
    REPO,
    CommJob,
    FrameworkBench,
    TrainingJob,
    log,
    run_json_lines,
    worker_command,
    worker_env,
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


def allreduce(job: CommJob) -> list[dict[str, Any]]:
    from benchmarks.mpi_env import ensure_mpi, mpirun_argv

    mpirun, _ = ensure_mpi()
    models = [job.models[size] for size in job.sizes if size in job.models]
    cmd = [
        *mpirun_argv(mpirun),
        *worker_command(job.python, "caffe", "allreduce", inner=job.inner, models=models),
    ]
    return run_json_lines(cmd, worker_env(1, caffe_env(job.python)), job.timeout_s, cwd=REPO)


BENCH = FrameworkBench(
    "caffe",
    training=training,
    allreduce=allreduce,
    comm_label="Caffe MPI_Allreduce per blob",
    launch_env=launch_env,
)
