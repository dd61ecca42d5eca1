"""Driver-side helpers shared by the benchmarks: paths, venvs, specs, jobs, subprocesses.

The driver runs in the workflow venv; framework work runs in each framework's own venv as
a subprocess (frameworks pin incompatible numpy/protobuf ranges): a worker
(``python -m benchmarks.<framework>_worker``, its command line built by
``benchmarks.worker_cli``), a study run through the real launcher (``launch_run``) or a
communication micro-benchmark of ``dlscale.commbench`` (``commbench_arm``).
Every subprocess gets a time limit and its own process group, and is stopped by its group
id if it overruns or the driver fails, so a benchmark never leaves a rank behind.

What a framework plugs in is a ``FrameworkBench``, declared in its own
``benchmarks/<framework>_bench.py`` (which imports this module, never the registry);
``benchmarks.registry`` collects them by the catalog's framework names.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import worker_cli
from benchmarks.timing import finite_median
from dlscale import catalog, commbench
from dlscale.base import atomic, process
from dlscale.options import option_default
from dlscale.runners.bigdl import settings as bigdl_settings
from dlscale.runners.common import thread_environment
from dlscale.runspec import RunSpec

REPO = catalog.REPO_DIR
ENVS_DIR = Path(os.environ.get("DLSCALE_ENVS_DIR", REPO / ".venvs"))
CACHE = Path(os.environ.get("DLSCALE_TEST_CACHE", Path.home() / ".cache" / "dlscale-tests"))

#: Warm-up and timed iterations of an MNIST-sized model in the training benchmarks:
#: enough timed steps for a stable median, few enough that ``make bench`` stays well
#: inside 20 minutes. ImageNet-sized models: see ``bench_iterations``.
MNIST_BENCH_ITERATIONS = (2, 50)

#: At most this many training repeats of an ImageNet-sized model: a repeat of one is
#: 30-40 s per framework on 2 cores (a ResNet-50 step alone is 2-4 s), and 5 of them for
#: torch and TensorFlow took 5.5 of the 20 minutes ``make bench`` may take.
IMAGENET_MAX_REPEATS = 3


def bench_iterations(model: str) -> tuple[int, int]:
    """(warm-up, timed) iterations of ``model`` in the training benchmarks.

    MNIST-sized models: ``MNIST_BENCH_ITERATIONS``. ImageNet-sized ones (a step of seconds
    on one core): one warm-up and a third of the study's iterations, at least 3 (AlexNet 4,
    ResNet-50 3).
    """
    entry = catalog.model(model)
    if entry.mnist_sized:
        return MNIST_BENCH_ITERATIONS
    return 1, max(3, entry.iterations // 3)


def training_repeats(model: str, asked: int) -> int:
    """How many of the ``asked`` training repeats ``model`` gets (``IMAGENET_MAX_REPEATS``)."""
    return asked if catalog.model(model).mnist_sized else min(asked, IMAGENET_MAX_REPEATS)


#: The arm of a training row that failed (``failure``: why): a whole framework x model
#: (``repeat`` -1) or one arm of one repeat (BigDL, whose arms are processes of their own).
FAILED = "failed"


class BenchError(RuntimeError):
    """A benchmark step failed; the message names the command and the end of its output."""


# --- what a framework plugs in ----------------------------------------------------------------


@dataclass(frozen=True)
class TrainingJob:
    python: Path
    spec: RunSpec
    data: Path
    repeats: int
    timeout_s: float


@dataclass(frozen=True)
class CommJob:
    framework: str
    python: Path
    sizes: list[int]
    inner: int
    timeout_s: float
    models: dict[int, str] = field(default_factory=dict)  # gradient bytes -> model


def no_extra_env(python: Path) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class FrameworkBench:
    """One framework's benchmarks: driver-side functions that run its work as subprocesses
    of its venv's python and return plain rows.

    * ``training(job)`` -> rows ``{arm: runner|bare|peak, repeat, samples_per_s | peak_flops}``:
      the runner's single-rank training loop against a bare loop of the same model, batch
      and threads, plus the matmul peak (``worker_training`` runs them in one worker).
    * ``comm(job)`` -> rows ``{nbytes, moved, seconds, library, op}``: the framework's
      gradient synchronisation of each size between two processes on loopback, timed by
      its ``dlscale.commbench`` module (``commbench_arm``).
    * ``launch_env(python)``: extra environment of a study run of this framework through
      ``dlscale.launch`` (start-up cost is measured on the real launcher for every framework).
    """

    name: str
    training: Callable[[TrainingJob], list[dict[str, Any]]] | None = None
    comm: Callable[[CommJob], list[dict[str, Any]]] | None = None
    comm_label: str = ""
    launch_env: Callable[[Path], dict[str, str]] = no_extra_env
    #: At most this many repeats per benchmark ("training", "comm", "startup"; absent: all
    #: asked). For frameworks whose every arm is a fresh JVM + Spark start (BigDL: about a
    #: minute a run on 2 cores), so that ``make bench`` stays inside its 20 minutes; their
    #: ratios pair the repeats they ran.
    max_repeats: Mapping[str, int] = field(default_factory=dict)

    def python(self) -> Path:
        return framework_python(self.name)

    def repeats(self, asked: int, benchmark: str) -> int:
        """How many of the ``asked`` repeats of ``benchmark`` this framework runs (at least 1).

        ``training-imagenet`` (the training benchmark of an ImageNet-sized model) takes its
        own cap where the entry has one, else the training one's."""
        cap = self.max_repeats.get(benchmark)
        if cap is None and benchmark == "training-imagenet":
            cap = self.max_repeats.get("training")
        return asked if cap is None else max(1, min(asked, cap))


