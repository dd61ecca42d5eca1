"""BigDL's own driver log -> iteration events (``python -m dlscale.parse bigdl LOG``).

BigDL's DistriOptimizer reports every iteration itself, on the driver, through log4j; the
line prefix depends on who set log4j up, so the parser anchors on the logger name
(``DistriOptimizer$``) and reads whatever timestamp precedes it. Three prefixes are known
(each seen in real runs; tests/data/bigdl holds samples):

- Spark's default pattern:        ``26/11/29 19:38:39 INFO DistriOptimizer$: ...``
- dlscale's full pattern:         ``2026-11-29 19:39:04.722 INFO DistriOptimizer$: ...``
  (dlscale/runners/bigdl/log4j2.properties; millisecond timestamps)
- Python-redirected (BigDL's bundled config when the JVM is started from pyspark):
  ``26-11-29 19:39:42 [Thread-3] INFO  DistriOptimizer$:432 - ...``

What becomes of each iteration (BigDL's ``[Iteration N]`` is 1-based; events are 0-based):

- ``Trained R records in S seconds ... Loss is L.`` -> ``step_s`` = S, the driver's wall
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

``LogParser`` reads line by line, so the same code parses a finished log and follows a
live one (the BigDL runner records each iteration while BigDL trains).

Malformed input (an iteration or metrics line that does not read as BigDL writes it,
iterations going backwards, a metrics block cut off) raises ParseError naming FILE:LINE;
lines that do not mention DistriOptimizer are someone else's and are ignored.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlscale.parse import ParseError

ANCHOR = "DistriOptimizer$"
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
LOSS = r"[-+]?(?:NaN|Infinity|\d+\.?\d*(?:[eE][-+]?\d+)?)"
ITERATION = re.compile(
    rf"\[Epoch (?P<epoch>\d+) (?P<done>\d+)/(?P<size>\d+)\]\[Iteration (?P<iteration>\d+)\]"
    rf"\[Wall Clock (?P<wall>{NUMBER})s\] Trained (?P<records>{NUMBER}) records in (?P<seconds>{NUMBER})"
    rf" seconds\. Throughput is (?P<throughput>{NUMBER}) records/second\. Loss is (?P<loss>{LOSS})\.(?:\s|$)"
)
# What follows the logger name: ": msg" (PatternLayout %c{1}: %m) or ":432 - msg" (%c{1}:%L - %m).
MESSAGE = re.compile(r"DistriOptimizer\$(?::\d+ -|:)? ?(?P<message>.*)$")
TIMESTAMPS = (
    (re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,3}))?"), "%Y-%m-%d %H:%M:%S"),
    (re.compile(r"(\d{2}/\d{2}/\d{2}) (\d{2}:\d{2}:\d{2})()"), "%y/%m/%d %H:%M:%S"),
    (re.compile(r"(\d{2}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})()"), "%y-%m-%d %H:%M:%S"),
)
METRICS_START = re.compile(r"^=+ Metrics Summary =+\s*$")
METRICS_END = re.compile(r"^=+\s*$")
METRIC = re.compile(rf"^(?P<name>[A-Za-z][\w ]*?)\s*:\s*(?P<value>{NUMBER})\s*s\s*$")
METRIC_EMPTY = re.compile(r"^[A-Za-z][\w ]*?\s*:\s*$")  # "computing time for each node :  "
EXTRA_METRICS = {
    "get weights average": "get_weights_s",
    "put gradient": "put_gradient_s",
    "aggregrateGradientParition average executor": "aggregate_gradient_s",  # BigDL's spelling
    "send weights average": "send_weights_s",
}


def parse_timestamp(prefix: str) -> float | None:
    """Seconds since the epoch (local time, as log4j writes it) of the last timestamp in ``prefix``."""
    for regex, fmt in TIMESTAMPS:
        matches = list(regex.finditer(prefix))
        if not matches:
            continue
        day, clock, millis = matches[-1].groups()
        try:
            struct = time.strptime(f"{day} {clock}", fmt)
        except ValueError:
            return None
        return time.mktime(struct) + (int(millis.ljust(3, "0")) / 1000 if millis else 0.0)
    return None


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
        },
    )


class LogParser:
    """BigDL's driver log read line by line: ``feed`` returns the iterations each line completes.

    The same parser reads a whole log after the fact (``parse_text``) and follows a log
    while BigDL writes it (the BigDL runner's driver records each iteration as it happens,
    so that a NaN loss or a dead executor stops training at once). An iteration is complete
    when its ``Metrics Summary`` block closes, when the next iteration line comes, or at
    ``close()``; one whose loss is not finite is complete at once (its timing does not
    matter: the run is failing).

    ``strict=False`` is for the log of a run that was killed: a last iteration line or
    metrics block cut off by the kill is dropped instead of failing the whole parse.
    """

    def __init__(self, path: str = "<log>", *, strict: bool = True) -> None:
        self.path, self.strict = path, strict
        self.number = 0  # lines read so far
        self._block: dict[str, float] | None = None
        self._block_line = 0
        self._pending: _Iteration | None = None
        self._last: int | None = None  # 0-based number of the last iteration line read
        self._caching_since: float | None = None
        # Seconds DistriOptimizer took to cache the training RDD before its first step (the
        # executors reading and converting their data): "caching training rdd ..." until
        # "Cache thread models...". Added to every iteration event once known.
        self.input_load_s: float | None = None

    def feed(self, raw: str) -> list[dict[str, Any]]:
        """Read the next line (without or with its newline); the iteration events it completes."""
        self.number += 1
        line = raw.rstrip("\r\n")
        try:
            return self._line(line)
        except ParseError:
            if self.strict:
                raise
            if self._block is not None and not METRICS_START.match(line):
                self._block = None
            return []

    def _complete(self) -> list[dict[str, Any]]:
        done, self._pending = self._pending, None
        if done is None:
            return []
        event = done.event()
        if self.input_load_s is not None:
            event["input_load_s"] = self.input_load_s
        return [event]

    def _caching(self, prefix: str, message: str) -> None:
        if message.startswith("caching training rdd"):
            self._caching_since = parse_timestamp(prefix)
        elif message.startswith("Cache thread models") and "done" not in message:
            stamp = parse_timestamp(prefix)
            if self._caching_since is not None and stamp is not None and self.input_load_s is None:
                self.input_load_s = max(0.0, stamp - self._caching_since)

    def _line(self, line: str) -> list[dict[str, Any]]:
        number = self.number
        if self._block is not None:
            if METRICS_END.match(line):
                block, self._block = self._block, None
                if self._pending is not None and not self._pending.metrics:
                    self._pending.metrics = block
                    return self._complete()
                return []
            metric = METRIC.match(line)
            if metric:
                value = float(metric["value"])
                if not math.isfinite(value) or value < 0:
                    raise ParseError(self.path, number, f"metric {metric['name']!r} is {value}")
                self._block[metric["name"]] = value
                return []
            if METRIC_EMPTY.match(line):
                return []
            raise ParseError(self.path, number, f"unreadable line in a Metrics Summary block: {line[:200]!r}")
        if METRICS_START.match(line):
            self._block, self._block_line = {}, number
            return []
        if ANCHOR not in line:
            return []
        anchor = line.index(ANCHOR)
        found = MESSAGE.search(line, anchor)
        message = found["message"] if found else ""
        if "Trained" not in message or "[Iteration" not in message:
            self._caching(line[:anchor], message)
            return []
        current = _iteration(self.path, number, line[:anchor], message)
        iteration = current.fields["iteration"]
        if self._last is not None and iteration <= self._last:
            raise ParseError(
                self.path,
                number,
                f"iteration {iteration + 1} follows iteration {self._last + 1}: two runs in one log?",
            )
        self._last = iteration
        done = self._complete()
        self._pending = current
        if not math.isfinite(current.fields["loss"]):
            done += self._complete()
        return done

    def close(self) -> list[dict[str, Any]]:
        """The end of the log: the last iteration, if it is still open."""
        if self._block is not None and self.strict:
            raise ParseError(
                self.path, self._block_line, "Metrics Summary block is never closed: the log is cut off"
            )
        return self._complete()


def parse_text(text: str, path: str = "<log>", *, strict: bool = True) -> list[dict[str, Any]]:
    """Iteration events from the whole text of a BigDL driver log (see ``LogParser``)."""
    parser = LogParser(path, strict=strict)
    events = [event for line in text.splitlines() for event in parser.feed(line)]
    return events + parser.close()


def parse(path: str | Path, *, strict: bool = True) -> list[dict[str, Any]]:
    """Iteration events of the BigDL driver log at ``path`` (the dlscale.parse contract)."""
    with open(path, "rb") as handle:
        text = handle.read().decode("utf-8", errors="replace")
    return parse_text(text, str(path), strict=strict)


# Evidence of why a run failed, in order of preference: the JVM running out of memory; the
# error of the first task that failed (Spark logs it as "Lost task ... (... executor N):
# <error>"), which is the cause, while what follows is the consequence; Spark's "Job
# aborted" summary; the first ERROR line; the first exception named anywhere.
_CAUSES = (
    re.compile(r"(java\.lang\.OutOfMemoryError[^\n]*)"),
    re.compile(r"Lost task [^\n]*?\): ([^\n]+)"),
    re.compile(r"(Job aborted due to stage failure: [^\n]*)"),
    re.compile(r"\bERROR\b\s+(?:\[[^\]]*\]\s*)?([^\n]+)"),
    re.compile(r"((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)(?:: [^\n]*)?)"),
)


# The last line of a Python traceback (an executor's Python worker failed): the error itself.
_PYTHON_ERROR = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b(?::[^\n]*)?)$", re.M
)


def failure_reason(text: str) -> str | None:
    """The most telling error in a BigDL/Spark log, in one line of at most 300 characters
    (None if the log shows no error). An executor's Python traceback is summed up by its
    last line (``DatasetError: ... missing``), not by Spark's ``PythonException`` wrapper."""
    for regex in _CAUSES:
        found = regex.search(text)
        if found:
            reason = found.group(1).strip()
            if "PythonException" in reason and "Traceback" in reason:
                inner = _PYTHON_ERROR.search(text, found.end())
                reason = inner.group(1).strip() if inner else reason
            return reason if len(reason) <= 300 else reason[:297] + "..."
    return None
