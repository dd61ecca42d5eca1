"""A Caffe run spec, and a run launched through ``dlscale.launch`` in the caffe venv as the
training rule launches it, in a process group of its own that is killed on the way out."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from dlscale import catalog


def spec(
    model="lenet", nodes=1, rpn=1, batch=32, iterations=20, warmup=2, lr=0.01, timeout_s=300, seed=7, **extra
):
    world = nodes * rpn
    return {
        "framework": "caffe",
        "model": model,
        "nodes": nodes,
        "ranks_per_node": rpn,
        "batch": batch,
        "repeat": 0,
        "run_id": f"caffe/{model}/n{nodes}x{rpn}/b{batch}/r0",
        "world_size": world,
        "scaling": "weak",
        "global_batch": batch * world,
        "dataset": catalog.model(model).datasets[0],
        "iterations": iterations,
        "warmup": warmup,
        "threads_per_rank": 1,
        "learning_rate": lr,
        "momentum": 0.9,
        "seed": seed,
        "timeout_s": timeout_s,
        "options": {"log_every": 0},
        **extra,
    }


def run_group(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own process group; on timeout kill the whole group (mpirun's ranks too)."""
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        stop_group(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the group (dlscale.launch then stops its mpirun), SIGKILL it if that is not enough."""
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


def launch(python, run_spec, data, events, wait=True, retries=None):
    """``retries``: the launcher's --contended-retries (its default when None); 0 records a
    run on the busy test host at once instead of redoing it."""
    cmd = [str(python), "-m", "dlscale.launch", "--spec-json", json.dumps(run_spec), "--data", str(data),
           "--events", str(events), "--python", str(python)]  # fmt: skip
    if retries is not None:
        cmd += ["--contended-retries", str(retries)]
    env = dict(os.environ)
    if not wait:
        return subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    return run_group(cmd, env, timeout=600)
