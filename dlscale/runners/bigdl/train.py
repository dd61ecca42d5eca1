"""BigDL runner: DistriOptimizer on a Spark standalone cluster of the run's own.

The driver (this process, rank 0) starts a master and one worker per node
(``spark.SparkCluster``; with ``cluster: per_study``, connects to the study's shared one or
starts it: ``shared_cluster.SharedCluster``), connects a SparkContext with BigDL's engine, trains the study's
model for exactly warm-up + timed iterations, and stops everything by PID, whatever
happens.

Iteration events are live: a thread (``follower.LiveLog``) follows BigDL's own driver log
and records each iteration as soon as BigDL has logged it, and watches the executors. Two
faults stop training at once, instead of at its end: a loss that is NaN or infinite, and an
executor (or its worker) that died. The driver then cancels Spark's jobs (and, if BigDL does
not give up within ``STOP_GRACE_S``, kills the driver JVM), and the run fails with "loss
became nan at iteration N" or "rank K died (the Spark executor of node K, ...) at iteration
N", as a dead rank of every other framework does. Any other failure is reported with the
reason found in the logs (e.g. ``java.lang.OutOfMemoryError: Java heap space``), after the
iterations that were done.

Ranks (``spark.ClusterShape``): node -> worker with one executor of ``ranks_per_node x
threads_per_rank`` cores; a rank -> an executor core (BigDL trains one model replica per
core). Rank 0 is the driver plus the executor of node 0; the executor of node k is ranks
``k x ranks_per_node ..``, and its PID (local mode) or its node's name (SLURM) is in their
``rank_start``, so that killing it is "killing a rank". DistriOptimizer's batch = the
study's global batch (batch per rank x ranks), split evenly over executors x cores, so each
replica trains on the study's batch per rank when threads_per_rank is 1.

Held-out quality (dlscale.runners.bigdl.evaluate): the driver evaluates the trained model
with BigDL's ``predict`` after the last iteration and, with ``eval_every``, between
segments of training (each ``optimize`` up to the next evaluation); a quality target met
stops training there. With ``init: shared`` the model starts from dlscale.data.initweights'
arrays and the executors hold their ranks' slices of one global batch sequence; the SGD
is torch's in every run (momentum, dampening 0, constant rate, the mean loss).

Input (``input: memory | pipeline``, dlscale.runners.bigdl.data): each executor reads
and checksums its own part of the shards. ``input_s`` is null for BigDL: DistriOptimizer
caches the whole training RDD before its first step and takes each mini-batch from that
cache inside the interval it reports as ``get weights average``, so no step waits for
input and no time is measured apart for it. What it does give is recorded instead:
``input_load_s``, the one-off caching of the training RDD (reading, verifying, converting
on the executors), from the driver log.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from dlscale import catalog
from dlscale.base import atomic
from dlscale.data import initweights
from dlscale.data.shards import ShardSet
from dlscale.events import PartWriter
from dlscale.parse import bigdl as bigdl_log
from dlscale.runners.bigdl import settings as bigdl_settings
from dlscale.runners.bigdl.data import shared_rdd, training_rdd
from dlscale.runners.bigdl.evaluate import HeldOut, evaluate_and_decide, segment_ends
from dlscale.runners.bigdl.executors import RemoteExecutors, allocation_nodes
from dlscale.runners.bigdl.follower import POLL_S, LiveLog
from dlscale.runners.bigdl.models import build_model, criterion, shared_weights
from dlscale.runners.bigdl.shared_cluster import (
    ENV_CLUSTERS,
    ENV_OWNER_PID,
    INHERITED_VARS,
    SharedCluster,
    choose,
    cluster_key,
    start_time,
)
from dlscale.runners.bigdl.spark import (
    SECRET_KEY,
    ClusterShape,
    SparkCluster,
    bigdl_batch,
    cluster_shape,
    node_address,
)
from dlscale.runners.common import NonFiniteLoss, RunContext, RunFailure
from dlscale.runspec import RunSpec

LOG4J2 = Path(__file__).with_name("log4j2.properties")
EXECUTOR_LOG = os.devnull  # an executor's log file: none, its console (stderr) is kept
STOP_GRACE_S = 15.0  # after a fault: time BigDL gets to give up before its JVM is killed
CANCEL_EVERY_S = 0.1  # after a fault: how often Spark's jobs are cancelled until BigDL gives up
LOG_WAIT_S = 60.0  # after a segment: time the log follower gets to record its last iteration


class BigDLTrainingError(RuntimeError):
    """Training failed; the message is the reason found in BigDL's or Spark's log."""


def java_version() -> str:
    """The first line of ``java -version``; a clear error where there is no Java."""
    java = shutil.which("java") or (os.environ.get("JAVA_HOME", "") + "/bin/java")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except OSError:
        raise RuntimeError(
            "Java not found: BigDL needs a Java runtime (run scripts/ensure-java.sh, which installs"
            " openjdk-17-jre-headless, or set JAVA_HOME)"
        ) from None
    lines = (out.stderr or out.stdout).strip().splitlines()
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"`{java} -version` failed ({out.returncode}): {' '.join(lines)[-300:]}")
    return lines[0]


def versions() -> dict[str, str]:
    return {
        "bigdl": importlib.metadata.version("bigdl-dllib-spark3"),
        "bigdl-core": importlib.metadata.version("bigdl-core"),
        "pyspark": importlib.metadata.version("pyspark"),
        "numpy": np.__version__,
        "java": java_version(),
        "backend": "spark-standalone",
    }


def option_default(key: str) -> Any:
    """The default of one of this runner's options, from its options schema."""
    schema = json.loads(catalog.framework("bigdl").options_schema.read_text(encoding="utf-8"))
    return schema["properties"][key]["default"]


