"""Driver side of the TensorFlow and Caffe benchmarks (benchmarks.tf_worker, caffe_worker).

The same shape as torch_bench: ``training(job)`` runs the runner, the bare loop and the
matmul peak side by side in one worker process of the framework's venv; ``allreduce(job)``
runs the framework's gradient synchronisation between two processes on loopback, as its
runner does it (TensorFlow: MWMS ring all-reduce of the flat gradient over gRPC; Caffe:
one MPI_Allreduce per learnable blob, under mpirun).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from benchmarks.common import REPO, run_json_lines, run_ranks_json_lines, worker_env

if TYPE_CHECKING:
    from benchmarks.registry import CommJob, TrainingJob


def tf_training(job: TrainingJob) -> list[dict[str, Any]]:
    cmd = [
        str(job.python), "-m", "benchmarks.tf_worker", "training", "--spec-json", json.dumps(job.spec),
        "--data", str(job.data), "--repeats", str(job.repeats),
    ]  # fmt: skip
    env = worker_env(int(job.spec["threads_per_rank"]), {"TF_CPP_MIN_LOG_LEVEL": "2"})
    return run_json_lines(cmd, env, job.timeout_s, cwd=REPO)


def tf_allreduce(job: CommJob) -> list[dict[str, Any]]:
    from dlscale.launch import free_port

    ports = [free_port(), free_port()]
    env = worker_env(1, {"TF_CPP_MIN_LOG_LEVEL": "2"})
    cmds = [
        [str(job.python), "-m", "benchmarks.tf_worker", "allreduce", "--rank", str(rank),
         "--ports", *map(str, ports), "--inner", str(job.inner), "--sizes", *map(str, job.sizes)]
        for rank in (0, 1)
    ]  # fmt: skip
    return run_ranks_json_lines(cmds, env, job.timeout_s)


def caffe_env(python: Any, threads: int) -> dict[str, str]:
    """A worker's environment with pycaffe importable, found as the Caffe runs find it.

    Without a build yet, scripts/build_caffe.sh makes one (as the workflow's caffe_build
    rule does: cached per machine, so later calls only check it) and writes the marker
    beside the venvs, where the runs look for it.
    """
    import subprocess
    from pathlib import Path

    from dlscale.runners.caffe.launcher import MARKER_NAME, CaffeNotFound, caffe_home
    from dlscale.runners.caffe.launcher import caffe_env as runner_env

    try:
        home = caffe_home({}, os.environ, str(python))
    except CaffeNotFound:
        marker = Path(python).absolute().parent.parent.parent / MARKER_NAME
        subprocess.run(["bash", str(REPO / "scripts" / "build_caffe.sh"), str(python), str(marker)],
                       check=True, timeout=3600)  # fmt: skip
        home = caffe_home({}, os.environ, str(python))
    extra = runner_env(home, {})
    extra["GLOG_minloglevel"] = "2"
    return worker_env(threads, extra)


def caffe_training(job: TrainingJob) -> list[dict[str, Any]]:
    cmd = [
        str(job.python), "-m", "benchmarks.caffe_worker", "training", "--spec-json", json.dumps(job.spec),
        "--data", str(job.data), "--repeats", str(job.repeats),
    ]  # fmt: skip
    return run_json_lines(
        cmd, caffe_env(job.python, int(job.spec["threads_per_rank"])), job.timeout_s, cwd=REPO
    )


def caffe_allreduce(job: CommJob) -> list[dict[str, Any]]:
    from benchmarks.mpi_env import ensure_mpi, mpirun_argv

    mpirun, _ = ensure_mpi()
    models = [job.models[size] for size in job.sizes if size in job.models]
    cmd = [*mpirun_argv(mpirun), str(job.python), "-m", "benchmarks.caffe_worker", "allreduce",
           "--inner", str(job.inner), "--models", *models]  # fmt: skip
    return run_json_lines(cmd, caffe_env(job.python, 1), job.timeout_s, cwd=REPO)
