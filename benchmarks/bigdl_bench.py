"""BigDL's benchmark entry: one process per arm, alternated over repeats.

BigDL's runner starts a Spark standalone cluster of its own per run, and pyspark allows one
SparkContext per Python process, so the runner cannot be run twice in one process as the
other frameworks' runners are (runner_arm). Here every arm is a process of its own:

* ``runner``: the study's own run through ``python -m dlscale.launch`` (single node: the
  driver, a standalone master, one worker with one executor), timed from its iteration
  events (BigDL's own log lines, millisecond time stamps);
* ``bare``: ``benchmarks.bigdl_worker --deployment standalone``: BigDL's plainest loop on
  the runner's own deployment (a standalone master and worker started by the runner's
  ``SparkCluster``, the runner's SparkConf), with none of the runner's harness;
* ``bare_local``: the same loop on ``local[C]`` (one JVM, no master or worker); then
  numpy's matmul peak in that process (the ``peak`` arm).
All three train the same model, batch, samples and SGD and are timed from the same log
lines by the same parser. runner / bare is the harness's ratio (the one held to 0.97),
bare / bare_local the deployment's (``harness_overhead.overhead_table``): a standalone
cluster's driver-executor RPC per step is the study's set-up, not the harness.

Throughput is the global batch over the median gap between successive iterations' log
time stamps (the whole loop: BigDL's step plus whatever happens between steps);
``self_timed_samples_per_s`` uses BigDL's own per-step seconds instead
(``benchmarks.timing.log_rates``). CPU time is not given: the work happens in JVMs that are
not this process's children in the runner arm.

Communication (``comm``): BigDL synchronises parameters through Spark's block manager
inside each step. ``dlscale.commbench.bigdl`` times that transport alone: a block exchange
(shuffle) of the model's gradient bytes between two executors of a standalone cluster,
reported beside the TCP ping-pong and the MPI all-reduce of the same bytes in the same
repeat (MNIST-sized models only: an ImageNet gradient's exchange is minutes of shuffle
files on 2 cores). The Spark job that carries the exchange in a step is not in it.

Start-up (JVM + Spark) is measured by benchmarks.startup, like every framework's; it reuses
the runner arms' launches (each one a whole start-up) instead of paying for more.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import (
    FAILED,
    REPO,
    BenchError,
    CommJob,
    FrameworkBench,
    TrainingJob,
    bench_iterations,
    commbench_arm,
    launch_run,
    log,
    run_json_lines,
    startup_fields,
    worker_command,
    worker_env,
)
from benchmarks.timing import arm_order, log_rates
from dlscale import catalog
from dlscale.runspec import RunSpec

#: (warm-up, timed) iterations of a BigDL arm: a BigDL step on one core is 5-30x a torch
#: step, and each arm pays a JVM start besides, so fewer timed steps than the other
#: frameworks (the median of 20 is steady; the spread over repeats shows what is not).
#: The warm-up is the study's (config.yaml ``warmup``), so that the runner arm's launches
#: are also BigDL's start-up measurements (benchmarks.startup reuses them).
TRAINING_ITERATIONS = (3, 20)
#: Start-up time-out of a benchmark arm (seconds; the study's is 180).
STARTUP_TIMEOUT_S = 900
#: The arms of a training repeat, each a process (rotated per repeat).
TRAINING_ARMS = ("runner", "bare", "bare_local")
#: Where each bare arm runs (``benchmarks.bigdl_worker --deployment``).
DEPLOYMENTS = {"bare": "standalone", "bare_local": "local"}


def training_iterations(model: str) -> tuple[int, int]:
    """(warm-up, timed) iterations of a BigDL arm: ``TRAINING_ITERATIONS`` for the MNIST
    models; for the ImageNet ones (a BigDL step of seconds to tens of seconds on one core)
    the study's warm-up and the other frameworks' timed count (``bench_iterations``)."""
    if catalog.model(model).mnist_sized:
        return TRAINING_ITERATIONS
    return TRAINING_ITERATIONS[0], bench_iterations(model)[1]


def launch_env(python: Path) -> dict[str, str]:
    return {"SPARK_LOCAL_IP": "127.0.0.1"}


def runner_run(python: Path, spec: RunSpec, data: Path, work: Path, timeout_s: float) -> dict[str, Any]:
    """One study run through the real launcher: its rank-0 iteration events and start-up."""
    events = launch_run(python, spec, data, work, timeout_s, launch_env(python))
    iterations = [e for e in events if e["event"] == "iteration" and e.get("rank", 0) == 0]
    return {"iterations": iterations, "startup": startup_fields(events)}


def training(job: TrainingJob) -> list[dict[str, Any]]:
    """Runner (dlscale.launch, Spark standalone), bare on the same standalone deployment and
    bare on local mode: one process each, rotated per repeat."""
    warmup, iterations = training_iterations(job.spec.model)
    # Start-up is not what this measures: on a loaded 2-core host the four JVMs took more
    # than the study's 180 s to a first step (load average 26), so the arms get longer.
    options = {
        **job.spec.options,
        "startup_timeout_s": max(job.spec.options["startup_timeout_s"], STARTUP_TIMEOUT_S),
    }
    spec = dataclasses.replace(job.spec, warmup=warmup, iterations=iterations, options=options)
    base = {"model": spec.model, "batch": spec.global_batch, "threads": spec.threads_per_rank}
    rows: list[dict[str, Any]] = []
    repeats = job.repeats  # BENCH.max_repeats: 1 of an ImageNet-sized model unless uncapped
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-bigdl-") as tmp:
        for repeat in range(repeats):
            for arm in arm_order(repeat, TRAINING_ARMS):
                log(f"  bigdl/{spec.model} repeat {repeat + 1}/{repeats}: {arm}")
                try:
                    rows += training_arm(arm, job, spec, base, repeat, Path(tmp))
                except BenchError as err:  # this arm's row says why; the others' rows stand
                    log(f"  bigdl/{spec.model} repeat {repeat + 1}: {arm} failed: {str(err).splitlines()[0]}")
                    reason = " ".join(str(err).split())[:300]
                    rows.append({"arm": FAILED, "repeat": repeat, **base, "failure": f"{arm} arm: {reason}"})
    return rows


def training_arm(
    arm: str, job: TrainingJob, spec: RunSpec, base: dict[str, Any], repeat: int, tmp: Path
) -> list[dict[str, Any]]:
    """One arm of one repeat, its rows (one process: the launcher's run or a bare worker)."""
    if arm == "runner":
        run = runner_run(job.python, spec, job.data, tmp / f"runner{repeat}", job.timeout_s)
        result = log_rates(run["iterations"], spec.warmup, spec.global_batch)
        return [{"arm": "runner", "repeat": repeat, **base, **result, **run["startup"]}]
    peak = arm == "bare_local"  # the matmul peak once per repeat, in a lighter process
    cmd = worker_command(
        job.python, "bigdl", "bare", spec=spec, data=job.data, peak=peak, deployment=DEPLOYMENTS[arm]
    )
    env = worker_env(spec.threads_per_rank, launch_env(job.python))
    return [{**row, "repeat": repeat, **base} for row in run_json_lines(cmd, env, job.timeout_s, cwd=REPO)]


def comm(job: CommJob) -> list[dict[str, Any]]:
    """Spark's block exchange of each MNIST-sized model's gradient between two executors."""
    sizes = [s for s in job.sizes if s in job.models and catalog.model(job.models[s]).mnist_sized]
    if not sizes:
        return []
    mine = dataclasses.replace(job, sizes=sizes)
    return commbench_arm(mine, "bigdl", ["--executors", 2, "--sizes", *sizes], "spark", "shuffle")


# One process per arm (one SparkContext per Python process; the runner starts a Spark
# cluster per run), so each arm costs a JVM start (~30-70 s): fewer repeats. Its start-up
# figures come from the training runner arms (benchmarks.startup).
BENCH = FrameworkBench(
    "bigdl",
    training=training,
    comm=comm,
    comm_label="BigDL's Spark block exchange (shuffle, 2 executors)",
    launch_env=launch_env,
    # An ImageNet-sized model: one repeat (three JVM starts and steps of seconds; a BigDL
    # AlexNet repeat took over 10 minutes at load 15), so its ratio has no interval.
    max_repeats={"training": 2, "training-imagenet": 1, "comm": 1, "startup": 2},
)
