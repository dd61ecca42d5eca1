"""Caffe's native logs -> dlscale events: solver progress and ``caffe time`` benchmarks.

Caffe logs through glog: ``I1129 19:45:12.123456  4242 solver.cpp:218] MESSAGE`` (glog >= 0.6,
Debian 12's, writes the year too: ``I20261129 ...``). The messages read here:

- the solver (one per ``display`` iterations): ``Iteration N (X iter/s, Ys/D iters),
  loss = L`` (BVLC since 2017) or ``Iteration N, loss = L`` (older), then
  ``Train net output #k: NAME = V ...`` and ``Iteration N, lr = X``. Each becomes an
  ``iteration`` event of rank 0 (Caffe logs from the root solver only) with ``loss``,
  ``lr`` and ``step_s`` (1 / iter/s, or from the glog stamps of consecutive displays when
  the log has no rate). The first display, with nothing before it to time it by, has no
  step time, which an iteration event must have: it is a ``display`` event, a loss
  reading; its printed rate is not read (BVLC's solver computes it from a counter it never
  initialises: 0, ``-1.4013e-45`` or garbage in real logs), so ``iter_per_s`` is None. ``samples`` is the net's batch, read from the first ``Top shape:`` line of the
  net set-up (0 when the log has none by the time the display is complete). Caffe cannot
  split a step, so ``compute_s`` and ``comm_s`` are None. ``loss`` is a float, NaN or
  infinite as glog printed it (``nan``, ``inf``); the CLI writes those as the strings
  ``"nan"``/``"inf"``/``"-inf"`` (see ``dlscale.parse``), never ``null``.
- ``caffe time``: ``Iteration: i forward-backward time: X ms.`` (``benchmark_iteration``
  events), one ``NAME forward: X ms.`` and ``NAME backward: X ms.`` per layer
  (``layer_time`` events, in net order) and ``Average Forward pass`` / ``Backward pass`` /
  ``Forward-Backward`` and ``Total Time`` (one ``benchmark`` event, last).
- a failure: a FATAL glog line (``F...] Check failed: ...``), a ``Check failed:`` anywhere,
  or glog's crash report (``*** Aborted at ...``, ``*** SIGSEGV ... received by PID``)
  ends the events with ``{"event": "run_end", "status": "failed", "reason": <that line's
  message>, "time": ..., "line": N}`` after whatever was complete before it.

Logs of several ranks. A launcher may tag each line of a rank (Open MPI's ``--tag-output``
``[1,0]<stderr>:``, MPICH's and Intel MPI's ``-l`` ``[0] ``, ``srun --label``'s ``0: ``), and
Caffe's MPI builds may put the rank before a display (Intel Caffe's ``[0] Iteration ...``,
Caffe-MPI's ``rank = 0 Iteration ...``). Intel's ``(X iter/s, Ys/D iter), loss = L, Z iter/s
avg`` is read as BVLC's rate (what a build adds after the loss, from ``, ``, is not read).
A display's rank is Caffe's tag, else the launcher's, else none; the displays read are
those of the first display's rank (an event's ``rank``), and another rank's are skipped,
while a failure on any rank fails the run. Displays with and without a rank are refused
(whose is the untagged one?). A display's train-net outputs and learning rate are read from
the thread that logged it (glog's thread id, and the launcher's rank), so another rank's
lines merged among them are not taken for its own; a rate logged by another thread
(Caffe-MPI displays from a thread of its own) is not read. Each writer's stamps must go
forwards; across writers they may interleave.

Events are produced as the log is read (``iter_events``): a display is complete when the
next one starts or the log ends, a layer when its backward time is read, so memory does
not grow with the log. ``time`` is seconds since the log's first glog line (year-less
stamps may cross one New Year: December to January). Lines that are not glog lines
(Python's own output, mpirun's messages) are skipped. Malformed, ``ParseError`` with
``FILE:LINE`` (``python -m dlscale.parse caffe`` exits 2): a glog line that starts like
one of the messages above but does not parse, a cut-off glog line, glog time going
backwards within one writer, display or benchmark iteration numbers not increasing, a
last line without its newline that would be read for numbers, a benchmark that stops
before its averages (when no failure explains it), an empty or binary file, or a log with
none of the above. No regular expression here can backtrack more than linearly in a
line's length.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from dlscale.parse import Line, ParseError, read_lines, shorten, text_lines

# Unambiguous: "\d+\.?\d*" would let two quantifiers share a run of digits (quadratic).
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)"

GLOG_START = re.compile(r"^[IWEF](?:\d{4}|\d{8}) ")
GLOG = re.compile(
    r"^(?P<level>[IWEF])(?P<year>\d{4})?(?P<month>\d\d)(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d\.\d+)\s+"
    r"(?P<thread>\d+)\s+(?P<source>[^\s:\]]+):\d+\] ?(?P<message>.*)$"
)
# What a launcher writes before each line of a rank when asked to (the rank: group "rank"):
# Open MPI's --tag-output ("[1,0]<stderr>:", PRRTE's "[prterun-host-42@1,0]<stdout>: "),
# MPICH's and Intel MPI's -l / -prepend-rank ("[0] "), SLURM's srun --label ("0: ", padded).
LAUNCHER_TAGS = (
    re.compile(r"^\[(?:[^\]\s@]*@)?\d+,(?P<rank>\d+)\]<std(?:out|err|diag)>: ?"),
    re.compile(r"^\[(?P<rank>\d+)\] "),
    re.compile(r"^ *(?P<rank>\d+): "),
)
# The rank Caffe's MPI builds write before a display: Intel Caffe's "[3] Iteration N, ...",
# Caffe-MPI's " rank = 3 Iteration N (...)".
SOLVER_TAG = re.compile(r"^\s*(?:\[(?P<bracketed>\d+)\]|rank = (?P<named>\d+)) +(?=Iteration )")
ITERATION_RATE = re.compile(
    rf"^Iteration (?P<it>\d+) \((?P<rate>{NUMBER}) iter/s, (?P<lapse>{NUMBER})s/(?P<display>\d+) iters?\),"
    rf" loss = (?P<loss>{NUMBER})(?:, .*)?$"
)  # what a build adds after the loss, not read: Intel's ", Z iter/s avg", a fork's ", remaining ..."
ITERATION_LOSS = re.compile(rf"^Iteration (?P<it>\d+), loss = (?P<loss>{NUMBER})(?:, .*)?$")
ITERATION_LR = re.compile(rf"^Iteration (?P<it>\d+), lr = (?P<lr>{NUMBER})$")
ITERATION_OTHER = re.compile(r"^Iteration \d+, (?:Testing net \(#\d+\)|Snapshotting|loss = \S+ \(.*\))")
TRAIN_OUTPUT = re.compile(rf"^\s*Train net output #\d+: (?P<name>\S+) = (?P<value>{NUMBER})(?: \(.*\))?$")
TOP_SHAPE = re.compile(r"^Top shape: (?P<batch>\d+)(?: [\d ]*)? \(\d+\)$")
BENCH_ITERATION = re.compile(rf"^Iteration: (?P<it>\d+) forward-backward time: (?P<ms>{NUMBER}) ms\.$")
LAYER_TIME = re.compile(rf"^\s*(?P<layer>\S+)\s+(?P<phase>forward|backward): (?P<ms>{NUMBER}) ms\.$")
AVERAGE = re.compile(
    rf"^(?:Average (?P<what>Forward pass|Backward pass|Forward-Backward)|(?P<total>Total Time)):"
    rf" (?P<ms>{NUMBER}) ms\.$"
)
TESTING_FOR = re.compile(r"^Testing for (?P<n>\d+) iterations\.$")
AVERAGE_KEYS = {
    "Forward pass": "forward_ms",
    "Backward pass": "backward_ms",
    "Forward-Backward": "forward_backward_ms",
}
LEAP_YEAR = 366 * 86400 * 10**6  # microseconds: year-less stamps are read in 2000, a leap year
MICROSECOND = dt.timedelta(microseconds=1)
CHECK_FAILED = "Check failed:"


def _whole_second(match: re.Match[str]) -> dt.datetime:
    """The glog stamp of a line to the whole second (ValueError if it is no date). glog >=
    0.6 writes the year; older glog does not (then 2000, a leap year, so that 29 February
    parses). Only differences between stamps are used."""
    hours, minutes, seconds = match["clock"][:8].split(":")
    year = int(match["year"] or 2000)
    return dt.datetime(year, int(match["month"]), int(match["day"]), int(hours), int(minutes), int(seconds))


def _crash_report(text: str) -> str | None:
    """The reason a line gives for Caffe dying, or None: glog's CHECK failure, or the
    first line of its crash report (``*** Aborted at ...``, ``*** SIGSEGV ... received by PID``)."""
    start = text.find(CHECK_FAILED)
    if start >= 0:
        return text[start:].strip()
    if "*** " not in text:
        return None
    stripped = text.strip()
    if stripped.startswith("*** Aborted at") or (
        stripped.startswith("*** SIG") and "received by PID" in stripped
    ):
        return stripped
    return None


@dataclass
class _Stream:
    """Where one writer's stamps stand: a log may interleave several (threads, ranks)."""

    last: int = -1  # its last stamp, as microseconds since the log's first (integers: exact)
    last_text: str = ""
    last_month: int = 0
    years: int = 0  # New Years it crossed (a year-less log)