def model_heap(spec: RunSpec, option: str) -> str:
    """A JVM heap option of this run's model (``executor_memory``, ``driver_memory``): one
    size for all, or the model's own."""
    memory = spec.options[option]
    if isinstance(memory, Mapping):
        # A per-model map may leave models out: they keep their default size.
        return str(memory.get(spec.model) or option_default(option)[spec.model])
    return str(memory)


def executor_memory(spec: RunSpec) -> str:
    """The executor heap of this run's model."""
    return model_heap(spec, "executor_memory")


def driver_memory(spec: RunSpec) -> str:
    """The driver heap of this run's model."""
    return model_heap(spec, "driver_memory")


def spark_conf(cluster: SparkCluster | SharedCluster, spec: RunSpec, log_path: Path) -> Any:
    """The SparkConf of the driver: BigDL's required settings plus everything kept in the run dir."""
    from bigdl.dllib.utils.common import create_spark_conf
    from bigdl.dllib.utils.engine import get_bigdl_jars

    opts = spec.options
    shape = cluster.shape
    eng = bigdl_settings.engine_settings(spec)
    tmp = cluster.root / "scratch" / "jvm-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    jars = ":".join(get_bigdl_jars())
    driver_java = [
        f"-Dlog4j2.configurationFile={LOG4J2}",
        f"-Ddlscale.bigdl.log={log_path}",
        "-Dbigdl.utils.LoggerFilter.disable=true",
        "-Dbigdl.failure.retryTimes=1",  # a failure fails the run; no silent retraining
        f"-Djava.io.tmpdir={tmp}",  # BigDL unpacks its native MKL library there
        "-XX:-UsePerfData",  # no /tmp/hsperfdata_* file for a killed JVM to leave behind
        *bigdl_settings.java_options(eng),  # BigDL's Engine reads them in the driver too
    ]
    # Before the cluster is up, the master's host alone: spark-submit checks only the
    # scheme when the driver's JVM launches (start_cluster_and_driver_jvm sets the URL after).
    master = cluster.master_url or f"spark://{cluster.master_host()}"
    conf = create_spark_conf().setMaster(master).setAppName(f"dlscale {spec.run_id}")
    settings = {
        "spark.executor.cores": shape.cores_per_executor,
        "spark.cores.max": shape.total_cores,
        "spark.executor.memory": shape.executor_memory,
        "spark.driver.memory": driver_memory(spec),
        # Without the jars on the executors' class path, BigDL's lambdas fail to deserialise.
        "spark.executor.extraClassPath": jars,
        "spark.driver.extraJavaOptions": " ".join(driver_java),
        "spark.executor.extraJavaOptions": " ".join(
            [
                # Without a configuration of ours an executor picks up the log4j2-test.xml
                # inside BigDL's jar, which appends to /tmp/${sys:logFilename}, outside the
                # run. Ours logs to the console alone (no file: EXECUTOR_LOG): the stderr
                # its worker keeps in the run's folder (SparkCluster keeps it at the stop).
                f"-Dlog4j2.configurationFile={LOG4J2}",
                f"-Ddlscale.bigdl.log={EXECUTOR_LOG}",
                f"-Djava.io.tmpdir={tmp}",
                "-Dbigdl.utils.LoggerFilter.disable=true",
                "-XX:-UsePerfData",
                *bigdl_settings.java_options(eng),
            ]
        ),
        # The native libraries read these when they load (SLURM's workers do not inherit
        # the driver's environment; local ones do, and get the same values).
        **{f"spark.executorEnv.{name}": value for name, value in eng.env.items()},
        "spark.pyspark.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.task.maxFailures": 1,
        "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{opts['startup_timeout_s']}s",
    }
    settings.update(cluster.driver_settings())  # authentication; the node's address under SLURM
    if cluster.mode == "local":
        driver_host = node_address(0)  # loopback, or node 0's address on an emulated network
        settings.update({"spark.driver.host": driver_host, "spark.driver.bindAddress": driver_host})
    for key, value in settings.items():
        conf.set(key, str(value))
    return conf


