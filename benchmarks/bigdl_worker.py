"""The bare BigDL loop, inside the BigDL venv (``python -m benchmarks.bigdl_worker bare``).

BigDL's plainest training loop on the runner's model, batch and loss: a SparkContext on
``local[C]`` (driver and executor in one JVM, no standalone master or worker, C = the
run's cores), BigDL's engine, the same model (``dlscale.runners.bigdl.models``), the same
samples (``dlscale.runners.bigdl.data.training_rdd``, one partition), the same SGD, and
``Optimizer.create(...).optimize()`` for warm-up + timed iterations. It is timed from
BigDL's own driver log (the runner's log4j2 set-up and parser), the same source the
runner's events come from, so both arms are measured the same way. Then numpy's float32
matmul peak with the same threads.

One process per measurement: pyspark allows one SparkContext per Python process, and a
stopped one leaves JVM state behind, so repeats are separate processes (the driver
alternates them with the runner's).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bare_common import emit, matmul_peak, numpy_matmul
from benchmarks.bigdl_bench import log_rates


def local_conf(spec: dict[str, Any], work: Path, log_path: Path) -> Any:
    """A local-mode SparkConf with the runner's log4j2 file and JVM flags (no cluster)."""
    from bigdl.dllib.utils.common import create_spark_conf

    from dlscale.runners.bigdl.train import LOG4J2, options

    cores = int(spec["ranks_per_node"]) * int(spec["threads_per_rank"])
    tmp = work / "jvm-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    java = [
        f"-Dlog4j2.configurationFile={LOG4J2}",
        f"-Ddlscale.bigdl.log={log_path}",
        "-Dbigdl.utils.LoggerFilter.disable=true",
        f"-Djava.io.tmpdir={tmp}",
        "-XX:-UsePerfData",
    ]
    conf = create_spark_conf().setMaster(f"local[{cores}]").setAppName(f"dlscale bench bare {spec['model']}")
    settings = {
        "spark.driver.memory": options(spec)["driver_memory"],
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


def bare(spec: dict[str, Any], data: Path) -> dict[str, float]:
    from bigdl.dllib.optim.optimizer import SGD, MaxIteration, Optimizer
    from bigdl.dllib.utils.common import init_engine
    from pyspark import SparkContext

    from dlscale.parse import bigdl as bigdl_log
    from dlscale.runners.bigdl.data import training_rdd
    from dlscale.runners.bigdl.models import build_model, criterion

    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this venv, as the runner's
    name, batch = spec["model"], int(spec["global_batch"])
    total = int(spec["warmup"]) + int(spec["iterations"])
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-bigdl-") as tmp:
        work = Path(tmp)
        log_path = work / "driver.log"
        started = time.perf_counter()
        sc = SparkContext(conf=local_conf(spec, work, log_path))
        try:
            init_engine()
            rdd = training_rdd(sc, str(Path(data).resolve()), name, 1, batch * total, int(spec["seed"]))
            model = build_model(name)
            model.set_seed(int(spec["seed"]))
            optimizer = Optimizer.create(
                model=model,
                training_set=rdd,
                criterion=criterion(name),
                optim_method=SGD(
                    learningrate=float(spec["learning_rate"]), momentum=float(spec["momentum"]), dampening=0.0
                ),
                end_trigger=MaxIteration(total),
                batch_size=batch,
            )
            ready = time.perf_counter()
            optimizer.optimize()
            done = time.perf_counter()
        finally:
            sc.stop()
        events = bigdl_log.parse(log_path)
    if len(events) != total:
        raise RuntimeError(f"BigDL logged {len(events)} iterations, expected {total}")
    return {
        **log_rates(events, int(spec["warmup"]), batch),
        "process_to_optimize_s": ready - started,
        "optimize_wall_s": done - ready,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    bare_p = sub.add_parser("bare")
    bare_p.add_argument("--spec-json", required=True)
    bare_p.add_argument("--data", required=True, type=Path)
    bare_p.add_argument("--peak", action="store_true", help="then measure numpy's matmul peak")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec = json.loads(args.spec_json)
    emit(arm="bare", **bare(spec, args.data))
    if args.peak:
        emit(arm="peak", **matmul_peak(numpy_matmul))
    return 0


if __name__ == "__main__":
    sys.exit(main())
