"""Driver side of the BigDL benchmarks: one process per arm, alternated over repeats.

BigDL's runner starts a Spark standalone cluster of its own per run, and pyspark allows one
SparkContext per Python process, so the runner cannot be run twice in one process as the
other frameworks' runners are (runner_arm). Here every arm is a process of its own:

* ``runner``: the study's own run through ``python -m dlscale.launch`` (single node: the
  driver, a standalone master, one worker with one executor), timed from its iteration
  events (BigDL's own log lines, millisecond time stamps);
* ``bare``: ``benchmarks.bigdl_worker``: BigDL's plainest loop on ``local[C]`` (one JVM,
  no master or worker), same model, batch, samples and SGD, timed from the same log lines
  by the same parser; then numpy's matmul peak in that process (the ``peak`` arm).

Throughput is the global batch over the median gap between successive iterations' log
time stamps (the whole loop: BigDL's step plus whatever happens between steps);
``self_timed_samples_per_s`` uses BigDL's own per-step seconds instead. CPU time is not
given: the work happens in JVMs that are not this process's children in the runner arm.

Communication (``allreduce``): BigDL synchronises parameters through Spark's block
manager inside each step; its events give ``comm_s`` = step - compute (see
dlscale.parse.bigdl). A 2-node run of the study's set-up per model gives the median
``comm_s`` over its timed iterations, reported for the model's gradient bytes beside the
TCP stream and mpi4py all-reduce of the same bytes in the same repeat.

Start-up (JVM + Spark) is measured by benchmarks.startup, like every framework's.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.stats import arm_order, median_interval, throughput

if TYPE_CHECKING:
    from benchmarks.registry import CommJob, TrainingJob

#: (warm-up, timed) iterations of a BigDL arm: a BigDL step on one core is 5-30x a torch
#: step, and each arm pays a JVM start besides, so fewer timed steps than the other
#: frameworks (the median of 20 is steady; the spread over repeats shows what is not).
#: The warm-up is the study's (config.yaml ``warmup``), so that the runner arm's launches
#: are also BigDL's start-up measurements (benchmarks.startup reuses them).
TRAINING_ITERATIONS = (3, 20)
COMM_ITERATIONS = (2, 10)


def _median(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def log_rates(events: list[dict[str, Any]], warmup: int, batch: int) -> dict[str, float]:
    """Throughputs and per-step split of one BigDL run from its iteration events.

    ``events``: BigDL iteration events (0-based ``iteration``, ``time`` = the log line's
    time stamp, ``step_s`` = BigDL's own step seconds, ``compute_s``/``comm_s`` from its
    metrics block or None). Warm-up iterations are left out; the gaps start at the end of
    the last warm-up iteration, so a run of W + N iterations gives N gaps.
    """
    if warmup < 1:
        raise ValueError("need at least one warm-up iteration (the first gap starts at its end)")
    ordered = sorted(events, key=lambda e: e["iteration"])
    timed = [e for e in ordered if e["iteration"] >= warmup]
    if len(timed) < 2:
        raise ValueError(f"need at least two timed iterations, got {len(timed)}")
    stamps = [float(e["time"]) for e in ordered if e["iteration"] >= warmup - 1]
    step = _median([float(e["step_s"]) for e in timed])
    return {
        "samples_per_s": throughput(batch, median_interval(stamps)),
        "samples_per_cpu_s": math.nan,
        "self_timed_samples_per_s": throughput(batch, step),
        "step_s": step,
        "compute_s": _median([float(e["compute_s"]) for e in timed if e.get("compute_s") is not None]),
        "comm_s": _median([float(e["comm_s"]) for e in timed if e.get("comm_s") is not None]),
    }


def spec_for(study: dict[str, Any], model: str, nodes: int, iterations: tuple[int, int]) -> dict[str, Any]:
    """The study's BigDL run spec of ``model`` on ``nodes`` nodes, with bench iterations."""
    from benchmarks.common import bench_spec

    spec = bench_spec(study, "bigdl", model, nodes=nodes)
    spec["warmup"], spec["iterations"] = iterations
    return spec


