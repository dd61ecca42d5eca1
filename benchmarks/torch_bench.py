"""torch's benchmark entry (driver side of benchmarks.torch_worker), and the FLOP counts
every framework is charged (torch's FlopCounterMode on the study's models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import (
    REPO,
    CommJob,
    FrameworkBench,
    commbench_arm,
    run_json_lines,
    worker_command,
    worker_env,
    worker_training,
)


def comm(job: CommJob) -> list[dict[str, Any]]:
    """gloo's all-reduce of each size between two ranks (``dlscale.commbench.torch``)."""
    return commbench_arm(job, "torch", ["--worlds", 2, "--sizes", *job.sizes], "gloo", "allreduce")


BENCH = FrameworkBench("torch", training=worker_training, comm=comm, comm_label="torch gloo")


def flops(python: Path, models: list[str], timeout_s: float = 600) -> list[dict[str, Any]]:
    """FLOPs per sample of each model, counted by torch (the count every framework uses)."""
    cmd = worker_command(python, "torch", "flops", models=models)
    return run_json_lines(cmd, worker_env(1), timeout_s, cwd=REPO)