# --- venvs, study, specs ------------------------------------------------------------------------


def framework_python(framework: str) -> Path:
    """A framework venv's python (dlscale installed in it), built as the workflow builds it."""
    from dlscale.envs import build_venv, env_marker

    venv = ENVS_DIR / catalog.framework(framework).env
    marker = env_marker(ENVS_DIR, framework)
    if not marker.exists():
        log(f"building {venv} from {catalog.framework(framework).requirements.name}")
        build_venv(venv, catalog.framework(framework).requirements, marker)
    return venv / "bin" / "python"


def default_config(path: Path = REPO / "config.yaml") -> dict[str, Any]:
    """The repository's default study config (config.yaml) as the workflow reads it:
    strictly (``dlscale.study.validation.read_config_file``: a key given twice is refused)."""
    from dlscale.study import validation

    return validation.read_config_file(path) or {}


def bench_init(config: Mapping[str, Any], model: str) -> str:
    """The ``init`` a benchmark of ``model`` runs with: the study's, unless that is
    ``shared`` and ``model`` has no shared initialisation (``dlscale.data.initweights``),
    which the study's checks refuse; then each framework's own (``framework``)."""
    from dlscale.data import initweights

    init = str(config.get("init", "framework"))
    return "framework" if init == "shared" and model not in initweights.LAYOUTS else init


