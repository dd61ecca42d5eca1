"""TensorFlow's benchmark entry (driver side of benchmarks.tensorflow_worker).

The worker gets the launcher's own TensorFlow environment (intra/inter-op pools, oneDNN:
``dlscale.runners.tensorflow.launcher.tf_env``), so its runner arm runs with a rank's
settings. Communication: two MultiWorkerMirroredStrategy workers, ring all-reduce over gRPC
(``dlscale.commbench.tensorflow``, whose parameter-server rows are left out here).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import CommJob, FrameworkBench, TrainingJob, commbench_arm, worker_training

#: TensorFlow's C++ log below warnings (the bench reads its workers' stdout only).
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def training(job: TrainingJob) -> list[dict[str, Any]]:
    from dlscale.base.sysutil import free_port
    from dlscale.runners.plan import LaunchContext
    from dlscale.runners.tensorflow.launcher import tf_env

    with tempfile.TemporaryDirectory(prefix="dlscale-bench-tf-env-") as tmp:
        ctx = LaunchContext(spec=job.spec, python=str(job.python), data=job.data, work_dir=Path(tmp),
                            master_port=free_port())  # fmt: skip
        return worker_training(job, {**tf_env(ctx), **QUIET})


def comm(job: CommJob) -> list[dict[str, Any]]:
    """The ring all-reduce of each size between two workers (its ``tf-ring`` rows)."""
    args = ["--worlds", 2, "--tf-worlds", 2, "--sizes", *job.sizes]
    return commbench_arm(job, "tensorflow", args, "tf-ring", "allreduce", QUIET)


BENCH = FrameworkBench("tensorflow", training=training, comm=comm, comm_label="TF MWMS ring (gRPC)")
