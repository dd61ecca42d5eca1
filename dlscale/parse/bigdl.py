"""BigDL's own driver log -> iteration events (``python -m dlscale.parse bigdl LOG``).

BigDL's DistriOptimizer reports every iteration itself, on the driver, through log4j; the
line prefix depends on who set log4j up, so the parser anchors on the logger name
(``DistriOptimizer$``, or ``DistriLogger``, through which DistriOptimizerV2 writes the same
messages) and reads whatever timestamp precedes it. Three prefixes are known
(each seen in real runs; tests/data/bigdl holds samples):

- Spark's default pattern:        ``26/11/29 19:38:39 INFO DistriOptimizer$: ...``
- dlscale's full pattern:         ``2026-11-29 19:39:04.722 INFO DistriOptimizer$: ...``
  (dlscale/runners/bigdl/log4j2.properties; millisecond timestamps)
- Python-redirected (BigDL's bundled config when the JVM is started from pyspark):
  ``26-11-29 19:39:42 [Thread-3] INFO  DistriOptimizer$:432 - ...``

What becomes of each iteration (BigDL's ``[Iteration N]`` is 1-based; events are 0-based):

- ``Trained R records in S seconds ... Loss is L.`` (BigDL 0.1-0.4: ``Train R in Sseconds.
  ... Loss is L.``) -> ``step_s`` = S, the driver's wall
  time of the whole synchronous step (all executors' forward/backward, the parameter
  synchronisation through Spark's block manager, and Spark's job scheduling); ``samples``
  = R, the GLOBAL batch (one driver reports for the whole run); ``loss`` = L; plus
  ``throughput`` and ``epoch``.
- The DEBUG ``Metrics Summary`` block logged right after that line (enabled by the log4j2
  file; seconds, averaged over executors):
  ``compute_s`` = ``computing time average`` (forward + backward of the executor's model
  replicas, wall time) + ``compute weight average`` (the optimiser's update of the
  executor's slice of the weights): the work that would remain with free communication;
  ``comm_s`` = ``step_s - compute_s``: BigDL's communication is the parameter
  synchronisation through the block manager (``get weights average``, ``put gradient``,
  ``aggregrateGradientParition average executor``, kept as extra fields) plus the Spark
  task round trip that carries it, which no metric isolates; the step minus its computing
  is the only honest, complete measure of it. Without a block, both are null.
- ``input_load_s`` (once known, on every event): the seconds from "caching training rdd
  ..." to "Cache thread models...", DistriOptimizer materialising its training RDD (the
  executors reading and converting their data) before the first step. BigDL then takes
  every mini-batch from that cache, inside what it times as ``get weights average``; no
  per-step input wait exists to report.
- ``loss``: a float, NaN or infinite as BigDL printed it (``NaN``, ``Infinity``); the CLI
  writes those as ``"nan"``/``"inf"``/``"-inf"`` (see ``dlscale.parse``), never ``null``.

``LogParser`` reads line by line, so the same code parses a finished log and follows a
live one (the BigDL runner records each iteration while BigDL trains); ``iter_events``
streams a log file through it.

A failed run: Spark's and the JVM's own words in the log decide that the run failed (a
job aborted, an ``OutOfMemoryError``, an uncaught exception: ``FATAL``); the reason given
is the most telling error around it (``failure_reason``: the out-of-memory, else the
first lost task's error, such as an executor's ``ClassCastException``, else Spark's "Job
aborted due to stage failure" line, ...). The events then end with ``run_end`` failed. A
log with no iteration and no failure is malformed (unless ``strict=False``): nothing in
it is a result.

Malformed input raises ParseError naming FILE:LINE: an iteration or metrics line that
does not read as BigDL writes it, iterations or iteration times going backwards, a
metrics block cut off, a last line cut off before its newline (unless the log shows the
failure that cut it), an empty or binary file. Lines that do not mention DistriOptimizer
are someone else's and are only searched for failures. No regular expression here can
backtrack more than linearly in a line's length (no nested or overlapping unbounded
repetitions; tests/unit/test_parse_hostile.py checks), so a hostile 5 MB line costs what
reading it does.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlscale.parse import Line, ParseError, read_lines, shorten, text_lines

# The optimiser's logger: DistriOptimizer's, or DistriOptimizerV2's (BigDL 0.10+) DistriLogger.
ANCHOR = re.compile(r"DistriOptimizer\$|DistriLogger")
# Unambiguous numbers: "\d+\.?\d*" would let two quantifiers share the digits and
# backtrack quadratically on a long run of digits that is not followed by what is expected.
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
LOSS = r"[-+]?(?:NaN|Infinity|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
# "Trained R records in S seconds." (BigDL >= 0.5) or "Train R in Sseconds." (BigDL 0.1-0.4,
# the 2017-2018 releases of the seed study's time: the same step, worded before a rename).
ITERATION = re.compile(
    rf"\[Epoch (?P<epoch>\d+) (?P<done>\d+)/(?P<size>\d+)\]\[Iteration (?P<iteration>\d+)\]"
    rf"\[Wall Clock (?P<wall>{NUMBER})s\] Train(?:ed)? (?P<records>{NUMBER})(?: records)? in"
    rf" (?P<seconds>{NUMBER}) ?seconds\. Throughput is (?P<throughput>{NUMBER}) records/second\."
    rf" Loss is (?P<loss>{LOSS})\.(?:\s|$)"
)
# The rate BigDL's optimiser used for the step, from its hyper-parameter log (absent in
# logs of other optim methods): the evidence that a learning-rate rule reached BigDL.
LEARNING_RATE = re.compile(rf"Current learning rate is (?P<lr>{NUMBER})\.(?:\s|$)")
# What follows the logger name: ": msg" (PatternLayout %c{1}: %m) or ":432 - msg" (%c{1}:%L - %m).
MESSAGE = re.compile(r"(?:DistriOptimizer\$|DistriLogger)(?::\d+ -|:)? ?(?P<message>.*)$")
TIMESTAMPS = (
    (re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,3}))?"), "Ymd"),
    (re.compile(r"(\d{2}/\d{2}/\d{2}) (\d{2}:\d{2}:\d{2})()"), "ymd"),
    (re.compile(r"(\d{2}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})()"), "ymd"),
)  # each: the regex, and the order of the date's fields (Y: 4-digit year, y: 2-digit)
METRICS_START = re.compile(r"^=+ Metrics Summary =+\s*$")
METRICS_END = re.compile(r"^=+\s*$")
# "NAME : VALUE s", or "NAME :  " (BigDL's per-node lines, empty in the releases run here;
# ``_per_node`` reads those a release fills). The name takes its trailing blanks (stripped
# after): a lazy name followed by "\s*" would let both share the blanks and backtrack
# quadratically.
METRIC = re.compile(rf"(?P<name>[A-Za-z][\w \t]*):(?:\s*(?P<value>{NUMBER})\s*s)?\s*")
NUMBER_ONLY = re.compile(NUMBER)
EXTRA_METRICS = {
    "get weights average": "get_weights_s",
    "put gradient": "put_gradient_s",
    "aggregrateGradientParition average executor": "aggregate_gradient_s",  # BigDL's spelling
    "send weights average": "send_weights_s",
}
TIMESTAMP_WIDTH = 64  # where a failure line's own timestamp is looked for


def parse_timestamp(prefix: str) -> float | None:
    """Seconds since the epoch (local time, as log4j writes it) of the last timestamp in
    ``prefix`` (None if it has none, or one that is no date)."""
    for regex, order in TIMESTAMPS:
        last = deque(regex.finditer(prefix), maxlen=1)
        if not last:
            continue
        day, clock, millis = last[0].groups()
        return _local_seconds(day, order, clock, millis)
    return None


def _local_seconds(day: str, order: str, clock: str, millis: str) -> float | None:
    """``day`` (its fields in ``order``, Y/y: 4- or 2-digit year) at ``clock`` local time,
    as seconds since the epoch. Built by hand: strptime costs 5x more per line."""
    fields = dict(zip(order, map(int, day.replace("/", "-").split("-")), strict=True))
    year = fields.get("Y") or fields["y"] + (2000 if fields["y"] < 69 else 1900)  # as strptime's %y
    try:
        stamp = dt.datetime(year, fields["m"], fields["d"], *map(int, clock.split(":")))
    except ValueError:
        return None
    return stamp.timestamp() + (int(millis.ljust(3, "0")) / 1000 if millis else 0.0)


@dataclass
class _Iteration:
    line: int
    fields: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)

    def event(self) -> dict[str, Any]:
        fields = dict(self.fields)
        compute = None
        if "computing time average" in self.metrics:
            compute = self.metrics["computing time average"] + self.metrics.get("compute weight average", 0.0)
        step = fields["step_s"]
        fields["compute_s"] = compute
        fields["comm_s"] = None if compute is None else max(0.0, step - compute)
        for name, key in EXTRA_METRICS.items():
            if name in self.metrics:
                fields[key] = self.metrics[name]
        order = ("event", "rank", "iteration", "samples", "step_s", "compute_s", "comm_s", "loss", "time")
        return {**{k: fields[k] for k in order}, **{k: v for k, v in fields.items() if k not in order}}


def _iteration(path: str, number: int, prefix: str, message: str) -> _Iteration:
    match = ITERATION.search(message)
    if not match:
        raise ParseError(path, number, f"unreadable BigDL iteration line: {message[:200]!r}")
    records = float(match["records"])
    step = float(match["seconds"])
    if not (math.isfinite(step) and step >= 0 and math.isfinite(records) and records >= 0):
        raise ParseError(path, number, f"impossible step: {records} records in {step} s")
    if not records.is_integer():
        raise ParseError(path, number, f"impossible step: {records} records is not a whole number")
    if int(match["iteration"]) < 1:
        raise ParseError(path, number, f"iteration {match['iteration']}: BigDL counts from 1")
    return _Iteration(
        number,
        {
            "event": "iteration",
            "rank": 0,
            "iteration": int(match["iteration"]) - 1,
            "samples": int(records),
            "step_s": step,
            "loss": float(match["loss"]),
            "time": parse_timestamp(prefix),
            "epoch": int(match["epoch"]),
            "throughput": float(match["throughput"]),
            "wall_clock_s": float(match["wall"]),
            **_learning_rate(message),
        },
    )


def _learning_rate(message: str) -> dict[str, float]:
    """``{"lr": rate}`` where the line names the step's rate, else nothing."""
    found = LEARNING_RATE.search(message)
    if found is None:
        return {}
    rate = abs(float(found["lr"]))  # BigDL keeps the rate negated inside; some versions print it so
    return {"lr": rate} if math.isfinite(rate) else {}


