"""The bare BigDL loop, inside the BigDL venv (``python -m benchmarks.bigdl_worker bare``;
arguments and output: benchmarks.worker_cli).

BigDL's plainest training loop on the runner's model, batch and loss: a SparkContext, BigDL's
engine with the runner's settings (``dlscale.runners.bigdl.settings``: engine, threads, batch
split, as JVM properties and variables), the same model (``dlscale.runners.bigdl.models``,
with the shared initialisation where the spec has it), the same samples
(``dlscale.runners.bigdl.data.training_rdd``, one partition per executor), the runner's SGD
(``dlscale.runners.bigdl.train.sgd``: its rate rule and warm-up ramp), and
``Optimizer.create(...).optimize()`` for warm-up + timed iterations, in one of two
deployments (``--deployment``):

* ``local``: ``local[C]`` (driver and executor in one JVM, no master or worker; C = the
  run's cores): BigDL's plainest deployment;
* ``standalone``: the runner's own deployment, started by the runner's own code
  (``dlscale.runners.bigdl.spark.SparkCluster``: a master and a worker JVM, the worker
  forks the executor JVM; the driver JVM with the runner's SparkConf,
  ``dlscale.runners.bigdl.train.spark_conf``), but none of the runner's harness (no
  launcher, no live log follower, no executor watch, no event writing).

standalone / local is the deployment's cost; the runner / standalone the harness's. Both
are timed from BigDL's own driver log (the runner's log4j2 set-up and parser), the same
source the runner's events come from. Then numpy's float32 matmul peak with the same
threads.

One process per measurement: pyspark allows one SparkContext per Python process, and a
stopped one leaves JVM state behind, so repeats are separate processes (the driver
alternates them with the runner's).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import worker_cli
from benchmarks.bare_common import matmul_peak, numpy_matmul
from benchmarks.timing import log_rates
from dlscale.runspec import RunSpec


def jvm_bytes(size: str) -> int:
    """A JVM size (``512m``, ``3g``, ``1048576``) in bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = size.strip().lower()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def local_heap(driver: str, executor: str) -> str:
    """The heap of local mode's one JVM: the driver's and the executor's together (``4608m``).

    That JVM is both: it holds the driver's copy of the model and the executor's (cached
    model, gradient and weight blocks, im2col buffers). The larger of the two was not
    enough for ResNet-50 (java.lang.OutOfMemoryError: Java heap space in the first job).
    """
    return f"{(jvm_bytes(driver) + jvm_bytes(executor)) >> 20}m"


def local_conf(spec: RunSpec, work: Path, log_path: Path) -> Any:
    """A local-mode SparkConf with the runner's log4j2 file and JVM flags (no cluster)."""
    from bigdl.dllib.utils.common import create_spark_conf

    from dlscale.runners.bigdl import settings as bigdl_settings
    from dlscale.runners.bigdl.train import LOG4J2, driver_memory, executor_memory

    cores = spec.ranks_per_node * spec.threads_per_rank
    tmp = work / "jvm-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    java = [
        f"-Dlog4j2.configurationFile={LOG4J2}",
        f"-Ddlscale.bigdl.log={log_path}",
        "-Dbigdl.utils.LoggerFilter.disable=true",
        f"-Djava.io.tmpdir={tmp}",
        "-XX:-UsePerfData",
        *bigdl_settings.java_options(bigdl_settings.engine_settings(spec)),  # the runner's engine
    ]
    conf = create_spark_conf().setMaster(f"local[{cores}]").setAppName(f"dlscale bench bare {spec.model}")
    settings = {
        # local mode: the driver JVM is the executor too, so it gets both heaps (local_heap).
        "spark.driver.memory": local_heap(driver_memory(spec), executor_memory(spec)),
        "spark.driver.extraJavaOptions": " ".join(java),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.local.dir": str(work / "scratch"),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
    }
    for key, value in settings.items():
        conf.set(key, str(value))
    return conf