class Writer(NamedTuple):
    """Who wrote a glog line: the rank its launcher's tag names (None: no tag) and glog's
    thread id. One writer's stamps only go forwards."""

    rank: int | None
    thread: str


class _Unset:
    """The reporting rank before the first display (None is a value: untagged)."""


UNSET = _Unset()


def _launcher_tag(text: str) -> tuple[str, int | None]:
    """A line without the tag its launcher put before it, and the rank the tag names (None:
    no tag). See LAUNCHER_TAGS; glog lines start with a letter, so no tag is ambiguous."""
    if text[:1] in ("[", " ") or text[:1].isdigit():
        for tag in LAUNCHER_TAGS:
            if match := tag.match(text):
                return text[match.end() :], int(match["rank"])
    return text, None


class _Clock:
    """Seconds since the log's first glog stamp; refuses time going backwards.

    glog takes a line's stamp in the thread that logs it, so stamps only go forwards within
    one writer: one thread (glog's thread id) of one rank (its launcher tag). Several
    writers' lines may interleave a few microseconds out of order (a solver's display
    thread beside its main thread, a log that mpirun merged), so each writer's stamps are
    checked on their own. A year-less stamp earlier than the one before is a New Year only
    from December to January; any other step back is impossible (two logs in one file, an
    edited log). The date and time to the second are converted once per second of log (the
    lines of one second share them), which makes reading stamps cheap.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.first: dt.datetime | None = None
        self.with_year: bool | None = None
        self.key = ""  # the last stamp's text to the whole second
        self.second = 0  # its microseconds since the first stamp (in a year-less log's year 2000)
        self.month = 0
        self.origin: int | None = None  # the first stamp's microseconds in its second
        self.streams: dict[Writer, _Stream] = {}

    def _new_second(self, number: int, match: re.Match[str], key: str) -> None:
        try:
            stamp = _whole_second(match)
        except ValueError as err:
            raise ParseError(self.path, number, f"bad glog time stamp: {err}") from None
        with_year = match["year"] is not None
        if self.first is None:
            self.first, self.with_year = stamp, with_year
        elif with_year != self.with_year:
            raise ParseError(self.path, number, "glog stamps with and without the year in one log")
        self.key, self.second, self.month = key, (stamp - self.first) // MICROSECOND, stamp.month

    def seconds(self, number: int, match: re.Match[str], writer: Writer) -> float:
        """The line's stamp in seconds since the log's first, checked against ``writer``'s last."""
        text, dot, end = match.string, match.start("clock") + 8, match.end("clock")
        if text[1:dot] != self.key:
            self._new_second(number, match, text[1:dot])
        fraction = text[dot + 1 : end]
        if len(fraction) > 6:
            raise ParseError(self.path, number, f"bad glog time stamp: {fraction}: more than microseconds")
        now = self.second + int(fraction.ljust(6, "0"))
        stream = self.streams.get(writer)
        if stream is None:
            stream = self.streams[writer] = _Stream()
        if now < stream.last:
            if self.with_year or not (stream.last_month == 12 and self.month == 1):
                raise ParseError(
                    self.path, number, f"time goes backwards: {text[1:end]!r} after {stream.last_text!r}"
                )
            stream.years += 1
        stream.last, stream.last_text, stream.last_month = now, text[1:end], self.month
        if self.origin is None:
            self.origin = now
        return (now - self.origin + stream.years * LEAP_YEAR) / 1e6