def _message(line: str) -> tuple[int, str]:
    """Where the logger name starts in a DistriOptimizer line, and the message after it."""
    logger = ANCHOR.search(line)
    anchor = logger.start() if logger else 0
    found = MESSAGE.match(line, anchor)
    return anchor, (found["message"] if found else "")


def _per_node(line: str) -> bool:
    """A per-node line of a Metrics Summary block with its values: "NAME for each node :
    V1 V2 ..." (one unit-less number per node, where a release fills them; not read)."""
    name, colon, values = line.partition(":")
    return (
        bool(colon)
        and name.rstrip().endswith("for each node")
        and all(NUMBER_ONLY.fullmatch(value) for value in values.split())
    )


def _kind(message: str) -> str | None:
    """What a DistriOptimizer message is to this parser: an iteration, part of the input
    caching measure, or (None) nothing it reads."""
    if "[Iteration" in message and ("Trained" in message or " Train " in message):
        return "iteration"
    if message.startswith(("caching training rdd", "Cache thread models")):
        return "caching"
    return None


# Failure evidence. A line with one of FATAL shows that the run failed, not merely that
# something went wrong and was handled (Spark retries a lost task; BigDL and Spark log
# errors they recover from, and exceptions at shutdown).
FATAL = (
    "Job aborted due to stage failure",  # Spark gave the job up (the driver's exception)
    "; aborting job",  # TaskSetManager: "Task 0 in stage 3.0 failed 1 times; aborting job"
    "java.lang.OutOfMemoryError",  # a JVM ran out of memory: whatever it does next is suspect
    'Exception in thread "',  # an exception nobody caught
    "Py4JJavaError",  # the Python driver's call into the JVM (optimize()) failed
)
IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
PACKAGE = re.compile(r"[a-z_$][\w$]*")
CLASS = re.compile(r"[A-Z][\w$]*")
QUALIFIED = re.compile(r"[\w$.]+")
PYTHON_ERROR_ENDINGS = ("Error", "Exception", "Exit", "Interrupt")


