"""BigDL's log follower: iteration events as BigDL logs them, and the executors watched meanwhile.

BigDL reports one line per iteration for the whole cluster in its driver log, not through
an API the driver could call between steps. So a thread (``LiveLog``) follows that log as
log4j writes it and records each iteration as soon as BigDL has logged it (the log's
millisecond timestamps give each event its real time). It also watches the executors:
locally by PID, under SLURM (where they run on other nodes) through the driver JVM's list of
executors (``executors.RemoteExecutors``), and in both the Spark workers the driver started.
Two faults stop training at once, instead of at its end: a loss that is NaN or infinite, and
an executor (or its worker) that died; the follower then calls the driver's ``on_fault``
(``train``: cancel Spark's jobs, then kill the JVM if BigDL does not give up). It is the only
harness work that runs beside BigDL's steps, so it says what it cost when it ends.

No pyspark or BigDL import: the follower reads a file and asks the processes it is given.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlscale.parse import bigdl as bigdl_log
from dlscale.runners.bigdl.executors import RemoteExecutors
from dlscale.runners.bigdl.spark import alive
from dlscale.runners.common import NonFiniteLoss, RunContext, RunFailure

POLL_S = 0.2  # how often the driver log and the executors are looked at


class LiveLog:
    """Follows BigDL's driver log while BigDL writes it, and watches the executors.

    A daemon thread reads the lines log4j has written (``dlscale.parse.bigdl.LogParser``)
    every ``POLL_S`` and records each completed iteration at once
    (``RunContext.record_iteration``, which raises ``NonFiniteLoss`` on a NaN/inf loss).
    On a non-finite loss, a dead executor or a malformed log it keeps the failure in
    ``failure`` and calls ``on_fault`` once (which stops training). ``finish()`` stops the
    thread and records what the log still holds.

    Executors are watched by PID (``executors``: node -> PID, local mode), through the
    driver JVM (``remote``, SLURM) and by their workers (``dead_workers``: the cluster's
    ``SparkCluster.dead_workers``).
    """

    def __init__(
        self,
        ctx: RunContext,
        path: Path,
        fields: dict[str, Any],
        executors: dict[int, int],
        on_fault: Any,
        remote: RemoteExecutors | None = None,
        dead_workers: Callable[[], list[tuple[int | None, str]]] | None = None,
        first: dict[str, Any] | None = None,
    ) -> None:
        self.ctx, self.path, self.fields = ctx, path, fields
        self.first = dict(first or {})  # fields of iteration 0's event only (init_sha256)
        self.executors = dict(executors)
        self.on_fault = on_fault
        self.remote = remote
        self.dead_workers = dead_workers
        self.lost_in_log: list[Any] = []  # executors the driver log says Spark lost (SLURM)
        self.parser = bigdl_log.LogParser(str(path), strict=True)
        self.recorded = 0
        self.failure: BaseException | None = None
        self._offset = 0
        self._rest = b""
        self.looks = 0  # how often the thread looked at the log and the executors
        self.cost = (0.0, 0.0)  # the thread's wall and CPU seconds, once it has ended
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bigdl-live-log", daemon=True)

    def start(self) -> LiveLog:
        self._thread.start()
        return self

    def _run(self) -> None:
        # What following costs, said at the end: the only harness work that runs beside
        # BigDL's steps (on a 2-core node, beside four JVMs).
        started, cpu = time.monotonic(), time.thread_time()
        try:
            while not self._done.wait(POLL_S):
                self.looks += 1
                if not self._step(check_executors=True):
                    return
        finally:
            self.cost = (time.monotonic() - started, time.thread_time() - cpu)

    def describe_cost(self) -> str:
        """The follower's own cost: "N looks in W s, C ms of CPU (S% of one core)"."""
        wall, cpu = self.cost
        share = cpu / wall if wall > 0 else 0.0
        return f"{self.looks} looks in {wall:.1f} s, {cpu * 1e3:.1f} ms of CPU ({share:.2%} of one core)"

    def _step(self, check_executors: bool) -> bool:
        """One look at the log (and the executors); False once a fault was found."""
        try:
            self.poll()
            if check_executors:
                self.check_executors()
        except (NonFiniteLoss, RunFailure, bigdl_log.ParseError) as err:
            self.failure = err
            print(f"[bigdl] stopping training: {err}", file=sys.stderr, flush=True)
            self.on_fault()
            return False
        return True

    def poll(self) -> None:
        """Record the iterations completed by the lines written since the last look."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        *lines, self._rest = (self._rest + chunk).split(b"\n")
        for line in lines:
            text = line.decode("utf-8", errors="replace")
            lost = self.remote.lost_in_log(text) if self.remote is not None else None
            if lost is not None:
                self.lost_in_log.append(lost)
            for event in self.parser.feed(text):
                self.record(event)

    def record(self, event: dict[str, Any]) -> None:
        fields = {k: v for k, v in event.items() if k not in ("event", "rank", "iteration", "time")}
        if event["time"] is not None:
            fields["time"] = event["time"]
        if event["iteration"] == 0:
            fields.update(self.first)
        try:
            self.ctx.record_iteration(event["iteration"], input_s=None, **fields, **self.fields)
        finally:  # counted once written: a segment's evaluation waits for it (wait_for)
            self.recorded += 1

    def wait_for(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` iterations are recorded (a segment's last one is in the log
        when ``optimize`` returns; this thread reads it within ``POLL_S``). False on a
        fault or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.recorded < count:
            if self.failure is not None or not self._thread.is_alive() or time.monotonic() > deadline:
                return False
            time.sleep(POLL_S / 4)
        return True

    def check_executors(self) -> None:
        """Raise ``RunFailure`` naming the rank whose executor (or worker) is gone.

        A worker first: when one ends, its executor goes with it, and the worker's end is
        the cause. A node that cannot be named (srun said nothing; an executor on a host
        outside the allocation) gives "a rank died".
        """
        per_node = self.ctx.spec.ranks_per_node
        at = self.ctx.last_iteration + 1

        def rank(node: int | None) -> str:
            return "a rank" if node is None else f"rank {node * per_node}"

        for node, what in self.dead_workers() if self.dead_workers else []:
            raise RunFailure(f"{rank(node)} died ({what}) at iteration {at}")
        for node, pid in sorted(self.executors.items()):
            if not alive(pid):
                raise RunFailure(
                    f"rank {node * per_node} died (the Spark executor of node {node}, pid {pid},"
                    f" is gone) at iteration {at}"
                )
        lost = self.remote.lost([e.host for e in self.lost_in_log]) if self.remote is not None else None
        if lost is None and self.remote is not None and self.remote.blind and self.lost_in_log:
            lost = (self.lost_in_log[0], False)  # the JVM cannot say any more; its log does
        if lost is not None:
            executor, replaced = lost
            which = "" if executor.node is None else f" of node {executor.node}"
            then = ", and Spark started another in its place" if replaced else ""
            raise RunFailure(
                f"{rank(executor.node)} died (the Spark executor{which}, {executor.where()},"
                f" was lost{then}) at iteration {at}"
            )

    def finish(self, failure: BaseException | None) -> None:
        """Stop following; record what the log still holds (leniently after a failure).

        After training failed with an error, the executors are looked at once more: Spark
        may have noticed a dead executor (and failed the job) before the thread did. Not
        after SIGTERM, which takes the driver JVM down and the executors with it.
        """
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        print(f"[bigdl] following the log and the executors: {self.describe_cost()}", flush=True)
        if self.failure is not None:
            return
        self._step(check_executors=isinstance(failure, Exception))
        if self.failure is not None:
            return
        self.parser.strict = failure is None
        try:
            if self._rest:
                for event in self.parser.feed(self._rest.decode("utf-8", errors="replace")):
                    self.record(event)
            for event in self.parser.close():
                self.record(event)
        except (NonFiniteLoss, bigdl_log.ParseError) as err:
            self.failure = err