def _finite(path: str, number: int, text: str, what: str) -> float:
    """A time or rate, which a real log can only have finite and >= 0."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ParseError(path, number, f"impossible {what}: {text}")
    return value


class _Reader:
    """Walks one log, line by line, returning the events each line completes."""

    def __init__(self, path: str):
        self.path = path
        self.clock = _Clock(path)
        self.batch = 0
        self.display: dict[str, Any] | None = None  # the last display, still open
        self.last_display: tuple[int, float] | None = None  # its iteration and time
        self.last_bench: int | None = None  # the last benchmark iteration number
        self.layers_seen: set[str] = set()
        self.forward: dict[str, dict[str, Any]] = {}  # layers with a forward time only
        self.benchmark: dict[str, Any] | None = None
        self.failure: dict[str, Any] | None = None
        self.produced = 0  # events returned so far
        self.out: list[dict[str, Any]] = []  # completed by the current line
        self.recognised = False  # whether the last message read was one of Caffe's
        # Whose displays are read: the rank of the first display (None: untagged), set once.
        self.reporting: int | None | _Unset = UNSET
        self.display_writer: Writer | None = None  # who wrote the last display read

    def error(self, line: int, message: str) -> ParseError:
        return ParseError(self.path, line, message)

    def emit(self, event: dict[str, Any]) -> None:
        self.close_display()
        self.out.append(event)

    def close_display(self) -> None:
        event, self.display = self.display, None
        if event is None:
            return
        if not event["samples"]:
            event["samples"] = self.batch  # the net's shape was logged after the display line
        if event["step_s"] is None:
            event["event"] = "display"  # see the module docstring
        self.out.append(event)

    def line(self, line: Line) -> list[dict[str, Any]]:
        """The events completed by one line of the log."""
        self.out = []
        text, rank = _launcher_tag(line.text)
        if self.failure is None and (reason := _crash_report(text)):
            self.failure = {"reason": shorten(reason), "time": None, "line": line.number}
        match = GLOG.match(text)
        if match is None:
            if not GLOG_START.match(text):
                return self.done()  # not a glog line: someone else's
            if self.failure is not None and not line.terminated:
                return self.done()  # the crash cut the last line: the failure says why
            raise self.error(line.number, f"cut-off or malformed glog line: {text[:80]!r}")
        writer = Writer(rank, match["thread"])
        now = self.clock.seconds(line.number, match, writer)
        if self.failure is not None and self.failure["line"] == line.number:
            self.failure["time"] = now
        if not line.terminated:
            return self.last_line(line.number, match["message"].rstrip(), now, writer)
        self.message(line.number, match["message"].rstrip(), now, writer)
        return self.done()

    def last_line(self, number: int, message: str, now: float, writer: Writer) -> list[dict[str, Any]]:
        """A last line without its newline: cut while being written, so not to be read for
        numbers (``loss = 0.76`` may be what is left of ``0.762439``)."""
        if self.failure is not None:
            return self.done()
        try:
            self.message(number, message, now, writer)
        except ParseError:
            self.recognised = True  # what it started as is one of Caffe's messages
        if self.recognised:
            raise self.error(number, f"last line cut off before its newline: {message[-80:]!r}")
        return self.done()

    def done(self) -> list[dict[str, Any]]:
        self.produced += len(self.out)
        return self.out

    def reads(self, line: int, rank: int | None) -> bool:
        """Whether a display of ``rank`` (None: untagged) is read: the first display's rank
        is the one read; another rank's displays are skipped (its failures still count)."""
        if isinstance(self.reporting, _Unset):
            self.reporting = rank
        if rank == self.reporting:
            return True
        if rank is None or self.reporting is None:
            raise self.error(
                line, "display lines with and without a rank tag in one log: cannot tell whose they are"
            )
        return False

    def solver_iteration(
        self,
        line: int,
        number: int,
        loss: float,
        step_s: float | None,
        now: float,
        rank: int | None,
        writer: Writer,
        **extra: Any,
    ) -> None:
        if not self.reads(line, rank):
            return
        if self.last_display is not None:
            before, then = self.last_display
            if number <= before:
                raise self.error(
                    line,
                    f"iteration {number} follows iteration {before}: two runs in one log, or several"
                    " ranks' logs merged without rank tags (mpirun --tag-output, srun --label)?",
                )
            if step_s is None:
                step_s = (now - then) / (number - before)
        self.close_display()
        self.last_display = (number, now)
        self.display_writer = writer
        self.display = {
            "event": "iteration",
            "rank": rank or 0,
            "iteration": number,
            "samples": self.batch,
            "step_s": step_s,
            "compute_s": None,
            "comm_s": None,
            "loss": loss,
            "time": now,
            **extra,
        }

    def message(self, line: int, text: str, now: float, writer: Writer) -> None:
        """Read one glog message; ``self.recognised`` says whether it was one of Caffe's."""
        rank = writer.rank
        if tag := SOLVER_TAG.match(text):
            rank, text = int(tag["bracketed"] or tag["named"]), text[tag.end() :]
        if text.startswith("Iteration"):
            self.recognised = self.iteration_message(line, text, now, rank, writer)
        else:
            self.recognised = self.other_message(line, text, writer)

    def iteration_message(self, line: int, text: str, now: float, rank: int | None, writer: Writer) -> bool:
        """The messages that start with "Iteration": displays, learning rates, benchmark
        iterations, and those this parser knows and does not read (testing, snapshots).
        ``rank``: whose the line is (Caffe's own tag, else the launcher's)."""
        if match := ITERATION_RATE.match(text):
            if self.last_display is None:
                # The first display's rate is (iter - iterations_last_) / lapse, and BVLC's
                # solver never initialises iterations_last_: real logs print 0, -1.4013e-45
                # or any garbage there. Nothing was timed before it, so it carries no rate.
                self.solver_iteration(
                    line, int(match["it"]), float(match["loss"]), None, now, rank, writer, iter_per_s=None
                )
                return True
            rate = _finite(self.path, line, match["rate"], "rate")
            step = 1.0 / rate if rate > 0 else None
            self.solver_iteration(
                line, int(match["it"]), float(match["loss"]), step, now, rank, writer, iter_per_s=rate
            )
        elif match := ITERATION_LOSS.match(text):
            self.solver_iteration(line, int(match["it"]), float(match["loss"]), None, now, rank, writer)
        elif match := ITERATION_LR.match(text):
            self.learning_rate(line, int(match["it"]), float(match["lr"]), writer)
        elif match := BENCH_ITERATION.match(text):
            self.bench_iteration(line, int(match["it"]), _finite(self.path, line, match["ms"], "time"), now)
        elif ITERATION_OTHER.match(text):
            return False
        else:
            raise self.error(line, f"unrecognised Caffe iteration line: {text[:200]!r}")
        return True

    def other_message(self, line: int, text: str, writer: Writer) -> bool:
        """The messages that are neither display nor benchmark iteration lines."""
        if match := TRAIN_OUTPUT.match(text):
            if self.display is not None and writer == self.display_writer:  # not another rank's
                self.display.setdefault("outputs", {})[match["name"]] = float(match["value"])
        elif "Train net output" in text:
            raise self.error(line, f"unrecognised train net output line: {text[:200]!r}")
        elif match := TOP_SHAPE.match(text):
            self.batch = self.batch or int(match["batch"])
        elif match := TESTING_FOR.match(text):
            self.start_benchmark()["iterations"] = int(match["n"])
        elif match := LAYER_TIME.match(text):
            self.layer_time(line, match)
        elif ("forward: " in text or "backward: " in text) and self.benchmark is not None:
            raise self.error(line, f"unrecognised per-layer time line: {text[:200]!r}")
        elif match := AVERAGE.match(text):
            bench = self.start_benchmark()
            key = "total_ms" if match["total"] else AVERAGE_KEYS[match["what"]]
            bench[key] = _finite(self.path, line, match["ms"], "time")
        elif text.startswith(("Average Forward", "Average Backward", "Total Time")):
            raise self.error(line, f"unrecognised benchmark average line: {text[:200]!r}")
        else:
            return False
        return True

    def learning_rate(self, line: int, number: int, lr: float, writer: Writer) -> None:
        """The rate of the open display's iteration, from the thread that logged the display.
        A rate from another writer cannot be told apart from another rank's (a merged log
        without launcher tags, or Caffe-MPI's, which displays from a thread of its own) and
        is not read; nor is a rate before any display (whose displays are read is not known)."""
        display = self.display
        if self.display_writer is None or writer != self.display_writer:
            return
        if display is None or display["iteration"] != number:
            raise self.error(
                line, f"learning rate of iteration {number}, which has no loss line just before it"
            )
        display["lr"] = lr

    def bench_iteration(self, line: int, number: int, ms: float, now: float) -> None:
        if self.last_bench is not None and number <= self.last_bench:
            raise self.error(line, f"benchmark iteration {number} follows iteration {self.last_bench}")
        self.last_bench = number
        self.start_benchmark()
        self.emit(
            {"event": "benchmark_iteration", "iteration": number, "forward_backward_ms": ms, "time": now}
        )

    def start_benchmark(self) -> dict[str, Any]:
        if self.benchmark is None:
            self.benchmark = {"event": "benchmark", "iterations": None}
        return self.benchmark

    def layer_time(self, line: int, match: re.Match[str]) -> None:
        self.start_benchmark()
        name, phase = match["layer"], match["phase"]
        ms = _finite(self.path, line, match["ms"], "time")
        if phase == "forward":
            if name in self.layers_seen:
                raise self.error(line, f"layer {name!r} timed twice")
            self.layers_seen.add(name)
            order = len(self.layers_seen) - 1
            self.forward[name] = {"event": "layer_time", "layer": name, "order": order, "forward_ms": ms, "backward_ms": None}  # fmt: skip
        else:
            row = self.forward.pop(name, None)
            if row is None:
                raise self.error(line, f"backward time of layer {name!r} without its forward time")
            row["backward_ms"] = ms
            self.emit(row)

    def finish(self, last_line: int) -> list[dict[str, Any]]:
        """The events the end of the log completes: the open display, the benchmark (when
        whole), and the run_end of a failed run."""
        self.out = []
        self.close_display()
        bench = self.benchmark
        if self.failure is not None:
            if bench is not None and "forward_backward_ms" in bench and not self.forward:
                self.out.append(self.finished_benchmark(bench))  # whole before the crash
            self.out.append({"event": "run_end", "status": "failed", **self.failure})
        elif bench is not None:
            self.check_benchmark(bench, last_line)
            self.out.append(self.finished_benchmark(bench))
        if not self.produced + len(self.out):
            raise self.error(max(last_line, 1), "no Caffe solver or caffe time lines found")
        return self.done()

    def check_benchmark(self, bench: dict[str, Any], last_line: int) -> None:
        if "forward_backward_ms" not in bench:
            raise self.error(last_line, "caffe time output ends before 'Average Forward-Backward'")
        if self.forward:
            raise self.error(last_line, f"layer(s) without a backward time: {', '.join(self.forward)}")

    def finished_benchmark(self, bench: dict[str, Any]) -> dict[str, Any]:
        bench["batch"] = self.batch or None  # caffe time does not log it: None, not 0
        return bench