def _after(line: str, marker: str) -> str | None:
    start = line.find(marker)
    return line[start:] if start >= 0 else None


def _out_of_memory(line: str) -> str | None:
    return _after(line, "java.lang.OutOfMemoryError")


def _lost_task(line: str) -> str | None:
    """The error of a failed task: Spark logs it as "Lost task ... (... executor N): <error>"."""
    start = line.find("Lost task ")
    colon = line.find("): ", start) if start >= 0 else -1
    return (line[colon + 3 :].strip() or None) if colon >= 0 else None


def _job_aborted(line: str) -> str | None:
    return _after(line, "Job aborted due to stage failure: ")


def _error_level(line: str) -> str | None:
    """The message of an ERROR-level line (after an optional ``[thread]``)."""
    start = line.find("ERROR")
    while start >= 0:
        before, after = line[start - 1 : start], line[start + 5 : start + 6]
        # Only a word "ERROR" followed by blanks and a message (no copy of the line's rest
        # before that is known: a line of many "xERROR" would make the loop quadratic).
        if (
            not (before.isalnum() or before == "_")
            and after.isspace()
            and (message := line[start + 5 :].strip())
        ):
            if message.startswith("["):
                close = message.find("]")
                if close >= 0 and message[close + 1 :].strip():
                    message = message[close + 1 :].strip()
            return message
        start = line.find("ERROR", start + 5)
    return None


