"""The rank-side harness every framework runner shares.

What a runner folder holds and what its ``train`` module offers is the runner contract
(``dlscale.runners.contract``: ``Trainer``); a runner's ``__main__`` hands its ``train``
module to ``main`` here. This module does everything that is not framework-specific:
argument parsing, placement, the rank's event stream, thread settings, loss checks, signal
handling and the progress lines a person follows in ``run.log``. Reading one runner
therefore teaches the others.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, NoReturn

from dlscale import quality
from dlscale.data.shards import INDEX_NAME, heldout_dir
from dlscale.events import PartWriter
from dlscale.host import placement as placement_mod
from dlscale.runspec import RunSpec


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or infinite: the run is numerically broken and must fail."""


class RunFailure(RuntimeError):
    """A failure whose message is already the run's reason, in words a person understands
    ("rank 1 died (...) at iteration 37"): recorded as is, without the rank/type prefix."""


#: The warning of a run that had no held-out set to evaluate on.
NO_HELDOUT = "no held-out set beside the training data: the run's quality was not evaluated"


class Terminated(BaseException):
    """SIGTERM arrived (SLURM's time limit, a cancelled job, the launcher giving up)."""


#: This rank's start-up seconds by part (``startup_part``), recorded on its first iteration
#: event. One process is one rank, so the parts are the process's own.
_STARTUP: dict[str, float] = {}
#: The seconds of parts nested in each part still open (excluded from that part's own).
_OPEN_PARTS: list[float] = []


@contextlib.contextmanager
def startup_part(name: str) -> Iterator[None]:
    """Add the block's wall seconds to this rank's start-up part ``name``
    (``dlscale.events.STARTUP_SECONDS``), less any part timed inside it (MPI's
    initialisation inside Caffe's import is ``rendezvous_s``, not ``import_s``), so the parts
    never count a second twice. What no part covers stays in wallsplit's ``startup_other_s``.
    """
    started = time.perf_counter()
    _OPEN_PARTS.append(0.0)
    try:
        yield
    finally:
        nested = _OPEN_PARTS.pop()
        elapsed = time.perf_counter() - started
        _STARTUP[name] = _STARTUP.get(name, 0.0) + elapsed - nested
        if _OPEN_PARTS:
            _OPEN_PARTS[-1] += elapsed


def startup_seconds() -> dict[str, float]:
    """This rank's start-up parts timed so far (``startup_part``), part -> seconds."""
    return dict(_STARTUP)