def _events(reader: _Reader, lines: Iterator[Line]) -> Iterator[dict[str, Any]]:
    number = 0
    for line in lines:
        number = line.number
        yield from reader.line(line)
    yield from reader.finish(number)


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Events from a Caffe log (solver output, ``caffe time`` output, or both), each as
    soon as the log completes it."""
    return _events(_Reader(str(path)), read_lines(path))


def parse_text(text: str, path: str = "<log>") -> list[dict[str, Any]]:
    """``parse`` for a log already in memory."""
    return list(_events(_Reader(path), text_lines(text, path)))


def parse(path: str | Path) -> list[dict[str, Any]]:
    """Events from a Caffe log (solver output, ``caffe time`` output, or both)."""
    return list(iter_events(path))


def layer_table(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-layer rows of a ``caffe time`` benchmark, in net order, with shares of the total.

    ``share`` is the layer's forward + backward time over the sum of all layers' (Caffe's
    own "Average Forward-Backward" also counts the time between layers).
    """
    rows = sorted((e for e in events if e.get("event") == "layer_time"), key=lambda e: e["order"])
    total = sum(r["forward_ms"] + r["backward_ms"] for r in rows)
    table = []
    for row in rows:
        both = row["forward_ms"] + row["backward_ms"]
        table.append(
            {
                "layer": row["layer"],
                "order": row["order"],
                "forward_ms": row["forward_ms"],
                "backward_ms": row["backward_ms"],
                "total_ms": both,
                "share": both / total if total > 0 and math.isfinite(total) else None,
            }
        )
    return table