def _qualified_exception(token: str) -> str | None:
    """``a.b.SomeException`` inside a dotted token: lower-case packages, then a class whose
    name ends in Exception or Error (split, not one regex: nested repetitions backtrack)."""
    parts = token.split(".")
    for end in range(1, len(parts)):
        name = parts[end]
        if CLASS.fullmatch(name) and name.endswith(("Exception", "Error")):
            begin = end
            while begin > 0 and PACKAGE.fullmatch(parts[begin - 1]):
                begin -= 1
            if begin < end:
                return ".".join(parts[begin : end + 1])
    return None


def _exception_named(line: str) -> str | None:
    """The first Java exception named in the line, with its message when one follows."""
    if "Exception" not in line and "Error" not in line:
        return None
    for token in QUALIFIED.finditer(line):
        name = _qualified_exception(token.group())
        if name is None:
            continue
        rest = line[token.end() :]
        if token.group().endswith(name) and rest.startswith(": "):
            return name + rest
        return name
    return None


def _python_error(line: str) -> str | None:
    """A Python traceback's last line (``pkg.mod.SomeError: message``), or None."""
    name, _, _ = line.partition(":")
    parts = name.split(".")
    if not name.endswith(PYTHON_ERROR_ENDINGS) or not all(IDENTIFIER.fullmatch(p) for p in parts):
        return None
    return line.strip()


# Evidence of why a run failed, in order of preference: the JVM running out of memory; the
# error of the first task that failed, which is the cause, while what follows is the
# consequence; Spark's "Job aborted" summary; the first ERROR line; the first exception
# named anywhere.
CAUSES = (_out_of_memory, _lost_task, _job_aborted, _error_level, _exception_named)


def _may_matter(line: str) -> bool:
    """Whether a line can hold any failure evidence at all (cheap substring tests first:
    almost every line of a healthy log is rejected here)."""
    return "rror" in line or "ERROR" in line or "xception" in line or "Lost task" in line or "abort" in line


class _Evidence:
    """Failure evidence gathered line by line: the first line that shows the run failed
    (``fatal``) and the first line of each kind of cause (``reason``)."""

    def __init__(self) -> None:
        self.fatal: tuple[int, str] | None = None
        self.causes: list[str | None] = [None] * len(CAUSES)
        self._waiting: set[int] = set()  # causes that are a Python traceback's first line

    @property
    def failed(self) -> bool:
        return self.fatal is not None

    def see(self, number: int, line: str) -> None:
        if self._waiting:
            self._traceback_end(line)
        if not _may_matter(line):
            return
        if self.fatal is None and any(marker in line for marker in FATAL):
            self.fatal = (number, line)
        for kind, find in enumerate(CAUSES):
            if self.causes[kind] is None:
                reason = find(line)
                if reason:
                    self.causes[kind] = reason
                    if "PythonException" in reason and "Traceback" in reason:
                        self._waiting.add(kind)

    def _traceback_end(self, line: str) -> None:
        """An executor's Python traceback is summed up by its last line (``DatasetError:
        ... missing``), not by Spark's ``PythonException`` wrapper."""
        error = _python_error(line)
        if error:
            for kind in self._waiting:
                self.causes[kind] = error
            self._waiting.clear()

    @property
    def cause(self) -> str | None:
        """The most telling error seen (see CAUSES), at most 300 characters."""
        return shorten(next((cause.strip() for cause in self.causes if cause), None))

    @property
    def reason(self) -> str | None:
        """Why the run failed: the cause, else the line that shows the failure."""
        return self.cause or (shorten(self.fatal[1].strip()) if self.fatal else None)

    def run_end(self) -> dict[str, Any] | None:
        if self.fatal is None:
            return None
        number, line = self.fatal
        stamp = parse_timestamp(line[:TIMESTAMP_WIDTH])
        return {"event": "run_end", "status": "failed", "reason": self.reason, "time": stamp, "line": number}