def executor_pids(ctx: RunContext, cluster: SparkCluster | SharedCluster, timeout_s: float) -> dict[int, int]:
    """Node -> PID of its executor, once every worker has started ours (local mode; else {})."""
    if cluster.mode != "local":
        return {}
    deadline = time.time() + timeout_s
    while True:
        found = cluster.executor_pids()
        if len(found) == cluster.shape.workers or time.time() > deadline:
            return found
        time.sleep(POLL_S)


def write_executor_ranks(
    ctx: RunContext,
    shape: ClusterShape,
    executors: dict[int, int],
    hosts: Mapping[int, str] | None = None,
    mode: str = "local",
) -> None:
    """Say where every rank ran: rank r is a core of the executor on node r // ranks_per_node.

    The executors are Spark's processes, not the launcher's, so the driver writes their
    ``rank_start`` (only that: the driver reports every iteration) into their part files,
    with the executor's PID where it is known (local mode): the process that is that rank.
    Under SLURM the host is the node the executor registered from (``hosts``: node -> the
    allocation's name for it), as the other frameworks' ranks give theirs; ``node{k}``
    only for an executor that never registered.
    """
    per_node = ctx.spec.ranks_per_node
    base = socket.gethostname()
    hosts = hosts or {}
    # The spec's world and the cluster's mode, not this process's placement: the driver is
    # one process (under a workflow job, with none of srun's task variables), never a rank
    # of a step.
    for rank in range(1, ctx.spec.world_size):
        node = rank // per_node
        pid = {"pid": executors[node]} if node in executors else {}
        host = f"{base}/node{node}" if mode == "local" else hosts.get(node, f"node{node}")
        with PartWriter(ctx.writer.path.with_name(f"rank{rank}.jsonl")) as part:
            part.emit(
                "rank_start",
                rank=rank,
                host=host,
                role=f"core of the Spark executor on worker {node}",
                threads=ctx.spec.threads_per_rank,
                **pid,
            )


def start_driver_jvm(conf: Any, console_log: Path) -> Any:
    """Start the driver's JVM (py4j gateway) with its console copied into ``console_log``.

    The JVM's own stderr carries what log4j does not: an OutOfMemoryError that kills the
    driver is printed there by the JVM itself, so the failure reason must be read from it
    too. A thread copies each line to this process's stderr (the run's run.log) as well.
    """
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})

    def pump(stream: Any) -> None:
        with open(console_log, "ab") as copy:
            for line in iter(stream.readline, b""):
                copy.write(line)
                copy.flush()
                sys.stderr.buffer.write(line)
                sys.stderr.flush()

    threading.Thread(target=pump, args=(gateway.proc.stderr,), daemon=True).start()
    return gateway


