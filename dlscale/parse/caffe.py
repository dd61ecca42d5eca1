"""Caffe's native logs -> dlscale events: solver progress and ``caffe time`` benchmarks.

Caffe logs through glog: ``I1129 19:45:12.123456  4242 solver.cpp:218] MESSAGE`` (glog >= 0.6,
Debian 12's, writes the year too: ``I20261129 ...``). The messages read here:

- the solver (one per ``display`` iterations): ``Iteration N (X iter/s, Ys/D iters),
  loss = L`` (BVLC since 2017) or ``Iteration N, loss = L`` (older), then
  ``Train net output #k: NAME = V ...`` and ``Iteration N, lr = X``. Each becomes an
  ``iteration`` event of rank 0 (Caffe logs from the root solver only) with ``loss``,
  ``lr`` and ``step_s`` (1 / iter/s, or from the glog stamps of consecutive displays when
  the log has no rate; None for the first display). ``samples`` is the net's batch, read
  from the first ``Top shape:`` line of the net set-up (0 when the log has none).
  Caffe cannot split a step, so ``compute_s`` and ``comm_s`` are None.
- ``caffe time``: ``Iteration: i forward-backward time: X ms.`` (``benchmark_iteration``
  events), one ``NAME forward: X ms.`` and ``NAME backward: X ms.`` per layer
  (``layer_time`` events, in net order) and ``Average Forward pass`` / ``Backward pass`` /
  ``Forward-Backward`` and ``Total Time`` (one ``benchmark`` event).

``time`` is seconds since the log's first glog line (glog stamps carry no year). Lines that
are not glog lines (Python's own output, mpirun's messages) are skipped. A glog line that
starts like one of the messages above but does not parse, a cut-off glog line, a
benchmark that stops before its averages, or a log with nothing of the above is malformed:
``ParseError`` with ``FILE:LINE``, which ``python -m dlscale.parse caffe`` turns into exit 2.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from pathlib import Path
from typing import Any

from dlscale.parse import ParseError

NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)"

GLOG_START = re.compile(r"^[IWEF](?:\d{4}|\d{8}) ")
GLOG = re.compile(
    r"^(?P<level>[IWEF])(?P<year>\d{4})?(?P<month>\d\d)(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d\.\d+)\s+\d+\s+"
    r"(?P<source>[^\s:\]]+):\d+\] ?(?P<message>.*)$"
)
ITERATION_RATE = re.compile(
    rf"^Iteration (?P<it>\d+) \((?P<rate>{NUMBER}) iter/s, (?P<lapse>{NUMBER})s/(?P<display>\d+) iters\),"
    rf" loss = (?P<loss>{NUMBER})$"
)
ITERATION_LOSS = re.compile(rf"^Iteration (?P<it>\d+), loss = (?P<loss>{NUMBER})$")
ITERATION_LR = re.compile(rf"^Iteration (?P<it>\d+), lr = (?P<lr>{NUMBER})$")
ITERATION_OTHER = re.compile(r"^Iteration \d+, (?:Testing net \(#\d+\)|Snapshotting|loss = \S+ \(.*\))")
TRAIN_OUTPUT = re.compile(rf"^\s*Train net output #\d+: (?P<name>\S+) = (?P<value>{NUMBER})(?: \(.*\))?$")
TOP_SHAPE = re.compile(r"^Top shape: (?P<dims>\d+(?: \d+)*) \(\d+\)$")
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


def _stamp(match: re.Match[str]) -> dt.datetime:
    # glog >= 0.6 writes the year; older glog does not (then 2000, a leap year, so that
    # 29 February parses). Only differences between stamps are used.
    year = match["year"] or "2000"
    return dt.datetime.strptime(
        f"{year}{match['month']}{match['day']} {match['clock']}", "%Y%m%d %H:%M:%S.%f"
    )


def _float(text: str) -> float:
    return float(text)


class _Reader:
    """Walks one log, line by line, building events; knows the file name for errors."""

    def __init__(self, path: str):
        self.path = path
        self.events: list[dict[str, Any]] = []
        self.iterations: dict[int, dict[str, Any]] = {}
        self.first_stamp: dt.datetime | None = None
        self.batch = 0
        self.layers: dict[str, dict[str, Any]] = {}
        self.benchmark: dict[str, Any] | None = None
        self.benchmark_line = 0
        self.last_display: tuple[int, float] | None = None

    def error(self, line: int, message: str) -> ParseError:
        return ParseError(self.path, line, message)

    def seconds(self, match: re.Match[str]) -> float:
        stamp = _stamp(match)
        if self.first_stamp is None:
            self.first_stamp = stamp
        delta = (stamp - self.first_stamp).total_seconds()
        if delta < 0:  # a year-less log crossed New Year
            delta += 366 * 86400
        return delta

    def solver_iteration(
        self, number: int, loss: float, step_s: float | None, now: float, **extra: Any
    ) -> None:
        if step_s is None and self.last_display is not None and number > self.last_display[0]:
            step_s = (now - self.last_display[1]) / (number - self.last_display[0])
        self.last_display = (number, now)
        event = {
            "event": "iteration",
            "rank": 0,
            "iteration": number,
            "samples": self.batch,
            "step_s": step_s,
            "compute_s": None,
            "comm_s": None,
            "loss": loss,
            "time": now,
            **extra,
        }
        self.iterations[number] = event
        self.events.append(event)

    def message(self, line: int, text: str, now: float) -> None:
        if match := ITERATION_RATE.match(text):
            rate = _float(match["rate"])
            self.solver_iteration(
                int(match["it"]),
                _float(match["loss"]),
                1.0 / rate if rate > 0 else None,
                now,
                iter_per_s=rate,
            )
        elif match := ITERATION_LOSS.match(text):
            self.solver_iteration(int(match["it"]), _float(match["loss"]), None, now)
        elif match := ITERATION_LR.match(text):
            number = int(match["it"])
            if number not in self.iterations:
                raise self.error(
                    line, f"learning rate of iteration {number}, which has no loss line before it"
                )
            self.iterations[number]["lr"] = _float(match["lr"])
        elif match := BENCH_ITERATION.match(text):
            self.start_benchmark(line)
            self.events.append(
                {"event": "benchmark_iteration", "iteration": int(match["it"]), "forward_backward_ms": _float(match["ms"]), "time": now}
            )  # fmt: skip
        elif text.startswith("Iteration") and not ITERATION_OTHER.match(text):
            raise self.error(line, f"unrecognised Caffe iteration line: {text!r}")
        elif match := TRAIN_OUTPUT.match(text):
            if self.last_display is not None:
                outputs = self.iterations[self.last_display[0]].setdefault("outputs", {})
                outputs[match["name"]] = _float(match["value"])
        elif "Train net output" in text:
            raise self.error(line, f"unrecognised train net output line: {text!r}")
        elif match := TOP_SHAPE.match(text):
            if not self.batch:
                self.batch = int(match["dims"].split()[0])
        elif match := TESTING_FOR.match(text):
            self.start_benchmark(line)["iterations"] = int(match["n"])
        elif match := LAYER_TIME.match(text):
            self.layer_time(line, match)
        elif re.search(r"\b(?:forward|backward): ", text) and self.benchmark is not None:
            raise self.error(line, f"unrecognised per-layer time line: {text!r}")
        elif match := AVERAGE.match(text):
            bench = self.start_benchmark(line)
            key = "total_ms" if match["total"] else AVERAGE_KEYS[match["what"]]
            bench[key] = _float(match["ms"])
        elif text.startswith(("Average Forward", "Average Backward", "Total Time")):
            raise self.error(line, f"unrecognised benchmark average line: {text!r}")

    def start_benchmark(self, line: int) -> dict[str, Any]:
        if self.benchmark is None:
            self.benchmark = {"event": "benchmark", "iterations": None}
            self.benchmark_line = line
        return self.benchmark

    def layer_time(self, line: int, match: re.Match[str]) -> None:
        self.start_benchmark(line)
        name, phase, ms = match["layer"], match["phase"], _float(match["ms"])
        if phase == "forward":
            if name in self.layers:
                raise self.error(line, f"layer {name!r} timed twice")
            self.layers[name] = {"event": "layer_time", "layer": name, "order": len(self.layers), "forward_ms": ms, "backward_ms": None}  # fmt: skip
        else:
            if name not in self.layers or self.layers[name]["backward_ms"] is not None:
                raise self.error(line, f"backward time of layer {name!r} without its forward time")
            self.layers[name]["backward_ms"] = ms

    def finish(self, last_line: int) -> list[dict[str, Any]]:
        if self.benchmark is not None:
            if "forward_backward_ms" not in self.benchmark:
                raise self.error(last_line, "caffe time output ends before 'Average Forward-Backward'")
            unpaired = [name for name, row in self.layers.items() if row["backward_ms"] is None]
            if unpaired:
                raise self.error(last_line, f"layer(s) without a backward time: {', '.join(unpaired)}")
            self.benchmark["batch"] = self.batch or None
            self.events.extend(self.layers.values())
            self.events.append(self.benchmark)
        if not self.events:
            raise self.error(max(last_line, 1), "no Caffe solver or caffe time lines found")
        for event in self.events:
            if event["event"] == "iteration" and event["samples"] == 0 and self.batch:
                event["samples"] = self.batch  # the net's shape was logged after a display line
            if event["event"] == "iteration" and event["step_s"] is None:
                # A display with no earlier stamp to time it against (the first one) has no
                # step time, which an iteration event must have: it stays a loss reading.
                event["event"] = "display"
        return self.events


def parse(path: str | Path) -> list[dict[str, Any]]:
    """Events from a Caffe log (solver output, ``caffe time`` output, or both)."""
    name = str(path)
    reader = _Reader(name)
    number = 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, raw in enumerate(handle, start=1):
            text = raw.rstrip("\n")
            if not GLOG_START.match(text):
                continue
            match = GLOG.match(text)
            if not match:
                raise reader.error(number, f"cut-off or malformed glog line: {text[:80]!r}")
            try:
                now = reader.seconds(match)
            except ValueError as err:
                raise reader.error(number, f"bad glog time stamp: {err}") from None
            reader.message(number, match["message"].rstrip(), now)
    return reader.finish(number)


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