def standalone_cluster(spec: RunSpec, work: Path) -> Any:
    """The runner's Spark standalone cluster for ``spec`` (one worker per node), started."""
    import pyspark

    from dlscale.runners.bigdl.spark import SparkCluster, cluster_shape
    from dlscale.runners.bigdl.train import executor_memory

    cluster = SparkCluster(
        spark_home=Path(pyspark.__file__).parent,
        root=work / "spark",
        shape=cluster_shape(spec, executor_memory(spec)),
        mode="local",
        startup_timeout_s=spec.options["startup_timeout_s"],
    )
    cluster.start()
    return cluster


#: Seconds ``optimize`` may go on after BigDL logged its last iteration (DistriOptimizer then
#: gathers the trained model to the driver, which the benchmark never uses) before its Spark
#: jobs are cancelled; then as long again for the call to return. A LeNet gather takes under
#: a second; a local[1] AlexNet one was seen to hang for 13 minutes, and ResNet-50's to fail.
GATHER_GRACE_S = 60.0
#: How often the driver log is read for the iterations done while ``optimize`` runs.
POLL_S = 1.0
#: The start of the warning of a gather whose py4j call still runs: the one case in which
#: the SparkContext must not be stopped (the process's end stops its JVM instead).
STILL_RUNNING = "the post-training gather did not end"


def iterations_logged(log_path: Path) -> int:
    """BigDL's iteration lines in its driver log so far (0 before the log exists)."""
    from dlscale.parse import bigdl as bigdl_log

    if not log_path.exists():
        return 0
    return sum(1 for e in bigdl_log.parse(log_path, strict=False) if e["event"] == "iteration")


def optimize_until_logged(sc: Any, optimizer: Any, log_path: Path, total: int) -> str | None:
    """Run ``optimizer.optimize()`` and return once it has, or once every one of the ``total``
    iterations is in the log and the post-training gather has had ``GATHER_GRACE_S``.

    As in the runner (``dlscale.runners.bigdl.train.report``), the measurement is the
    logged iterations; what BigDL does after the last one (gathering the trained model) is
    not timed and may fail or hang without losing it. Returns None if ``optimize`` ended
    cleanly, else what happened after the last iteration (a warning for the row); raises
    what ``optimize`` raised if the iterations are not all logged.
    """
    failure: list[BaseException] = []

    def target() -> None:
        try:
            optimizer.optimize()
        except BaseException as err:  # noqa: BLE001 - judged below, against the log
            failure.append(err)

    thread = threading.Thread(target=target, name="bigdl-optimize", daemon=True)
    thread.start()
    complete_at: float | None = None
    cancelled = False
    while thread.is_alive():
        thread.join(POLL_S)
        if complete_at is None and iterations_logged(log_path) >= total:
            complete_at = time.monotonic()
        if complete_at is not None and not cancelled and time.monotonic() - complete_at > GATHER_GRACE_S:
            print(f"[bench] BigDL still in optimize {GATHER_GRACE_S:.0f} s after its last iteration:"
                  " cancelling its Spark jobs (the post-training gather)", file=sys.stderr, flush=True)  # fmt: skip
            sc.cancelAllJobs()
            cancelled = True
            thread.join(GATHER_GRACE_S)
            break
    logged = iterations_logged(log_path)
    if logged < total:
        if failure:
            raise failure[0]
        raise RuntimeError(f"BigDL's optimize ended with {logged} of {total} iterations logged")
    if thread.is_alive():
        return f"{STILL_RUNNING} {2 * GATHER_GRACE_S:.0f} s after the last iteration"
    if cancelled:
        return f"the post-training gather was cancelled {GATHER_GRACE_S:.0f} s after the last iteration"
    if failure:
        first = str(failure[0]).strip().splitlines()
        return f"the post-training gather failed: {type(failure[0]).__name__}: {first[0] if first else ''}"[
            :300
        ]
    return None