def start_cluster_and_driver_jvm(
    cluster: SparkCluster | SharedCluster, spec: RunSpec, log_path: Path, held: dict[str, Any]
) -> Any:
    """Start the Spark cluster and the driver's JVM side by side; the SparkConf to connect with.

    Neither needs the other until the SparkContext connects: the JVM takes its options at
    launch and the master's URL only then, so its seconds of start-up overlap the master's
    and the workers' instead of following them. The JVM is put in ``held`` (to be stopped)
    even when the cluster fails to start; a cluster failure is the one raised.
    """
    # The driver's scratch space (SPARK_LOCAL_DIRS, as the workers', rather than
    # spark.local.dir, which Spark warns the cluster manager overrides on executors).
    scratch = cluster.root / "scratch" / "driver"
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    conf = spark_conf(cluster, spec, log_path)
    console = log_path.with_name("driver-console.log")
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bigdl-driver-jvm") as pool:
        jvm = pool.submit(start_driver_jvm, conf, console)
        try:
            cluster.start()
        finally:
            if jvm.exception() is None:  # waits for the launch; a failed one is raised below
                held["gateway"] = jvm.result()
    held["gateway"] = jvm.result()
    print(f"[bigdl] Spark master {cluster.master_url}; daemon pids {cluster.pids}", flush=True)
    conf.setMaster(str(cluster.master_url))
    conf.set(SECRET_KEY, cluster.secret)  # after the JVM's start: on no command line
    return conf


