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


def parse_text(text: str, path: str = "<log>", *, strict: bool = True) -> list[dict[str, Any]]:
    """Iteration events from the text of a BigDL driver log.

    ``strict=False`` is for the log of a run that was killed: a last iteration line or
    metrics block cut off by the kill is dropped instead of failing the whole parse.
    """
    iterations: list[_Iteration] = []
    block: dict[str, float] | None = None
    block_line = 0
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        try:
            if block is not None:
                if METRICS_END.match(line):
                    if iterations and not iterations[-1].metrics:
                        iterations[-1].metrics = block
                    block = None
                    continue
                metric = METRIC.match(line)
                if metric:
                    value = float(metric["value"])
                    if not math.isfinite(value) or value < 0:
                        raise ParseError(path, number, f"metric {metric['name']!r} is {value}")
                    block[metric["name"]] = value
                    continue
                if METRIC_EMPTY.match(line):
                    continue
                raise ParseError(path, number, f"unreadable line in a Metrics Summary block: {line[:200]!r}")
            if METRICS_START.match(line):
                block, block_line = {}, number
                continue
            if ANCHOR not in line:
                continue
            anchor = line.index(ANCHOR)
            found = MESSAGE.search(line, anchor)
            message = found["message"] if found else ""
            if "Trained" not in message or "[Iteration" not in message:
                continue
            current = _iteration(path, number, line[:anchor], message)
            if iterations and current.fields["iteration"] <= iterations[-1].fields["iteration"]:
                raise ParseError(
                    path,
                    number,
                    f"iteration {current.fields['iteration'] + 1} follows iteration"
                    f" {iterations[-1].fields['iteration'] + 1}: two runs in one log?",
                )
            iterations.append(current)
        except ParseError:
            if strict:
                raise
            if block is not None and not METRICS_START.match(line):
                block = None
    if block is not None and strict:
        raise ParseError(path, block_line, "Metrics Summary block is never closed: the log is cut off")
    return [it.event() for it in iterations]


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
