"""Spark, BigDL's transport: a job's round trip and a block exchange, against the number of executors.

``python -m dlscale.commbench.bigdl --network host --executors 1 2 4 --sizes ... --out FILE``
(in the bigdl venv: pyspark and a Java runtime; BigDL itself is not needed). A Spark
standalone cluster of ``max(executors)`` workers, one executor of one core each (as the
BigDL runner starts it: ``dlscale.runners.bigdl.spark``; worker ``k`` on emulated node
``k``, master and driver on node 0), and one application; then, for each ``k`` in
``--executors``:

* ``job``: a JVM-only Spark job of ``k`` tasks (``JavaRDD.count`` of ``k`` partitions, one
  per executor), timed from the driver: what each of BigDL's per-iteration jobs pays to be
  scheduled, launched on ``k`` executors and collected, with no work in it. The driver
  serialises, sends and collects one task per executor, so this grows with ``k``;
* ``shuffle``: ``k`` executors each holding ``nbytes`` (cached, in memory) exchange them
  all-to-all (a round-robin repartition into ``k`` partitions, consumed by Spark's
  ``noop`` writer): every executor sends ``(k-1)/k`` of its bytes to the others through
  Spark's block transfer service (netty), as BigDL's ``AllReduceParameter`` moves
  gradient slices. It also writes shuffle files (page cache), which BigDL's in-memory
  blocks do not: an upper bound of BigDL's per-byte cost.

Python never runs in the timed jobs (no Python workers): the times are Spark's own.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dlscale.commbench import common
from dlscale.host import netns

MODULE = "dlscale.commbench.bigdl"
EXECUTOR_MEMORY = "768m"
#: Bytes per row of the shuffled data (rows of 64 KiB, as BigDL's gradient slices are large).
PAYLOAD = 1 << 16
#: The smallest exchange timed per executor.
SHUFFLE_MIN_BYTES = 1 << 20


def _progress(message: str) -> None:
    print(f"[commbench] spark: {message}", file=sys.stderr, flush=True)


def _wait_for_executors(sc: Any, count: int, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while sc._jsc.sc().getExecutorMemoryStatus().size() < count + 1:  # + the driver
        if time.time() > deadline:
            raise common.BenchFailed(
                f"only {sc._jsc.sc().getExecutorMemoryStatus().size() - 1} of {count} executors registered"
            )
        time.sleep(0.2)


def driver_main(args: argparse.Namespace) -> None:
    """Runs on node 0 (its own namespace): the cluster, the application and every timed job."""
    import pyspark
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from dlscale.runners.bigdl.spark import SECRET_KEY, ClusterShape, SparkCluster, node_address

    if args.role == "driver-isolated":  # one namespace for all: every daemon stays in it
        os.environ.pop(netns.ENV_NODE_NAMESPACES, None)
        os.environ.pop(netns.ENV_NODE_ADDRESSES, None)
    executors = sorted(set(args.executors))
    with tempfile.TemporaryDirectory(prefix="cb-spark-") as root:
        scratch = Path(root) / "scratch" / "driver"
        scratch.mkdir(parents=True)
        os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
        host = node_address(0)
        os.environ["SPARK_LOCAL_IP"] = host
        cluster = SparkCluster(
            spark_home=Path(pyspark.__file__).parent,
            root=Path(root),
            shape=ClusterShape(max(executors), 1, EXECUTOR_MEMORY),
            startup_timeout_s=min(args.timeout_s, 300),
        )
        with cluster:
            conf = SparkConf().setMaster(str(cluster.master_url)).setAppName("dlscale commbench")
            for key, value in {
                "spark.executor.cores": 1,
                "spark.cores.max": max(executors),
                "spark.executor.memory": EXECUTOR_MEMORY,
                "spark.driver.memory": "1g",
                "spark.driver.host": host,
                "spark.driver.bindAddress": host,
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.adaptive.enabled": "false",
                "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                "spark.pyspark.python": sys.executable,
                "spark.executor.extraJavaOptions": "-XX:-UsePerfData",
                "spark.driver.extraJavaOptions": "-XX:-UsePerfData",
                **cluster.driver_settings(),  # authentication on, as the runner's driver
            }.items():
                conf.set(key, str(value))
            started = time.time()
            # As the runner: the cluster's secret set once the driver JVM has started, so that
            # it is on no command line (without it no executor can register: SparkContext stopped).
            gateway = launch_gateway(conf)
            conf.set(SECRET_KEY, cluster.secret)
            sc = SparkContext(conf=conf, gateway=gateway)
            try:
                sc.setLogLevel("WARN")
                _wait_for_executors(sc, max(executors), min(args.timeout_s, 300))
                _progress(
                    f"cluster {cluster.startup_s:.1f} s, context and executors {time.time() - started:.1f} s"
                )
                spark = SparkSession(sc)
                jobs(sc, args, executors)
                _progress(f"jobs done at {time.time() - started:.1f} s")
                shuffles(spark, args, executors)
                _progress(f"shuffles done at {time.time() - started:.1f} s")
            finally:
                sc.stop()


def jobs(sc: Any, args: argparse.Namespace, executors: list[int]) -> None:
    for k in executors:
        items = sc._jvm.java.util.ArrayList()
        for i in range(k):
            items.add(i)
        rdd = sc._jsc.parallelize(items, k)
        for _ in range(3):  # warm-up: class loading, JIT
            rdd.count()
        for repeat in range(max(args.repeats, 10)):
            seconds = common.timed(rdd.count, lambda: None)
            common.emit(
                {
                    "library": "spark",
                    "op": "job",
                    "world": k,
                    "nbytes": 0,
                    "repeat": repeat,
                    "seconds": seconds,
                }
            )


def shuffles(spark: Any, args: argparse.Namespace, executors: list[int]) -> None:
    # at least 1 MiB an executor (rows of 64 KiB): smaller sizes time Spark's per-row and
    # per-stage overheads, which the job rows already have, not the exchange
    large = [s for s in args.sizes if s >= SHUFFLE_MIN_BYTES] or [max(args.sizes)]
    sizes = common.sizes_for(large, args.network, args.max_op_s, 1.0)
    for k in executors:
        for nbytes in sizes:
            payload = min(PAYLOAD, max(4, nbytes))
            rows = max(1, nbytes // payload)
            frame = (
                spark.range(0, k * rows, 1, k)
                .selectExpr(f"unhex(repeat('00', {payload})) AS payload")
                .cache()
            )
            frame.count()

            def exchange(frame: Any = frame, k: int = k) -> None:
                frame.repartition(k).write.format("noop").mode("overwrite").save()

            exchange()  # warm-up
            for repeat in range(args.repeats):
                seconds = common.timed(exchange, lambda: None)
                common.emit(
                    {"library": "spark", "op": "shuffle", "world": k, "nbytes": rows * payload,
                     "repeat": repeat, "seconds": seconds}
                )  # fmt: skip
            frame.unpersist(blocking=True)


def rank_main(args: argparse.Namespace) -> None:
    driver_main(args)


def drive(args: argparse.Namespace) -> list[dict[str, Any]]:
    nodes = max(args.executors)
    with common.network(nodes, args.network, args.latency_us) as net:
        role = "driver" if net is not None and net.preset is not None else "driver-isolated"
        argv = [
            *common.on_node(net, 0),
            *common.rank_argv(
                MODULE, args, 0, nodes, "spark:0", common.interface(net), args.sizes, role=role
            ),
            "--executors",
            *map(str, args.executors),
        ]
        print(f"[commbench] spark, executors {args.executors} on {args.network}", file=sys.stderr, flush=True)
        return common.run_processes([argv], common.rank_env(net), args.timeout_s)


def main(argv: list[str] | None = None) -> int:
    return common.main(
        __doc__.splitlines()[0], rank_main, drive, {"framework": "bigdl", "library": "spark"}, argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