def _stop_driver(held: dict[str, Any], graceful: bool) -> None:
    """Stop the SparkContext and the driver JVM (by PID), never waiting long."""
    if graceful and "sc" in held:
        try:
            held["sc"].stop()
        except Exception as err:  # noqa: BLE001 - teardown of a broken context
            print(f"[bigdl] SparkContext.stop failed: {err}", file=sys.stderr, flush=True)
    proc = getattr(held.get("gateway"), "proc", None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stopper(held: dict[str, Any]) -> Any:
    """What ``LiveLog`` calls on a fault: cancel Spark's jobs until BigDL's ``optimize``
    fails; if it has not returned ``STOP_GRACE_S`` later, kill the driver JVM.

    Once is not enough: the fault is seen in BigDL's log line of an iteration, written
    after that iteration's jobs ended, so a single cancel usually finds no job running and
    BigDL starts the next iteration's (a NaN run then trained on for the whole grace).
    Cancelling every ``CANCEL_EVERY_S`` catches the next job, whose failure ends
    ``optimize`` (no checkpoint, so DistriOptimizer does not retry).
    """

    def cancel() -> None:
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            try:
                held["sc"].cancelAllJobs()
            except Exception as err:  # noqa: BLE001 - the JVM may be going already
                print(f"[bigdl] cancelling Spark's jobs failed: {err}", file=sys.stderr, flush=True)
                break
            if held["optimizing"].wait(CANCEL_EVERY_S):
                return
        if held["optimizing"].wait(max(0.0, deadline - time.monotonic())):
            return
        proc = getattr(held.get("gateway"), "proc", None)
        if proc is not None and proc.poll() is None:
            print(f"[bigdl] BigDL did not stop in {STOP_GRACE_S:.0f} s: killing the driver JVM", flush=True)
            proc.kill()

    def on_fault() -> None:
        if "sc" in held:
            threading.Thread(target=cancel, name="bigdl-stop", daemon=True).start()

    return on_fault


def sgd(spec: RunSpec) -> Any:
    """BigDL's SGD with momentum at the rate of the spec's rule. A warm-up ramp is BigDL's own
    ``Warmup`` schedule (step t at base + t x delta: RunSpec.learning_rate_at counts the same
    way), then ``Default``, which holds the rate the ramp reached; the schedule's state is
    the optimiser's, so it carries over the segments between evaluations (``reserveOptim``)."""
    from bigdl.dllib.optim.optimizer import SGD, Default, SequentialSchedule, Warmup

    ramp = spec.warmup_ramp
    if not ramp:
        return SGD(learningrate=spec.target_learning_rate, momentum=spec.momentum, dampening=0.0)
    schedule = SequentialSchedule(spec.total_iterations + 1)  # one "epoch": no epoch boundary
    schedule.add(Warmup((spec.target_learning_rate - spec.learning_rate) / ramp), ramp)
    schedule.add(Default(), spec.total_iterations + 1)
    return SGD(
        learningrate=spec.learning_rate, momentum=spec.momentum, dampening=0.0, leaningrate_schedule=schedule
    )


def _optimize(
    ctx: RunContext,
    cluster: SparkCluster | SharedCluster,
    log_path: Path,
    global_batch: int,
    held: dict[str, Any],
) -> None:
    """Connect, build, train and evaluate, with a ``LiveLog`` recording every iteration meanwhile.

    Training runs in segments, each ``optimize`` up to the next evaluation
    (``evaluate.segment_ends``: one segment when the run evaluates only after its last
    iteration), and stops early once an evaluation meets the quality target. The
    SparkContext, the start-up times and the ``LiveLog`` are put in ``held`` as soon as
    they exist, so that the caller can stop and report them whatever happens; ``held``
    also says what the run was to train (``expected``) and what came after the last
    segment's steps (``stage``: the gather of the trained model, its evaluation).
    """
    from bigdl.dllib.optim.optimizer import MaxIteration, Optimizer
    from bigdl.dllib.utils.common import init_engine
    from pyspark import SparkContext

    spec = ctx.spec
    shape = cluster.shape
    conf = start_cluster_and_driver_jvm(cluster, spec, log_path, held)
    started = time.time()
    sc = held["sc"] = SparkContext(conf=conf, gateway=held["gateway"])
    init_engine()
    times = {"spark_cluster_s": float(cluster.startup_s or 0.0), "spark_context_s": time.time() - started}
    held["times"] = times  # kept for the events even if training fails
    used = describe_cluster(cluster, held.get("cluster_note", ""))
    print(f"[bigdl] cluster: {json.dumps(used, sort_keys=True)}", flush=True)
    executors = executor_pids(ctx, cluster, spec.options["startup_timeout_s"])
    remote = None
    if cluster.mode != "local":  # other nodes: watched through the driver JVM
        remote = RemoteExecutors(sc, allocation_nodes())
        found = remote.wait(shape.workers, spec.options["startup_timeout_s"])
        print(f"[bigdl] executors: {[e.where() for e in found]}", flush=True)
    hosts = {e.node: e.name for e in remote.expected if e.node is not None} if remote else {}
    write_executor_ranks(ctx, shape, executors, hosts, cluster.mode)
    record_settings(ctx, held["gateway"].proc.pid, executors, used)
    per_executor = global_batch // shape.workers
    if spec.init == "shared":
        rdd = shared_rdd(
            sc,
            str(Path(ctx.data_dir).resolve()),
            spec.model,
            shape.workers,
            spec.ranks_per_node,
            spec.batch,
            ctx.total_iterations,
            spec.seed,
        )
    else:
        rdd = training_rdd(
            sc,
            str(Path(ctx.data_dir).resolve()),  # executors run in their own working dirs
            spec.model,
            shape.workers,
            per_executor * ctx.total_iterations,
            spec.seed,
            input_workers=max(1, spec.input_workers) if spec.input == "pipeline" else 0,
        )
    model = build_model(spec.model)
    model.set_seed(spec.seed)
    # A shared cluster: whether this run started it or reused it (spark_cluster_s ~0 then).
    first: dict[str, Any] = {"spark_cluster": used["how"]} if used["cluster"] == "per_study" else {}
    if spec.init == "shared":
        first["init_sha256"] = shared_init(model, spec)
    training = ShardSet(ctx.data_dir)
    heldout = (
        HeldOut(sc, ctx, shape.workers, global_batch, training.mean, training.std) if ctx.evaluates else None
    )
    ends = segment_ends(spec, evaluates=heldout is not None)
    optimizer = Optimizer.create(
        model=model,
        training_set=rdd,
        criterion=criterion(spec.model),
        optim_method=sgd(spec),
        end_trigger=MaxIteration(ends[0]),
        batch_size=global_batch,
    )
    if len(ends) > 1:  # each executor's SGD state (the momentum buffer) outlives a segment
        optimizer.value.reserveOptim(True)
    print(
        f"[bigdl] training {spec.model}: {shape.workers} executor(s) x {shape.cores_per_executor} core(s),"
        f" global batch {global_batch}, input {spec.input}; cluster up in"
        f" {times['spark_cluster_s']:.1f} s, SparkContext in {times['spark_context_s']:.1f} s;"
        f" executor pids {executors or 'not visible (SLURM)'}"
        + (f"; {len(ends)} segments (evaluations after {ends})" if len(ends) > 1 else ""),
        flush=True,
    )
    held["optimizing"] = threading.Event()
    live = held["live"] = LiveLog(
        ctx,
        log_path,
        times,
        executors,
        _stopper(held),
        remote=remote,
        dead_workers=cluster.dead_workers,
        first=first,
    ).start()
    try:
        for end in ends:
            optimizer.set_end_when(MaxIteration(end))
            held["stage"] = "gathering the trained model"
            trained = optimizer.optimize()
            if not live.wait_for(end, LOG_WAIT_S):
                if live.failure is not None:
                    return  # a NaN loss or a dead rank: report() says which
                raise BigDLTrainingError(
                    f"optimize() returned after iteration {end}, but BigDL's log shows"
                    f" {live.recorded} iterations {LOG_WAIT_S:.0f} s later ({log_path})"
                )
            held["stage"] = "evaluating the trained model on the held-out set"
            if heldout is None:
                ctx.eval_due(end - 1)  # records that nothing was evaluated
            elif evaluate_and_decide(ctx, end - 1, heldout, trained):
                held["expected"] = end  # the quality target is met: training stops here
                break
    finally:
        held["optimizing"].set()


def shared_init(model: Any, spec: RunSpec) -> str:
    """``init: shared``: load ``dlscale.data.initweights``' arrays into ``model`` (checked by
    reading them back) and return their digest, which the first iteration event carries."""
    weights = initweights.initial_weights(spec.model, spec.seed)
    arrays = shared_weights(spec.model, weights)
    model.set_weights(arrays)
    back = model.get_weights()
    if len(back) != len(arrays) or any(
        not np.array_equal(np.asarray(b).reshape(a.shape), a) for a, b in zip(arrays, back, strict=False)
    ):
        raise RunFailure(f"BigDL's {spec.model} does not hold the shared initialisation after set_weights")
    return initweights.digest(weights)


def apply_environment(eng: bigdl_settings.EngineSettings) -> None:
    """The settings' variables in this process's environment, before any JVM starts: the
    driver JVM, the daemons and (locally) the executors inherit it. A variable the settings
    leave unset is removed, so that "unset" holds whatever the calling shell had."""
    for name in bigdl_settings.MANAGED_VARS:
        os.environ.pop(name, None)
    os.environ.update(eng.env)


def record_settings(
    ctx: RunContext, driver_pid: int, executors: Mapping[int, int], cluster: Mapping[str, Any] | None = None
) -> None:
    """What the driver's and each executor's JVM actually carry, read back from /proc, kept
    beside the events (``bigdl-settings.json``, with the cluster the run used:
    ``describe_cluster``); a setting that did not arrive fails the run.

    Executors are visible in local mode only (under SLURM they run on other nodes).
    """
    eng = bigdl_settings.engine_settings(ctx.spec)
    seen: dict[str, Any] = {
        "asked": bigdl_settings.describe(ctx.spec),
        "driver": bigdl_settings.observed(driver_pid, eng),
    }
    if cluster is not None:
        seen["cluster"] = dict(cluster)
    seen["executors"] = {
        str(node): bigdl_settings.observed(pid, eng) for node, pid in sorted(executors.items())
    }
    atomic.write_text(
        ctx.writer.path.parent.parent / "bigdl-settings.json", json.dumps(seen, indent=1) + "\n"
    )
    for name, record in [
        ("driver", seen["driver"]),
        *((f"executor {n}", r) for n, r in seen["executors"].items()),
    ]:
        wrong = bigdl_settings.mismatches(record, eng)
        if wrong:
            raise RunFailure(
                f"BigDL settings did not reach the {name} JVM (pid {record['pid']}): {'; '.join(wrong)}"
            )


def keep_executor_logs(cluster: SparkCluster | SharedCluster, run_dir: Path) -> None:
    """With ``verbose``, the executors' logs (every MKL call / MKL-DNN primitive) beside the events."""
    for path in sorted(cluster.logs_dir.glob("worker*-executor*.log")):
        try:
            shutil.copyfile(path, run_dir / f"spark-{path.name}")
        except OSError as err:
            print(f"[bigdl] could not keep {path}: {err}", file=sys.stderr, flush=True)


def describe_cluster(cluster: SparkCluster | SharedCluster, note: str) -> dict[str, Any]:
    """Which cluster the run used: its own (per_run, started by it) or the study's (per_study:
    started by this run or reused), with its master's PID; ``note`` says why per_study was
    not used where it was asked for."""
    if isinstance(cluster, SharedCluster):
        return cluster.describe()
    master = cluster.daemons[0].pid if cluster.daemons else None
    return {"cluster": "per_run", "how": "started", "master_pid": master, **({"note": note} if note else {})}


def make_cluster(spec: RunSpec, shape: ClusterShape, root: Path) -> tuple[SparkCluster | SharedCluster, str]:
    """The run's cluster (the ``cluster`` option, where it is safe: ``shared_cluster.choose``)
    and, where per_study falls back to per_run, why."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    timeout = spec.options["startup_timeout_s"]
    asked = spec.options.get("cluster") or option_default("cluster")
    chosen, why = choose(asked, os.environ)
    if chosen == "per_study":
        eng = bigdl_settings.engine_settings(spec)
        key_env = {**{name: os.environ.get(name, "") for name in INHERITED_VARS}, **eng.env}
        owner = int(os.environ[ENV_OWNER_PID])
        key = cluster_key(shape, key_env, str(spark_home), f"{owner}:{start_time(owner)}")
        return SharedCluster(Path(os.environ[ENV_CLUSTERS]), key, spark_home, root, shape, owner, timeout), ""
    note = why if asked == "per_study" else ""
    if note:
        print(f"[bigdl] {note}", flush=True)
    mode = os.environ.get("DLSCALE_SPARK_MODE", "local")
    return SparkCluster(
        spark_home=spark_home, root=root, shape=shape, mode=mode, startup_timeout_s=timeout
    ), note


def peers(ctx: RunContext) -> list[tuple[str, str]]:
    """None besides the master: the driver starts its own Spark daemons, and they register
    with it."""
    return []


def train(ctx: RunContext) -> None:
    spec = ctx.spec
    java_version()  # a missing Java is said plainly, before any daemon starts
    shape = cluster_shape(spec, executor_memory(spec))
    global_batch = bigdl_batch(spec, shape)
    apply_environment(bigdl_settings.engine_settings(spec))  # a setting BigDL cannot run fails here
    # Absolute: the workflow hands relative run paths, and BigDL's MKL-DNN loader refuses a
    # relative java.io.tmpdir ("Expecting an absolute path of the library").
    root = (ctx.writer.path.parent / "spark").resolve()
    log_path = root / "logs" / "driver.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cluster, note = make_cluster(spec, shape, root)
    held: dict[str, Any] = {"cluster_note": note}
    failure: BaseException | None = None
    described = ""
    try:
        _optimize(ctx, cluster, log_path, global_batch, held)
    except BaseException as err:  # noqa: BLE001 - recorded below, after the cleanup
        failure = err
        described = _first_line(err)  # now: a Py4JJavaError asks the JVM for its text
    finally:
        # A second SIGTERM must not cut the clean-up short (the launcher waits 10 s before
        # SIGKILL, and the daemons die with this process anyway: PR_SET_PDEATHSIG).
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if "live" in held:  # before the executors go: the last look must see them alive
                held["live"].finish(failure)
            # No graceful stop after SIGTERM: py4j may be in the middle of a call.
            _stop_driver(held, graceful=failure is None or isinstance(failure, Exception))
            cluster.stop()
            if isinstance(cluster, SharedCluster):
                # The executors are the shared workers' children, not the launcher's: their
                # CPU is this run's own, not other work (the launcher's contention probe).
                ctx.record_measured(cpu_outside_launcher_s=round(cluster.outside_cpu_s, 3))
                print(f"[bigdl] application ended; the shared cluster stays: pids {cluster.pids}", flush=True)
            else:
                print(f"[bigdl] Spark daemons stopped: pids {cluster.pids}", flush=True)
            keep_log(log_path, ctx.writer.path.parent.parent / "bigdl-driver.log")
            if spec.options.get("verbose"):
                keep_executor_logs(cluster, ctx.writer.path.parent.parent)
        finally:
            signal.signal(signal.SIGTERM, previous)
    report(
        ctx,
        log_path,
        held.get("live"),
        failure,
        described,
        expected=held.get("expected", ctx.total_iterations),
        stage=held.get("stage", "gathering the trained model"),
    )


def keep_log(log_path: Path, target: Path) -> None:
    """Keep BigDL's driver log beside the run's events (the work dir goes after success):
    every number in the events can be checked against the line it came from."""
    if log_path.exists():
        try:
            shutil.copyfile(log_path, target)
        except OSError as err:
            print(f"[bigdl] could not keep the driver log: {err}", file=sys.stderr, flush=True)


def report(
    ctx: RunContext,
    log_path: Path,
    live: LiveLog | None,
    failure: BaseException | None,
    described: str = "",
    expected: int | None = None,
    stage: str = "gathering the trained model",
) -> None:
    """End the run: ok if BigDL logged every iteration, else fail with the clearest reason.

    In order: SIGTERM and the like keep their own reason; then a fault the live log found
    (a NaN/inf loss; a dead executor, unless the logs show it ran out of memory); then the
    reason the logs give for BigDL's failure. The iterations are already recorded.

    One failure does not fail the run: after its last iteration, DistriOptimizer gathers
    the trained model back to the driver, and that gather can run out of executor memory
    (seen with AlexNet and ResNet-50) although every step was done and logged. The
    measurement of the steps is complete, so the run stands, without its last held-out
    evaluation (which needs that model: no number is made up), and the error goes
    into the run's ``warnings`` (rank_end, then run_end), where the tables and a person see
    it; so does a failure of that evaluation (``stage`` says which came after the steps).

    ``expected``: the iterations the run was to train (all, unless its quality target
    stopped it earlier).
    """
    expected = ctx.total_iterations if expected is None else expected
    recorded = live.recorded if live is not None else 0
    complete = recorded == expected
    if failure is not None and not isinstance(failure, Exception):
        raise failure  # Terminated (SIGTERM) and the like keep their own reason
    reason = None
    if failure is not None or (live is not None and live.failure is not None):
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        console = log_path.with_name("driver-console.log")
        console_text = console.read_text(errors="replace") if console.exists() else ""
        reason = bigdl_log.failure_reason(text) or bigdl_log.failure_reason(console_text) or described
        cause = bigdl_settings.innermost_cause(text)
        if reason and cause and cause not in reason:  # e.g. a layer MKL-DNN refuses, under a wrapper
            reason = f"{reason} (caused by {cause}; engine {ctx.spec.options.get('engine') or 'mklblas'})"
    found = live.failure if live is not None else None
    if isinstance(found, NonFiniteLoss):
        raise found
    if isinstance(found, RunFailure):
        if reason and "OutOfMemoryError" in reason:
            raise RunFailure(f"{reason} (then {found})") from found
        raise found
    if found is not None:
        raise BigDLTrainingError(f"BigDL's log is unreadable: {found}") from found
    if failure is None:
        if not complete:
            raise BigDLTrainingError(f"BigDL logged {recorded} iterations, expected {expected} ({log_path})")
        return
    if complete:
        warning = (
            f"all {recorded} iterations done and logged; then BigDL failed {stage}: {reason};"
            " no held-out evaluation after the last iteration"
        )
        ctx.warnings.append(warning)
        print(f"[bigdl] WARNING: {warning}. The measurements stand.", file=sys.stderr, flush=True)
        return
    raise BigDLTrainingError(f"{reason} (after {recorded} iterations; log {log_path})") from failure


def _first_line(err: BaseException) -> str:
    try:
        text = str(err).strip().splitlines()
    except Exception:  # noqa: BLE001 - a Py4JJavaError whose JVM is gone cannot say more
        text = []
    lines = [line for line in text if line.strip() and not line.startswith("\tat ")]
    first = f"{type(err).__name__}: {' '.join(lines[:2])}" if lines else type(err).__name__
    return first if len(first) <= 300 else first[:297] + "..."
