"""BigDL runner: DistriOptimizer on a Spark standalone cluster of the run's own.

The driver (this process, rank 0) starts a master and one worker per node
(``spark.SparkCluster``), connects a SparkContext with BigDL's engine, trains the study's
model for exactly warm-up + timed iterations, and stops everything by PID, whatever
happens. Iteration events come from BigDL's own driver log (``dlscale.parse.bigdl``),
parsed after training: the log's millisecond timestamps give each event its real time, and
a run that fails still reports the iterations it did, then fails with the reason found in
the log (e.g. ``java.lang.OutOfMemoryError: Java heap space``).

Mapping of the study onto Spark (``spark.ClusterShape``): node -> worker with one executor
of ``ranks_per_node x threads_per_rank`` cores; a rank -> an executor core (BigDL trains one
model replica per core); DistriOptimizer's batch = the study's global batch (batch per rank
x ranks), split evenly over executors x cores, so each replica trains on the study's batch
per rank when threads_per_rank is 1.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import dlscale
from dlscale.events import PartWriter
from dlscale.parse import bigdl as bigdl_log
from dlscale.runners.bigdl.spark import ClusterShape, SparkCluster, bigdl_batch, cluster_shape
from dlscale.runners.common import RunContext

LOG4J2 = Path(__file__).with_name("log4j2.properties")
REPO = Path(dlscale.__file__).resolve().parent.parent
DEFAULTS: dict[str, Any] = {
    "driver_memory": "3g",
    "executor_memory": {"lenet": "1g", "autoencoder": "1g", "alexnet": "5g", "resnet50": "6g"},
    "startup_timeout_s": 180,
}


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


def options(spec: dict[str, Any]) -> dict[str, Any]:
    return {**DEFAULTS, **(spec.get("options") or {})}


def executor_memory(spec: dict[str, Any]) -> str:
    """The executor heap of this run's model: one size for all, or the model's own."""
    memory = options(spec)["executor_memory"]
    if isinstance(memory, dict):
        return str(memory.get(spec["model"]) or DEFAULTS["executor_memory"][spec["model"]])
    return str(memory)


def spark_conf(cluster: SparkCluster, spec: dict[str, Any], log_path: Path) -> Any:
    """The SparkConf of the driver: BigDL's required settings plus everything kept in the run dir."""
    from bigdl.dllib.utils.common import create_spark_conf
    from bigdl.dllib.utils.engine import get_bigdl_jars

    opts = options(spec)
    shape = cluster.shape
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
    ]
    conf = create_spark_conf().setMaster(str(cluster.master_url)).setAppName(f"dlscale {spec['run_id']}")
    settings = {
        "spark.executor.cores": shape.cores_per_executor,
        "spark.cores.max": shape.total_cores,
        "spark.executor.memory": shape.executor_memory,
        "spark.driver.memory": opts["driver_memory"],
        # Without the jars on the executors' class path, BigDL's lambdas fail to deserialise.
        "spark.executor.extraClassPath": jars,
        "spark.driver.extraJavaOptions": " ".join(driver_java),
        "spark.executor.extraJavaOptions": (
            f"-Djava.io.tmpdir={tmp} -Dbigdl.utils.LoggerFilter.disable=true -XX:-UsePerfData"
        ),
        "spark.executorEnv.PYTHONPATH": str(REPO),
        "spark.pyspark.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.task.maxFailures": 1,
        "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{int(opts['startup_timeout_s'])}s",
    }
    if cluster.mode == "local":
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    for key, value in settings.items():
        conf.set(key, str(value))
    return conf