@dataclass
class RunContext:
    """What a framework's ``train`` gets: the run's spec, where it runs, and where to report."""

    spec: RunSpec
    placement: placement_mod.Placement
    data_dir: Path
    writer: PartWriter
    started: float = field(default_factory=time.time)
    last_iteration: int = -1
    #: Timed training seconds so far on this rank (the sum of its timed steps' step_s,
    #: warm-up excluded): the clock an evaluation reports as ``train_s``.
    train_s: float = 0.0
    # Things a person must see although the run succeeded (e.g. BigDL failing to gather the
    # trained model after every step was measured): they go into rank_end and run_end.
    warnings: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.placement.rank

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    @property
    def total_iterations(self) -> int:
        return self.spec.total_iterations

    def is_warmup(self, iteration: int) -> bool:
        return iteration < self.spec.warmup

    @property
    def heldout_dir(self) -> Path:
        """The held-out shard set beside the training one (``dlscale.data.shards.heldout_dir``)."""
        return heldout_dir(self.data_dir)

    @cached_property
    def heldout_available(self) -> bool:
        """Whether a held-out shard set lies beside the training data (real ImageNet shards
        from a user's listing have none yet: such a run evaluates nothing and says so).
        Looked up once per run: ``eval_due`` asks after every iteration, and a stat of the
        shard index there cost a small step ~1 % of its time (docs/bench-cells.md)."""
        return (self.heldout_dir / INDEX_NAME).is_file()

    @property
    def evaluates(self) -> bool:
        """Whether the run measures held-out quality at all: its spec asks for it
        (``RunSpec.evaluates``; a parity reference does not) and a held-out set is there.
        A runner builds its evaluator only then."""
        return self.spec.evaluates and self.heldout_available

    def eval_due(self, iteration: int) -> bool:
        """Whether to evaluate once ``iteration`` (0-based) has trained: every
        ``spec.eval_every`` iterations and after the last one; never for a spec that
        evaluates nothing, nor without a held-out set (the run's warnings then say so, once)."""
        if not self.spec.evaluates:
            return False
        if not self.heldout_available:
            if NO_HELDOUT not in self.warnings:
                self.warnings.append(NO_HELDOUT)
            return False
        return self.spec.eval_due(iteration + 1)

    def record_eval(
        self, iteration: int, results: Mapping[str, tuple[float, int]], eval_s: float, **extra: Any
    ) -> bool:
        """Emit rank 0's held-out quality after ``iteration`` (0-based) has trained, and say
        whether the run's quality target is met (False without a target).

        ``results``: metric -> (value, samples evaluated), from the framework's own
        inference on ``heldout_dir``; ``eval_s``: the evaluation's wall time, which is
        outside every timed step (``train_s`` does not include it). A runner evaluates on
        rank 0 only and shares the stop decision with its other ranks its own way.
        """
        target = self.spec.quality_target
        met = False
        for metric, (value, samples) in results.items():
            self.writer.emit(
                "eval",
                rank=self.rank,
                iteration=iteration + 1,
                split="test",
                metric=metric,
                value=float(value),
                samples=int(samples),
                eval_s=float(eval_s),
                train_s=float(self.train_s),
                **extra,
            )
            if target is not None and metric == target["metric"]:
                met = quality.meets(metric, float(value), target["value"])
        shown = ", ".join(f"{m} {v:.4f}" for m, (v, _) in results.items())
        print(
            f"[rank 0] held-out after {iteration + 1} iterations: {shown} ({eval_s:.1f} s to evaluate)"
            + (" -- target met, training stops" if met else ""),
            flush=True,
        )
        return met

    def record_measured(self, **measured: Any) -> None:
        """Record what this rank measured about its own set-up while it ran (the BLAS library
        it really loaded, ...): a ``rank_measured`` event in its part file, which the launcher
        puts into run_start's ``measured`` (dlscale.launch.records.merge)."""
        self.writer.emit("rank_measured", rank=self.rank, measured=measured)

    def record_iteration(
        self,
        iteration: int,
        *,
        samples: int,
        step_s: float,
        compute_s: float | None,
        comm_s: float | None,
        loss: float | None,
        **extra: Any,
    ) -> None:
        """Emit one iteration event; fail the run if the loss is not finite."""
        if self.last_iteration < 0:  # the first step: every framework's runtime is up
            reclaim_sigterm()
            extra = {**startup_seconds(), **extra}  # where this rank's start-up went
        self.last_iteration = iteration
        if not self.is_warmup(iteration):
            self.train_s += step_s
        self.writer.emit(
            "iteration",
            rank=self.rank,
            iteration=iteration,
            samples=samples,
            step_s=step_s,
            compute_s=compute_s,
            comm_s=comm_s,
            loss=loss,
            warmup=self.is_warmup(iteration),
            **extra,
        )
        if loss is not None and not math.isfinite(loss):
            raise NonFiniteLoss(quality.diverged_reason(loss, iteration, self.rank))
        if self.rank == 0 and (iteration % 10 == 0 or iteration == self.total_iterations - 1):
            phase = "warm-up" if self.is_warmup(iteration) else "timed"
            loss_text = "n/a" if loss is None else f"{loss:.4f}"
            print(
                f"[rank 0] iteration {iteration + 1}/{self.total_iterations} ({phase}):"
                f" step {step_s * 1e3:.1f} ms, loss {loss_text}",
                flush=True,
            )