def launch_run(
    python: Path, spec: dict[str, Any], data: Path, work: Path, timeout_s: float
) -> dict[str, Any]:
    """One study run through the real launcher; its rank-0 iteration events and start-up."""
    from benchmarks.common import REPO, BenchError, finish, start
    from benchmarks.startup import startup_fields

    events_path = work / "events.jsonl"
    cmd = [
        str(python), "-m", "dlscale.launch", "--spec-json", json.dumps(spec), "--data", str(data),
        "--events", str(events_path), "--python", str(python),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
    finish(start(cmd, env, REPO), cmd, timeout_s)
    events = [json.loads(line) for line in events_path.read_text(encoding="utf-8").splitlines() if line]
    end = events[-1]
    if end.get("event") != "run_end" or end.get("status") != "ok":
        raise BenchError(f"BigDL run {spec['run_id']} failed: {end.get('reason')}")
    iterations = [e for e in events if e["event"] == "iteration" and e.get("rank", 0) == 0]
    return {"iterations": iterations, "startup": startup_fields(events)}


def training(job: TrainingJob) -> list[dict[str, Any]]:
    """Runner (dlscale.launch, Spark standalone) and bare (local mode) processes, alternated."""
    from benchmarks.common import REPO, log, run_json_lines, worker_env

    spec = {**job.spec}
    spec["warmup"], spec["iterations"] = TRAINING_ITERATIONS
    batch, warmup = int(spec["global_batch"]), int(spec["warmup"])
    base = {"model": spec["model"], "batch": batch, "threads": int(spec["threads_per_rank"])}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-bigdl-") as tmp:
        for repeat in range(job.repeats):
            for arm in arm_order(repeat, ("runner", "bare")):
                log(f"  bigdl/{spec['model']} repeat {repeat + 1}/{job.repeats}: {arm}")
                if arm == "runner":
                    work = Path(tmp) / f"runner{repeat}"
                    run = launch_run(job.python, spec, job.data, work, job.timeout_s)
                    result = log_rates(run["iterations"], warmup, batch)
                    rows.append({"arm": "runner", "repeat": repeat, **base, **result, **run["startup"]})
                else:
                    cmd = [str(job.python), "-m", "benchmarks.bigdl_worker", "bare", "--spec-json",
                           json.dumps(spec), "--data", str(job.data), "--peak"]  # fmt: skip
                    env = worker_env(int(spec["threads_per_rank"]), {"SPARK_LOCAL_IP": "127.0.0.1"})
                    for row in run_json_lines(cmd, env, job.timeout_s, cwd=REPO):
                        rows.append({**row, "repeat": repeat, **base})
    return rows


def allreduce(job: CommJob) -> list[dict[str, Any]]:
    """BigDL's per-step synchronisation (step - compute) in 2-node runs, per model size."""
    from benchmarks.common import default_study, log
    from benchmarks.data import mnist_shards
    from dlscale import study as dlstudy

    study = default_study()
    mine = set(dlstudy.models_of(study, "bigdl"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-bigdl-comm-") as tmp:
        for nbytes in job.sizes:
            model = job.models.get(nbytes)
            if model not in mine or dlstudy.dataset_of(study, model) != "mnist":
                continue
            spec = spec_for(study, model, 2, COMM_ITERATIONS)
            log(f"  bigdl/{model}: 2-node run for its per-step synchronisation")
            run = launch_run(job.python, spec, mnist_shards(), Path(tmp) / model, job.timeout_s)
            rates = log_rates(run["iterations"], int(spec["warmup"]), int(spec["global_batch"]))
            rows.append({"transport": "bigdl", "nbytes": nbytes, "seconds": rates["comm_s"], "model": model,
                         "step_s": rates["step_s"], "compute_s": rates["compute_s"]})  # fmt: skip
    return rows
