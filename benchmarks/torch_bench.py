"""The torch entry of the registry: driver side of benchmarks.torch_worker.

Kept apart from ``registry`` so that each framework's owner edits a file of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchmarks.common import REPO, run_json_lines, run_ranks_json_lines, worker_env

if TYPE_CHECKING:
    from benchmarks.registry import CommJob, TrainingJob


def training(job: TrainingJob) -> list[dict[str, Any]]:
    """Runner vs bare loop vs matmul peak, alternated per repeat in one torch process."""
    import json

    cmd = [
        str(job.python), "-m", "benchmarks.torch_worker", "training",
        "--spec-json", json.dumps(job.spec), "--data", str(job.data), "--repeats", str(job.repeats),
    ]  # fmt: skip
    env = worker_env(int(job.spec["threads_per_rank"]))
    return run_json_lines(cmd, env, job.timeout_s, cwd=REPO)


def flops(python: Any, models: list[str], timeout_s: float = 600) -> list[dict[str, Any]]:
    """FLOPs per sample of each model, counted by torch (the count every framework uses)."""
    cmd = [str(python), "-m", "benchmarks.torch_worker", "flops", "--models", *models]
    return run_json_lines(cmd, worker_env(1), timeout_s, cwd=REPO)


def allreduce(job: CommJob) -> list[dict[str, Any]]:
    """Two gloo ranks on loopback all-reducing each size as the runner does."""
    from dlscale.launch import free_port

    port = free_port()
    env = worker_env(1)
    cmds = [
        [
            str(job.python),
            "-m",
            "benchmarks.torch_worker",
            "gloo",
            "--rank",
            str(rank),
            "--world",
            "2",
            "--port",
            str(port),
            "--inner",
            str(job.inner),
            "--sizes",
            *map(str, job.sizes),
        ]  # fmt: skip
        for rank in (0, 1)
    ]
    return run_ranks_json_lines(cmds, env, job.timeout_s)