class LogParser:
    """BigDL's driver log read line by line: ``feed`` returns the iterations each line completes.

    The same parser reads a whole log after the fact (``iter_events``, ``parse_text``) and
    follows a log while BigDL writes it (the BigDL runner's driver records each iteration
    as it happens, so that a NaN loss or a dead executor stops training at once). An
    iteration is complete when its ``Metrics Summary`` block closes, when the next
    iteration line comes, or at ``close()``; one whose loss is not finite is complete at
    once (its timing does not matter: the run is failing). ``feed`` and ``close`` return
    iteration events only; ``finish`` adds the ``run_end`` of a failed run.

    ``strict=False`` is for the log of a run that was killed: a last iteration line or
    metrics block cut off by the kill is dropped instead of failing the whole parse.
    """

    def __init__(self, path: str = "<log>", *, strict: bool = True) -> None:
        self.path, self.strict = path, strict
        self.number = 0  # lines read so far
        self.completed = 0  # iteration events returned so far
        self.evidence = _Evidence()
        self._block: dict[str, float] | None = None
        self._block_line = 0
        self._pending: _Iteration | None = None
        self._last: int | None = None  # 0-based number of the last iteration line read
        self._last_time: float | None = None  # its time stamp
        self._caching_since: float | None = None
        # Seconds DistriOptimizer took to cache the training RDD before its first step (the
        # executors reading and converting their data): "caching training rdd ..." until
        # "Cache thread models...". Added to every iteration event once known.
        self.input_load_s: float | None = None

    def feed(self, raw: str, terminated: bool = True) -> list[dict[str, Any]]:
        """Read the next line (without or with its newline); the iteration events it completes.

        ``terminated=False`` says that this is the log's last line and it had no newline:
        the log was cut while it was written, so a line this parser would read numbers from
        may be cut in the middle of one (ParseError, or dropped when not strict or when the
        log already shows the failure that cut it).
        """
        self.number += 1
        line = raw.rstrip("\r\n")
        self.evidence.see(self.number, line)
        if not terminated and self._reads(line):
            if self.strict and not self.evidence.failed:
                raise ParseError(
                    self.path, self.number, f"last line cut off before its newline: {line[-80:]!r}"
                )
            return []
        try:
            return self._line(line)
        except ParseError:
            if self.strict:
                raise
            if self._block is not None and not METRICS_START.match(line):
                self._block = None
            return []

    def _reads(self, line: str) -> bool:
        """Whether this parser would read anything (numbers, times) from ``line``."""
        if self._block is not None or METRICS_START.match(line):
            return True
        return ANCHOR.search(line) is not None and _kind(_message(line)[1]) is not None

    def _complete(self) -> list[dict[str, Any]]:
        done, self._pending = self._pending, None
        if done is None:
            return []
        event = done.event()
        if self.input_load_s is not None:
            event["input_load_s"] = self.input_load_s
        self.completed += 1
        return [event]

    def _caching(self, prefix: str, message: str) -> None:
        if message.startswith("caching training rdd"):
            self._caching_since = parse_timestamp(prefix)
        elif message.startswith("Cache thread models") and "done" not in message:
            stamp = parse_timestamp(prefix)
            if self._caching_since is not None and stamp is not None and self.input_load_s is None:
                if stamp < self._caching_since:
                    raise ParseError(
                        self.path, self.number, "time goes backwards: models cached before the RDD"
                    )
                self.input_load_s = stamp - self._caching_since

    def _metrics_line(self, block: dict[str, float], line: str) -> list[dict[str, Any]]:
        if METRICS_END.match(line):
            self._block = None
            if self._pending is not None and not self._pending.metrics:
                self._pending.metrics = block
                return self._complete()
            return []
        metric = METRIC.fullmatch(line)
        if metric is None and _per_node(line):
            return []
        if metric is None:
            raise ParseError(
                self.path, self.number, f"unreadable line in a Metrics Summary block: {line[:200]!r}"
            )
        if metric["value"] is None:
            return []  # BigDL's per-node lines, empty
        name, value = metric["name"].rstrip(), float(metric["value"])
        if not math.isfinite(value) or value < 0:
            raise ParseError(self.path, self.number, f"metric {name!r} is {value}")
        block[name] = value
        return []

    def _check_order(self, current: _Iteration, prefix: str) -> None:
        """Iterations and their times only go forwards within one run."""
        iteration, stamp = current.fields["iteration"], current.fields["time"]
        if self._last is not None and iteration <= self._last:
            raise ParseError(
                self.path,
                self.number,
                f"iteration {iteration + 1} follows iteration {self._last + 1}: two runs in one log?",
            )
        if stamp is not None and self._last_time is not None and stamp < self._last_time:
            raise ParseError(
                self.path,
                self.number,
                f"time goes backwards: iteration {iteration + 1} ({prefix.strip()[-30:]!r}) is stamped"
                f" {self._last_time - stamp:.3f} s before the iteration line above it",
            )
        self._last = iteration
        if stamp is not None:
            self._last_time = stamp

    def _line(self, line: str) -> list[dict[str, Any]]:
        if self._block is not None:
            return self._metrics_line(self._block, line)
        if METRICS_START.match(line):
            self._block, self._block_line = {}, self.number
            return []
        if ANCHOR.search(line) is None:
            return []
        anchor, message = _message(line)
        kind = _kind(message)
        if kind == "caching":
            self._caching(line[:anchor], message)
        if kind != "iteration":
            return []
        current = _iteration(self.path, self.number, line[:anchor], message)
        self._check_order(current, line[:anchor])
        done = self._complete()
        self._pending = current
        if not math.isfinite(current.fields["loss"]):
            done += self._complete()
        return done

    def close(self) -> list[dict[str, Any]]:
        """The end of the log: the last iteration, if it is still open (iteration events only)."""
        if self._block is not None and self.strict and not self.evidence.failed:
            raise ParseError(
                self.path, self._block_line, "Metrics Summary block is never closed: the log is cut off"
            )
        return self._complete()

    def finish(self) -> list[dict[str, Any]]:
        """``close()``, then the ``run_end`` failed event if the log shows that the run failed.

        A strict parse of a log with neither an iteration nor a failure is malformed: it is
        not BigDL's driver log, or the log of a run that never reached its first step.
        """
        events = self.close()
        end = self.evidence.run_end()
        if end is not None:
            return [*events, end]
        if self.strict and self.completed == 0:
            raise ParseError(
                self.path,
                self.number,
                "no BigDL iteration line and no failure in the log (not a driver log?)",
            )
        return events