def bare(spec: RunSpec, data: Path, deployment: str = "local") -> dict[str, Any]:
    from bigdl.dllib.optim.optimizer import MaxIteration, Optimizer
    from bigdl.dllib.utils.common import init_engine
    from pyspark import SparkContext

    from dlscale.parse import bigdl as bigdl_log
    from dlscale.runners.bigdl import settings as bigdl_settings
    from dlscale.runners.bigdl.data import training_rdd
    from dlscale.runners.bigdl.models import build_model, criterion
    from dlscale.runners.bigdl.train import apply_environment, sgd, shared_init

    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this venv, as the runner's
    # The runner's engine settings (a model the engine cannot run is refused here, as there),
    # their variables in this process before any JVM starts, as the runner's driver has them.
    apply_environment(bigdl_settings.engine_settings(spec))
    name, batch, total = spec.model, spec.global_batch, spec.total_iterations
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-bigdl-") as tmp:
        work = Path(tmp)
        log_path = work / "driver.log"
        started = time.perf_counter()
        cluster = None
        after: str | None = None
        try:
            if deployment == "standalone":
                from dlscale.runners.bigdl.train import spark_conf

                cluster = standalone_cluster(spec, work)
                scratch = work / "spark" / "scratch" / "driver"
                scratch.mkdir(parents=True, exist_ok=True)
                os.environ["SPARK_LOCAL_DIRS"] = str(scratch)  # as the runner's driver
                from pyspark.java_gateway import launch_gateway

                from dlscale.runners.bigdl.spark import SECRET_KEY

                conf, partitions = spark_conf(cluster, spec, log_path), cluster.shape.workers
                # As the runner: the cluster's secret set after the driver JVM started.
                gateway = launch_gateway(conf)
                conf.set(SECRET_KEY, cluster.secret)
            else:
                conf, partitions, gateway = local_conf(spec, work, log_path), 1, None
            sc = SparkContext(conf=conf, gateway=gateway)
            try:
                init_engine()
                per_partition = batch // partitions
                rdd = training_rdd(
                    sc, str(Path(data).resolve()), name, partitions, per_partition * total, spec.seed
                )
                model = build_model(name)
                model.set_seed(spec.seed)
                if spec.init == "shared":
                    shared_init(model, spec)
                optimizer = Optimizer.create(
                    model=model,
                    training_set=rdd,
                    criterion=criterion(name),
                    optim_method=sgd(spec),
                    end_trigger=MaxIteration(total),
                    batch_size=batch,
                )
                ready = time.perf_counter()
                after = optimize_until_logged(sc, optimizer, log_path, total)
                done = time.perf_counter()
            finally:
                if not (after or "").startswith(STILL_RUNNING):
                    sc.stop()  # not while a py4j call still hangs: the process's end stops its JVM
        finally:
            if cluster is not None:
                cluster.stop()
        events = [e for e in bigdl_log.parse(log_path) if e["event"] == "iteration"]
    if len(events) != total:
        raise RuntimeError(f"BigDL logged {len(events)} iterations, expected {total} ({deployment})")
    return {
        **log_rates(events, spec.warmup, batch),
        "process_to_optimize_s": ready - started,
        "optimize_wall_s": done - ready,
        **({"warning": after} if after else {}),
    }


#: The arm each deployment's bare loop is reported as: ``bare`` is the harness ratio's
#: denominator (the runner's own deployment), ``bare_local`` the deployment's reference.
ARMS = {"standalone": "bare", "local": "bare_local"}


def bare_and_peak(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    yield {
        "arm": ARMS[args.deployment],
        "deployment": args.deployment,
        **bare(args.spec, args.data, args.deployment),
    }
    if args.peak:
        yield {"arm": "peak", **matmul_peak(numpy_matmul)}


COMMANDS = {"bare": bare_and_peak}

if __name__ == "__main__":
    worker_cli.run(COMMANDS, __doc__)
