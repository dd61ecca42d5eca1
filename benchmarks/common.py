"""Driver-side helpers shared by the benchmarks: paths, venvs, data, specs, subprocesses.

The driver runs in the workflow venv; framework work runs in each framework's own venv as
a subprocess (frameworks pin incompatible numpy/protobuf ranges). Every subprocess gets a
time limit and its own process group, and is stopped by its group id if it overruns or
the driver fails, so a benchmark never leaves a rank behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from dlscale import study as dlstudy
from dlscale.runners.common import thread_environment

REPO = Path(__file__).resolve().parent.parent
ENVS_DIR = Path(os.environ.get("DLSCALE_ENVS_DIR", REPO / ".venvs"))
CACHE = Path(os.environ.get("DLSCALE_TEST_CACHE", Path.home() / ".cache" / "dlscale-tests"))
MODELS = dlstudy.MODELS

#: (warm-up, timed) iterations per model in the training benchmarks: enough timed steps
#: for a stable median, few enough that ``make bench`` stays well inside 20 minutes.
BENCH_ITERATIONS: dict[str, tuple[int, int]] = {
    "lenet": (2, 50),
    "autoencoder": (2, 50),
    "alexnet": (1, 4),
    "resnet50": (1, 3),
}


#: At most this many training repeats per model: a repeat of an ImageNet-shaped model is
#: 30-40 s per framework on 2 cores (a ResNet-50 step alone is 2-4 s), and 5 of them for
#: torch and TensorFlow took 5.5 of the 20 minutes ``make bench`` may take.
MODEL_MAX_REPEATS: dict[str, int] = {"alexnet": 3, "resnet50": 3}


class BenchError(RuntimeError):
    """A benchmark step failed; the message names the command and the end of its output."""


def framework_python(framework: str) -> Path:
    """A framework venv's python, built from envs/<framework>.txt as the workflow builds it."""
    from dlscale.envs import build_venv

    venv = ENVS_DIR / framework
    marker = venv / "dlscale-env.json"
    if not marker.exists():
        print(f"[bench] building {venv} from envs/{framework}.txt", flush=True)
        build_venv(venv, REPO / "envs" / f"{framework}.txt", marker)
    return venv / "bin" / "python"


def default_study() -> dict[str, Any]:
    """The repository's default study (config.yaml), validated with defaults filled.

    Benchmarks take batch, threads, learning rate and framework options from it, so what
    they measure is what the study runs.
    """
    with open(REPO / "config.yaml", encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    return dlstudy.validate_config(config, dlstudy.load_schema(REPO / "schemas" / "config.schema.yaml"), REPO)


def bench_spec(study: dict[str, Any], framework: str, model: str, nodes: int = 1) -> dict[str, Any]:
    """The spec of a study run of ``model`` (one rank per node; a single rank by default),
    with the benchmark's iterations."""
    run = dlstudy.Run(framework, model, nodes, 1, int(study["batch_per_rank"][model]), 0)
    spec = dlstudy.run_spec(study, run)
    spec["warmup"], spec["iterations"] = BENCH_ITERATIONS[model]
    return spec


def worker_env(threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a worker: the repo importable, threads pinned as a rank's are."""
    env = {**os.environ, **thread_environment(threads), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    env.update(
        {"GLOO_SOCKET_IFNAME": "lo", "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}
    )
    env.update(extra or {})
    return env


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """Stop a process we started and its children, by its own process group id."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], cmd: list[str], timeout: float) -> str:
    """Wait for ``proc`` (stopping its group on timeout) and return its stdout; raise on failure."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        raise BenchError(f"timed out after {timeout:.0f} s: {' '.join(cmd[:6])} ...") from None
    except BaseException:
        stop_group(proc)
        raise
    if proc.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-15:])
        raise BenchError(f"exit {proc.returncode}: {' '.join(cmd[:6])} ...\n{tail}")
    return out


def run_json_lines(
    cmd: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None
) -> list[dict]:
    """Run a worker and parse the JSON objects it prints (other lines are its progress)."""
    return parse_json_lines(finish(start(cmd, env, cwd), cmd, timeout))


def run_ranks_json_lines(cmds: list[list[str]], env: dict[str, str], timeout: float) -> list[dict]:
    """Run one worker per rank at once (a collective needs them all), wait for every one
    under one shared deadline, stop them all whatever happens, and parse rank 0's JSON."""
    procs = [start(cmd, env, REPO) for cmd in cmds]
    try:
        deadline = time.monotonic() + timeout
        outputs = [
            finish(p, c, max(1.0, deadline - time.monotonic())) for p, c in zip(procs, cmds, strict=True)
        ]
    finally:
        for proc in procs:
            stop_group(proc)
    return parse_json_lines(outputs[0])


def parse_json_lines(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)