def _events(parser: LogParser, lines: Iterator[Line]) -> Iterator[dict[str, Any]]:
    for line in lines:
        yield from parser.feed(line.text, line.terminated)
    yield from parser.finish()


def iter_events(path: str | Path, *, strict: bool = True) -> Iterator[dict[str, Any]]:
    """The events of the BigDL driver log at ``path``, each as soon as the log completes it."""
    return _events(LogParser(str(path), strict=strict), read_lines(path))


def parse_text(text: str, path: str = "<log>", *, strict: bool = True) -> list[dict[str, Any]]:
    """Events from the whole text of a BigDL driver log (see ``LogParser``)."""
    return list(_events(LogParser(path, strict=strict), text_lines(text, path)))


def parse(path: str | Path, *, strict: bool = True) -> list[dict[str, Any]]:
    """Events of the BigDL driver log at ``path`` (the dlscale.parse contract)."""
    return list(iter_events(path, strict=strict))


def failure_reason(text: str) -> str | None:
    """The most telling error in a BigDL/Spark log, in one line of at most 300 characters
    (None if the log shows no error). An executor's Python traceback is summed up by its
    last line (``DatasetError: ... missing``), not by Spark's ``PythonException`` wrapper."""
    evidence = _Evidence()
    for number, line in enumerate(io.StringIO(text), start=1):
        evidence.see(number, line.rstrip("\r\n"))
    return evidence.cause
