"""How the BigDL driver stops training on a fault, without Spark.

The real thing runs in tests/faults/test_faults.py (a NaN loss and a killed executor on a
real Spark cluster); these pin down the race it has to win. The fault is seen in BigDL's log
line of an iteration, written after that iteration's jobs ended, so a cancel that arrives
before the next iteration's job is submitted finds nothing to cancel. The stand-in
SparkContext below is that: its first cancels find no job, a later one fails the running
job, and ``optimize`` returns.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace

from dlscale.runners.bigdl import train


class LateJob:
    """``cancelAllJobs`` that finds no job for its first ``idle`` calls, then ends ``optimize``."""

    def __init__(self, optimizing: threading.Event, idle: int) -> None:
        self.optimizing = optimizing
        self.idle = idle
        self.calls = 0

    def cancelAllJobs(self) -> None:  # noqa: N802 - SparkContext's name
        self.calls += 1
        if self.calls > self.idle:
            self.optimizing.set()


def stop(sc: object, optimizing: threading.Event, gateway: object) -> None:
    held = {"sc": sc, "optimizing": optimizing, "gateway": gateway}
    train._stopper(held)()
    stopper = next(t for t in threading.enumerate() if t.name == "bigdl-stop")
    stopper.join(train.STOP_GRACE_S + 5)
    assert not stopper.is_alive()


def test_a_cancel_that_finds_no_job_is_repeated_until_training_ends():
    optimizing = threading.Event()
    sc = LateJob(optimizing, idle=3)
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stop(sc, optimizing, SimpleNamespace(proc=jvm))
        assert sc.calls == 4
        assert jvm.poll() is None  # BigDL gave up by itself: its JVM was not killed
    finally:
        jvm.kill()
        jvm.wait()


def test_a_context_that_cannot_cancel_leaves_the_jvm_to_be_killed(monkeypatch):
    monkeypatch.setattr(train, "STOP_GRACE_S", 0.5)

    class Broken:
        calls = 0

        def cancelAllJobs(self) -> None:  # noqa: N802 - SparkContext's name
            Broken.calls += 1
            raise RuntimeError("the JVM is going")

    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stop(Broken(), threading.Event(), SimpleNamespace(proc=jvm))
        assert Broken.calls == 1  # not retried into a broken gateway
        assert jvm.wait(timeout=5) != 0  # killed after the grace
    finally:
        if jvm.poll() is None:
            jvm.kill()
            jvm.wait()