def unresolved(host: str) -> str | None:
    """Why ``host`` does not resolve (socket.getaddrinfo's words), or None if it does."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        return str(err)
    return None


def check_peers_resolve(peers: list[tuple[str, str]], rank: int) -> None:
    """Fail at once (RunFailure) where a peer's host name does not resolve.

    ``peers`` lists ``(who, "host:port" or "host")`` for every process this rank must
    reach (its cluster spec). A name that does not resolve would otherwise leave the ranks
    waiting for each other with no connection (gRPC servers, gloo's store) until a
    timeout that is not meant for start-up fires, or never. Each name is asked once.
    """
    answers: dict[str, str | None] = {}
    problems = []
    for who, address in peers:
        host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
        host = host.strip("[]")
        if host not in answers:
            answers[host] = unresolved(host)
        if answers[host] is not None:
            problems.append(
                f"{who} ({address}) unreachable from rank {rank}: name {host} does not resolve ({answers[host]})"
            )
    if problems:
        raise RunFailure("; ".join(problems))


def placement_peers(where: placement_mod.Placement) -> list[tuple[str, str]]:
    """The peer every distributed rank dials: the master (rank 0's rendezvous).

    Only addresses a framework really dials are checked: gloo and Open MPI exchange the
    ranks' interface addresses through the rendezvous, so the ranks' host names (SLURM
    node names, which need not resolve) are not. A framework that dials named peers adds
    them (the trainer's ``peers``: TensorFlow's cluster spec)."""
    if where.world_size <= 1:
        return []
    return [("rank 0 (master)", f"{where.master_addr}:{where.master_port}")]


def thread_environment(threads: int) -> dict[str, str]:
    """Variables that pin a rank's compute threads before its framework starts.

    OMP_WAIT_POLICY=PASSIVE: busy-waiting OpenMP threads on an oversubscribed node made
    torch up to 20x slower on these machines (STACK.md).
    """
    return {
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "OPENBLAS_NUM_THREADS": str(threads),
        "OMP_WAIT_POLICY": "PASSIVE",
    }


def base_versions() -> dict[str, str]:
    return {"python": platform.python_version(), "platform": platform.platform()}


#: How long a rank's own SIGTERM handler gets before the watchdog ends the rank. A rank
#: blocked in its framework's native code (a collective waiting for a peer that has already
#: ended) runs no Python, so the handler would wait for the launcher's SIGKILL
#: (``dlscale.launch.process.GRACE_S`` later) and the rank's end would be lost. Well inside that.
SIGTERM_WATCHDOG_S = 2.0


class RankEnd:
    """The rank's one ``rank_end``, written by whichever comes first: the rank's own path
    through ``main``, or the SIGTERM watchdog while the rank is blocked in native code."""

    def __init__(self, writer: PartWriter, rank: int):
        self._writer, self._rank = writer, rank
        self._lock = threading.Lock()
        self.written = threading.Event()

    def write(self, status: str, reason: str | None, **fields: Any) -> bool:
        """Write the end and close the part file; False if it was already written."""
        with self._lock:
            if self.written.is_set():
                return False
            self._writer.emit("rank_end", rank=self._rank, status=status, reason=reason, **fields)
            self._writer.close()
            self.written.set()
            return True


def start_sigterm_watchdog(end: RankEnd, ctx: RunContext, grace_s: float = SIGTERM_WATCHDOG_S) -> None:
    """End the rank ``grace_s`` after a SIGTERM that its own handler could not act on.

    Python runs a signal handler only between bytecodes of the main thread; the C-level
    handler, though, writes the signal's number to the wakeup fd at once, and a thread
    reading that fd wakes while the main thread is still blocked in the framework. If the
    handler has not run by then, the watchdog writes the rank's end (failed, SIGTERM, the
    iteration reached) and exits the process; once the handler has run, the rank's own path
    ends it (and stops what it started: BigDL's Spark daemons), however long that takes. A
    forked child (a data loader's worker) drops the fd, so that its signals are not taken
    for the rank's.
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    os.register_at_fork(after_in_child=_drop_wakeup_fd)

    def watch() -> None:
        while signal.SIGTERM not in os.read(read_fd, 64):
            pass
        if _SIGTERM_HANDLED.wait(grace_s):
            return
        reason = (
            f"terminated by SIGTERM (time limit or cancellation) at iteration {ctx.last_iteration + 1}"
            f" (the rank was blocked in its framework and ended by its watchdog after {grace_s:g} s)"
        )
        if end.write("failed", reason):
            print(f"[rank {ctx.placement.rank}] FAILED: {reason}", file=sys.stderr, flush=True)
            os._exit(1)

    threading.Thread(target=watch, name="sigterm-watchdog", daemon=True).start()


def reclaim_sigterm() -> None:
    """Install the rank's SIGTERM handler again, at the C level (``sigaction``).

    TensorFlow's multi-worker runtime installs a SIGTERM handler of its own (its coordination
    service's preemption notifier, a C++ ``std::signal``), which replaces Python's without
    Python knowing: a SIGTERM then only tells TensorFlow of a "preemption", and the rank
    trains on until the launcher's SIGKILL. Called at a rank's first step, once every
    framework has set its runtime up; only from the main thread (``signal.signal``'s rule)
    and while the handler is still the rank's own (after a first SIGTERM it ignores the rest).
    """
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is _on_sigterm
    ):
        signal.signal(signal.SIGTERM, _on_sigterm)


def _drop_wakeup_fd() -> None:
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # forked from another thread than the main one: nothing was inherited there
        pass


#: Set when the rank's SIGTERM handler has run (the watchdog then stands down).
_SIGTERM_HANDLED = threading.Event()


def _on_sigterm(signum: int, frame: Any) -> None:
    """Turn the first SIGTERM into ``Terminated``; ignore the ones after it.

    A rank may be told twice (SLURM signals every process of a step, and a node agent
    forwards the signal to its children too): a second exception raised while the rank
    writes its end would lose that end.
    """
    _SIGTERM_HANDLED.set()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated("terminated by SIGTERM (time limit or cancellation)")


def parse_args(argv: list[str] | None = None) -> SimpleNamespace:
    parser = argparse.ArgumentParser(description="Run one rank of a dlscale training run.")
    parser.add_argument("--spec-json", required=True, help="the run spec (RunSpec.to_json)")
    parser.add_argument("--data", required=True, type=Path, help="shard set directory")
    parser.add_argument("--work-dir", required=True, type=Path, help="where rank part files go")
    args = parser.parse_args(argv)
    # A spec that is not a run (SpecError) fails here, before any framework starts.
    return SimpleNamespace(spec=RunSpec.from_json(args.spec_json), data=args.data, work_dir=args.work_dir)


def exit_skipping_teardown(code: int) -> NoReturn:
    """End the process now, without the interpreter's teardown, once the rank's end is written.

    After ``rank_end`` the run's records are whole; what is left is destructors, and a
    framework's native ones can abort there (torch/gloo: "terminate called without an
    active exception", SIGABRT after every rank had written ``rank_end`` ok, 2026-12-05,
    docs/teardown.md). The launcher would record that abort as the run's failure, and
    ``srun --kill-on-bad-exit`` would kill the peers. Only for runners whose teardown
    releases nothing outside the process (not MPI, whose ``MPI_Finalize`` must run).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(runner: ModuleType, argv: list[str] | None = None) -> int:
    """Entry point of one rank: set up, train, and leave a rank_end event whatever happens.

    ``runner`` is the framework's ``train`` module (``dlscale.runners.contract.Trainer``);
    one whose ``exits_without_teardown(spec)`` says so ends here (``exit_skipping_teardown``)."""
    args = parse_args(argv)
    for key, value in thread_environment(args.spec.threads_per_rank).items():
        os.environ.setdefault(key, value)
    where = placement_mod.detect()
    signal.signal(signal.SIGTERM, _on_sigterm)
    writer = PartWriter(args.work_dir / f"rank{where.rank}.jsonl")
    ctx = RunContext(spec=args.spec, placement=where, data_dir=args.data, writer=writer)
    end = RankEnd(writer, where.rank)
    start_sigterm_watchdog(end, ctx)
    status, reason = "ok", None
    try:
        with startup_part("import_s"):  # the runner's framework, imported for its version
            versions = {**base_versions(), **runner.versions()}
        writer.emit(
            "rank_start",
            rank=where.rank,
            host=where.host,
            pid=os.getpid(),
            placement=where.as_dict(),
            versions=versions,
            threads=args.spec.threads_per_rank,
        )
        # Before any server starts: a peer whose name does not resolve fails the run now,
        # naming it, instead of after a start-up timeout.
        peers = placement_peers(where)
        if where.world_size > 1:
            peers += runner.peers(ctx)
        check_peers_resolve(peers, where.rank)
        runner.train(ctx)
    except Terminated as err:
        status, reason = "failed", f"{err} at iteration {ctx.last_iteration + 1}"
    except (NonFiniteLoss, RunFailure) as err:
        status, reason = "failed", str(err)
    except Exception as err:  # noqa: BLE001 - any failure of the framework is the run's failure
        status, reason = "failed", f"rank {where.rank}: {type(err).__name__}: {err}"
        import traceback

        traceback.print_exc()
    end.write(status, reason, **({"warnings": ctx.warnings} if ctx.warnings else {}))
    code = 0
    if status != "ok":
        print(f"[rank {where.rank}] FAILED: {reason}", file=sys.stderr, flush=True)
        code = 1
    exits_early = getattr(runner, "exits_without_teardown", None)
    if exits_early is not None and exits_early(args.spec):
        exit_skipping_teardown(code)
    return code
