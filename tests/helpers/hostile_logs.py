"""Native logs for the hostile-input tests: builders of BigDL and Caffe log lines, and the real
captured logs (tests/data/bigdl, tests/data/caffe) they are cut from."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

from helpers.paths import REPO

BIGDL_DATA = REPO / "tests" / "data" / "bigdl"
CAFFE_DATA = REPO / "tests" / "data" / "caffe"


def write(tmp_path: Path, text: str | bytes, name: str = "run.log") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# ---------------------------------------------------------------- log builders

BIGDL_START = dt.datetime(2026, 11, 29, 19, 0, 0)
CAFFE_START = dt.datetime(2026, 11, 29, 20, 8, 8)


def bigdl_stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def java_double(value: float) -> str:
    """A loss as Java's Double.toString writes the non-finite ones."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def bigdl_iteration(iteration: int, loss: str = "2.30", moment: dt.datetime = BIGDL_START) -> str:
    """One DistriOptimizer iteration line of dlscale's log4j pattern (``iteration`` is 1-based)."""
    return (
        f"{bigdl_stamp(moment)} INFO DistriOptimizer$: [Epoch 1 {64 * iteration}/60000][Iteration {iteration}]"
        f"[Wall Clock {0.5 * iteration}s] Trained 64.0 records in 0.5 seconds. Throughput is 128.0"
        f" records/second. Loss is {loss}. Sequential's hyper parameters: Current learning rate is 0.01.\n"
    )


BIGDL_METRICS = (
    "========== Metrics Summary ==========\n"
    "get weights average : 0.003 s\n"
    "computing time average : 0.4 s\n"
    "compute weight average : 0.001 s\n"
    "computing time for each node :  \n"
    "=====================================\n"
)


def glog(moment: dt.datetime, message: str, level: str = "I", source: str = "solver.cpp:231") -> str:
    """One glog line as glog >= 0.6 writes it (with the year)."""
    return f"{level}{moment:%Y%m%d %H:%M:%S.%f} 10425 {source}] {message}\n"


def caffe_display(iteration: int, loss: str, moment: dt.datetime) -> str:
    return (
        glog(moment, f"Iteration {iteration}, loss = {loss}")
        + glog(moment, f"    Train net output #0: loss = {loss} (* 1 = {loss} loss)", source="solver.cpp:247")
        + glog(moment, f"Iteration {iteration}, lr = 0.01", source="sgd_solver.cpp:106")
    )


SOLVER = (CAFFE_DATA / "lenet_solver.log").read_text().splitlines(keepends=True)
CRASH = [
    "*** Check failure stack trace: ***\n",
    "    @     0x7f3c1b2a1b03  google::LogMessage::Fail()\n",
    '*** Aborted at 1795982889 (unix time) try "date -d @1795982889" if you are using GNU date ***\n',
    "PC: @     0x7f3c1a0a9e2c __pthread_kill_implementation\n",
    "*** SIGABRT (@0x28b9) received by PID 10425 (TID 0x7f3c1b5e6740) from PID 10425; stack trace: ***\n",
]
CHECK_FAILED = "F20261129 20:08:09.600000 10425 blob.cpp:133] Check failed: data_ \n"


def solver_until(iteration: int) -> list[str]:
    """lenet_solver.log up to the learning-rate line of ``iteration`` (displays: 0, 5, ..., 25)."""
    end = next(i for i, line in enumerate(SOLVER) if f"Iteration {iteration}, lr" in line)
    return SOLVER[: end + 1]


def line_number(lines: list[str], needle: str) -> int:
    return next(i for i, line in enumerate(lines, start=1) if needle in line)


SPARK = (BIGDL_DATA / "spark-default-pattern.log").read_text()
SPARK_LINES = len(SPARK.splitlines())