def bench_studies(
    models: Sequence[str], config: Mapping[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """Per benchmarked model, the default study narrowed to that model, validated by the
    study's own checks (``validate_config``: defaults filled, a setting the study refuses
    refused here too), ``init`` chosen per model as the study allows (``bench_init``).

    Benchmarks take batch, threads, learning rate and framework options from it, so what
    they measure is what the study runs. ``models_per_framework`` is left out: the
    benchmarks choose their own cells (every framework on every model they measure).
    """
    from dlscale.catalog import CONFIG_SCHEMA
    from dlscale.study import validation

    base = dict(default_config() if config is None else config)
    base.pop("models_per_framework", None)
    schema = validation.load_schema(CONFIG_SCHEMA)
    return {
        model: validation.validate_config(
            copy.deepcopy({**base, "models": [model], "init": bench_init(base, model)}), schema, REPO
        )
        for model in dict.fromkeys(models)
    }


def bench_spec(
    studies: Mapping[str, dict[str, Any]],
    framework: str,
    model: str,
    nodes: int = 1,
    iterations: tuple[int, int] | None = None,
) -> RunSpec:
    """The spec of a study run of ``model`` (one rank per node; a single rank by default)
    in its study (``bench_studies``), with the benchmark's (warm-up, timed) ``iterations``
    (default: ``bench_iterations``).

    The study's quality target is dropped: with one, a run trains up to ``max_iterations``
    until an evaluation meets it, and the benchmarks' data has no held-out set to meet it
    on. A benchmark times a fixed number of steps (the evidence: docs/bench-cells.md)."""
    from dlscale.study import matrix

    study = studies[model]
    run = matrix.Run(framework, model, nodes, 1, matrix.batch_per_rank(study, model, nodes), 0)
    warmup, timed = iterations or bench_iterations(model)
    spec = dataclasses.replace(
        matrix.run_spec(study, run), warmup=warmup, iterations=timed, quality_target=None
    )
    return dataclasses.replace(spec, options=runnable_options(spec))


def runnable_options(spec: RunSpec) -> dict[str, Any]:
    """The spec's framework options, but an engine its runner cannot run the model with
    replaced by the framework's default: BigDL's mkldnn has no AutoEncoder
    (``dlscale.runners.bigdl.settings.MKLDNN_REFUSES``; the runner refuses the run), so that
    cell runs BigDL's own default engine, mklblas, in every arm (its rows say which)."""
    options = dict(spec.options)
    if (
        spec.framework == "bigdl"
        and options.get("engine") == "mkldnn"
        and spec.model in bigdl_settings.MKLDNN_REFUSES
    ):
        options["engine"] = option_default("bigdl", "engine")
    return options


# --- workers --------------------------------------------------------------------------------------


def worker_env(threads: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of a worker: threads pinned as a rank's are, traffic on loopback."""
    env = {**os.environ, **thread_environment(threads), "PYTHONUNBUFFERED": "1"}
    env.update(
        {"GLOO_SOCKET_IFNAME": "lo", "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}
    )
    env.update(extra or {})
    return env


def worker_command(python: Path | str, framework: str, command: str, **values: Any) -> list[str]:
    """``python -m benchmarks.<framework>_worker <command> ...`` (run with cwd = the repo)."""
    return [str(python), "-m", f"benchmarks.{framework}_worker", *worker_cli.arguments(command, **values)]


def worker_training(job: TrainingJob, extra_env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Runner vs bare loop vs matmul peak, rotated per repeat in one worker process."""
    cmd = worker_command(
        job.python, job.spec.framework, "training", spec=job.spec, data=job.data, repeats=job.repeats
    )
    return run_json_lines(cmd, worker_env(job.spec.threads_per_rank, extra_env), job.timeout_s, cwd=REPO)


def commbench_rows(
    python: Path | str,
    name: str,
    args: Sequence[str],
    timeout_s: float,
    extra_env: Mapping[str, str] | None = None,
) -> list[dict[str, str]]:
    """One run of ``python -m dlscale.commbench.<name> --network host ARGS``: its CSV rows.

    The micro-benchmarks the scaling model calibrates on (``dlscale.commbench``) are the
    benchmarks' communication numbers too: one implementation of each transfer, one set of
    numbers. The module makes its own network, ranks and time limits."""
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-comm-") as tmp:
        out = Path(tmp) / f"{name}.csv"
        cmd = [
            str(python), "-m", commbench.module_of(name), "--network", "host", *map(str, args),
            "--timeout-s", str(timeout_s), "--out", str(out),
        ]  # fmt: skip
        finish(start(cmd, {**os.environ, **(extra_env or {})}, REPO), cmd, timeout_s + 60)
        with open(out, newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))


#: How far (relative) a commbench row's bytes may lie from the size asked for (Spark's
#: exchange moves whole rows of ``dlscale.commbench.bigdl.PAYLOAD`` bytes).
SIZE_TOLERANCE = 0.05


def commbench_sizes(
    rows: list[dict[str, str]], sizes: Sequence[int], library: str, op: str, world: int = 2
) -> list[dict[str, Any]]:
    """Per asked size, the median seconds of its timed operations among ``rows`` of
    ``library``/``op`` at ``world``: one value per size for one repeat of the benchmark.

    ``nbytes`` is the asked size (the key shared with the references and the models),
    ``moved`` what the operation moved, the bytes its bandwidth is counted from."""
    found: dict[int, tuple[int, list[float]]] = {}
    for row in rows:
        if row["library"] != library or row["op"] != op or int(row["world"]) != world:
            continue
        moved = int(row["nbytes"])
        asked = min(sizes, key=lambda s: abs(s - moved))
        if abs(asked - moved) > SIZE_TOLERANCE * asked:
            continue
        found.setdefault(asked, (moved, []))[1].append(float(row["seconds"]))
    return [
        {"nbytes": asked, "moved": moved, "seconds": statistics.median(times), "library": library, "op": op}
        for asked, (moved, times) in sorted(found.items())
    ]


def commbench_arm(
    job: CommJob,
    name: str,
    args: Sequence[str],
    library: str,
    op: str,
    extra_env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One arm of the communication benchmark: ``dlscale.commbench.<name>`` with ``args``,
    ``job.inner`` timed operations a size, reduced to one row a size (``commbench_sizes``)."""
    rows = commbench_rows(job.python, name, [*args, "--repeats", job.inner], job.timeout_s, extra_env)
    return commbench_sizes(rows, job.sizes, library, op)


# --- study runs through the real launcher -------------------------------------------------------


def launch_run(
    python: Path,
    spec: RunSpec,
    data: Path,
    work: Path,
    timeout_s: float,
    extra_env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One study run through ``python -m dlscale.launch``, as the training rule runs it; its
    events (run_start, iterations, run_end). A run that did not end ok raises BenchError.

    Never redone for contention (``--contended-retries 0``): a benchmark pairs its arms in
    the same spell of load instead, and redoing only this arm would time it in another
    spell (and take up to three times as long: a BigDL arm is minutes)."""
    events_path = work / "events.jsonl"
    cmd = [
        str(python), "-m", "dlscale.launch", "--spec-json", spec.to_json(), "--data", str(data),
        "--events", str(events_path), "--python", str(python), "--config-sha256", spec.sha256,
        "--contended-retries", "0",
    ]  # fmt: skip
    finish(start(cmd, {**os.environ, **(extra_env or {})}, REPO), cmd, timeout_s)
    events = [json.loads(line) for line in events_path.read_text(encoding="utf-8").splitlines() if line]
    end = events[-1]
    if end.get("event") != "run_end" or end.get("status") != "ok":
        raise BenchError(f"run {spec.run_id} through dlscale.launch failed: {end.get('reason')}")
    return events


def startup_fields(events: list[dict[str, Any]]) -> dict[str, float]:
    """A finished run's start-up figures from its events (run_start first, run_end last).

    ``to_first_step_s``: launcher start to the start of the first iteration (its end time
    minus its step); ``startup_s``: the launcher's own start to first timed iteration;
    ``warmup_s``: the difference (the warm-up iterations).
    """
    run_start, run_end = events[0], events[-1]
    iterations = [e for e in events if e["event"] == "iteration" and e.get("rank", 0) == 0]
    first = iterations[0]
    to_first = first["time"] - first["step_s"] - run_start["time"]
    timed = [e["step_s"] for e in iterations if not e.get("warmup")]
    return {
        "startup_s": run_start["startup_s"],
        "to_first_step_s": to_first,
        "warmup_s": run_start["startup_s"] - to_first,
        "median_step_s": finite_median(timed),
        "wall_s": run_end["wall_s"],
    }


# --- subprocesses -------------------------------------------------------------------------------


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """Stop a process we started and its children, by its own process group id."""
    process.stop_group(proc, grace_s=10.0)


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
        cause = error_line(err)
        raise BenchError(
            f"exit {proc.returncode}: {cause + ' (' if cause else ''}{' '.join(cmd[:6])} ...{')' if cause else ''}\n{tail}"
        )
    return out


#: A line that states an error: a Python exception (``ValueError: ...``), a Java one
#: (``java.lang.OutOfMemoryError: ...``, ``org.apache.spark.SparkException: ...``) or a tool's
#: ``error:``.
ERROR_LINE = re.compile(r"^\s*(?:[\w.]*(?:Error|Exception|Exit)\b[^\n]*|.*\berror: .*)$", re.IGNORECASE)


def error_line(stderr: str) -> str:
    """The last line of a failed process's stderr that states an error (its cause, as a
    summary's row can hold it), or "" if none does; stack frames are skipped."""
    for line in reversed(stderr.strip().splitlines()):
        text = line.strip()
        if text and not text.startswith(("at ", "File ", "\tat ")) and ERROR_LINE.match(text):
            return text[:240]
    return ""


def run_json_lines(
    cmd: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None
) -> list[dict]:
    """Run a worker and parse the JSON objects it prints (other lines are its progress)."""
    return parse_json_lines(finish(start(cmd, env, cwd), cmd, timeout))


def parse_json_lines(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def write_csv(table: Any, path: Path) -> Path:
    """A result table as csv, written atomically (``dlscale.base.atomic``: whole or not at all)."""
    return atomic.replace_with(path, lambda tmp: table.to_csv(tmp, index=False))


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)