def write_executor_ranks(ctx: RunContext, shape: ClusterShape) -> None:
    """Say where every rank ran: rank r is a core of the executor on node r // ranks_per_node.

    The executors are Spark's processes, not the launcher's, so the driver writes their
    ``rank_start`` (only that: the driver reports every iteration) into their part files.
    """
    per_node = int(ctx.spec["ranks_per_node"])
    base = socket.gethostname()
    for rank in range(1, ctx.world_size):
        node = rank // per_node
        with PartWriter(ctx.writer.path.with_name(f"rank{rank}.jsonl")) as part:
            part.emit(
                "rank_start",
                rank=rank,
                host=f"{base}/node{node}" if ctx.placement.launcher != "slurm" else f"node{node}",
                role=f"core of the Spark executor on worker {node}",
                threads=int(ctx.spec["threads_per_rank"]),
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


def _optimize(
    ctx: RunContext, cluster: SparkCluster, log_path: Path, global_batch: int, held: dict[str, Any]
) -> dict[str, float]:
    """Connect, build, train; returns the start-up times it measured. The SparkContext is
    put in ``held`` as soon as it exists, so that the caller can stop it whatever happens."""
    from bigdl.dllib.optim.optimizer import SGD, MaxIteration, Optimizer
    from bigdl.dllib.utils.common import init_engine
    from pyspark import SparkContext

    from dlscale.runners.bigdl.data import training_rdd
    from dlscale.runners.bigdl.models import build_model, criterion

    spec = ctx.spec
    shape = cluster.shape
    started = time.time()
    # The driver's scratch space (SPARK_LOCAL_DIRS, as the workers', rather than
    # spark.local.dir, which Spark warns the cluster manager overrides on executors).
    scratch = cluster.root / "scratch" / "driver"
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    conf = spark_conf(cluster, spec, log_path)
    held["gateway"] = start_driver_jvm(conf, log_path.with_name("driver-console.log"))
    sc = held["sc"] = SparkContext(conf=conf, gateway=held["gateway"])
    init_engine()
    times = {"spark_cluster_s": float(cluster.startup_s or 0.0), "spark_context_s": time.time() - started}
    held["times"] = times  # kept for the events even if training fails
    write_executor_ranks(ctx, shape)
    per_executor = global_batch // shape.workers
    rdd = training_rdd(
        sc,
        str(Path(ctx.data_dir).resolve()),  # executors run in their own working dirs
        spec["model"],
        shape.workers,
        per_executor * ctx.total_iterations,
        int(spec["seed"]),
    )
    model = build_model(spec["model"])
    model.set_seed(int(spec["seed"]))
    optimizer = Optimizer.create(
        model=model,
        training_set=rdd,
        criterion=criterion(spec["model"]),
        optim_method=SGD(
            learningrate=float(spec["learning_rate"]), momentum=float(spec["momentum"]), dampening=0.0
        ),
        end_trigger=MaxIteration(ctx.total_iterations),
        batch_size=global_batch,
    )
    print(
        f"[bigdl] training {spec['model']}: {shape.workers} executor(s) x {shape.cores_per_executor} core(s),"
        f" global batch {global_batch}; cluster up in {times['spark_cluster_s']:.1f} s,"
        f" SparkContext in {times['spark_context_s']:.1f} s",
        flush=True,
    )
    optimizer.optimize()
    return times


def train(ctx: RunContext) -> None:
    spec = ctx.spec
    opts = options(spec)
    java_version()  # a missing Java is said plainly, before any daemon starts
    shape = cluster_shape(spec, executor_memory(spec))
    global_batch = bigdl_batch(spec, shape)
    root = ctx.writer.path.parent / "spark"
    log_path = root / "logs" / "driver.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    import pyspark

    cluster = SparkCluster(
        spark_home=Path(pyspark.__file__).parent,
        root=root,
        shape=shape,
        mode=os.environ.get("DLSCALE_SPARK_MODE", "local"),
        startup_timeout_s=float(opts["startup_timeout_s"]),
    )
    held: dict[str, Any] = {}
    failure: BaseException | None = None
    described = ""
    times: dict[str, float] = {}
    try:
        cluster.start()
        print(f"[bigdl] Spark master {cluster.master_url}; daemon pids {cluster.pids}", flush=True)
        times = _optimize(ctx, cluster, log_path, global_batch, held)
    except BaseException as err:  # noqa: BLE001 - recorded below, after the cleanup
        failure = err
        described = _first_line(err)  # now: a Py4JJavaError asks the JVM for its text
    finally:
        # A second SIGTERM must not cut the clean-up short (the launcher waits 10 s before
        # SIGKILL, and the daemons die with this process anyway: PR_SET_PDEATHSIG).
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            # No graceful stop after SIGTERM: py4j may be in the middle of a call.
            _stop_driver(held, graceful=failure is None or isinstance(failure, Exception))
            cluster.stop()
            print(f"[bigdl] Spark daemons stopped: pids {cluster.pids}", flush=True)
            keep_log(log_path, ctx.writer.path.parent.parent / "bigdl-driver.log")
        finally:
            signal.signal(signal.SIGTERM, previous)
    report(ctx, log_path, times or held.get("times", {}), failure, described)


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
    times: dict[str, float],
    failure: BaseException | None,
    described: str = "",
) -> None:
    """Record the iterations BigDL logged; then fail with the logs' reason if training failed.

    One failure does not fail the run: after its last iteration, DistriOptimizer gathers
    the trained model back to the driver, and that gather can run out of executor memory
    (seen with AlexNet and ResNet-50) although every step was done and logged. As with a
    framework that crashes on its way out after its last event (dlscale.launch), the
    measurement stands; the error is kept on the last iteration event
    (``after_training_error``) and said in run.log.
    """
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    events = bigdl_log.parse_text(text, str(log_path), strict=failure is None)
    reason = None
    if isinstance(failure, Exception):
        console = log_path.with_name("driver-console.log")
        console_text = console.read_text(errors="replace") if console.exists() else ""
        reason = bigdl_log.failure_reason(text) or bigdl_log.failure_reason(console_text) or described
    complete = len(events) == ctx.total_iterations
    for index, event in enumerate(events):
        fields = {k: v for k, v in event.items() if k not in ("event", "rank", "iteration", "time")}
        if event["time"] is not None:
            fields["time"] = event["time"]
        if reason and complete and index == len(events) - 1:
            fields["after_training_error"] = reason
        ctx.record_iteration(event["iteration"], **fields, **times)
    if failure is None:
        if not complete:
            raise BigDLTrainingError(
                f"BigDL logged {len(events)} iterations, expected {ctx.total_iterations} ({log_path})"
            )
        return
    if not isinstance(failure, Exception):
        raise failure  # Terminated (SIGTERM) and the like keep their own reason
    if complete:
        print(
            f"[bigdl] WARNING: all {len(events)} iterations done and logged; then BigDL failed"
            f" gathering the trained model ({reason}). The measurements stand.",
            file=sys.stderr,
            flush=True,
        )
        return
    raise BigDLTrainingError(f"{reason} (after {len(events)} iterations; log {log_path})") from failure


def _first_line(err: BaseException) -> str:
    try:
        text = str(err).strip().splitlines()
    except Exception:  # noqa: BLE001 - a Py4JJavaError whose JVM is gone cannot say more
        text = []
    lines = [line for line in text if line.strip() and not line.startswith("\tat ")]
    first = f"{type(err).__name__}: {' '.join(lines[:2])}" if lines else type(err).__name__
    return first if len(first) <= 300 else first[:297] + "..."
