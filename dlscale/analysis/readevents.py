"""One events file -> what the tables need of it, read in bounded memory.

A long run's file is hundreds of MB (780,000 iterations x 2 ranks: 458 MB). Held as Python
dicts, its events took about seven times that; here each file is streamed a line at a time
(``dlscale.events.scan``, every line validated and bounded by ``MAX_LINE_CHARS``) and each
iteration event keeps only its numbers, in typed columns (8 bytes a field), so the
aggregation's peak memory follows the iterations table it writes, not the text it reads
(docs/memory.md has the measurements).

Nothing is decided here that ``dlscale.analysis.tables`` decided before from the whole file: the run's
first and last events, its eval events and the count of stray events in the middle are kept
as they were, and every check of the run (schema, run id, ranks, samples) stays in
``dlscale.analysis.tables`` and runs after the whole file has been read, in the same order.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlscale.events import EventError, scan

#: The iteration events' integer fields and float fields (null and absent: NaN), as the
#: iterations table types them (``dlscale.analysis.tables``).
INT_FIELDS = ("rank", "iteration", "samples")
FLOAT_FIELDS = ("step_s", "compute_s", "comm_s", "input_s", "loss")
#: Read for the run's checks only (``dlscale.analysis.eventchecks.check_run_times``), never a
#: column of the iterations table: when each step ended (null: NaN).
CHECK_FIELDS = ("time",)


@dataclass
class RunEvents:
    """One events file as the tables read it: its run_start and run_end with their lines,
    its eval events, how many other events lie between them, one array per field of its
    iteration events (with ``_line``, each event's line, and ``warmup``), and rank 0's first
    iteration event whole (``first_step``: its ``time`` and the start-up parts a runner
    records there, read by ``dlscale.analysis.wallsplit``)."""

    path: str
    start: tuple[int, dict[str, Any]]
    end: tuple[int, dict[str, Any]]
    evals: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    stray: int = 0
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    first_step: dict[str, Any] | None = None

    @property
    def iterations(self) -> int:
        return len(self.columns["_line"])


def _float(value: Any) -> float:
    return float("nan") if value is None else float(value)


def read_run(path: str | os.PathLike[str]) -> RunEvents:
    """Stream one final events file (``dlscale.events.scan``: structure and every line's
    validity checked as ``read_numbered`` does). An integer beyond 64 bits or a number beyond
    a float, which no run writes and no column holds, is an EventError naming ``FILE:LINE``."""
    ints = {name: array("q") for name in ("_line", *INT_FIELDS)}
    floats = {name: array("d") for name in (*FLOAT_FIELDS, *CHECK_FIELDS)}
    warmup = array("b")
    first: tuple[int, dict[str, Any]] | None = None
    last: tuple[int, dict[str, Any]] | None = None
    evals: list[tuple[int, dict[str, Any]]] = []
    first_step: dict[str, Any] | None = None
    stray = 0
    for line, event, is_last in scan(path):  # read to its end: scan checks the structure there
        if first is None:
            first = (line, event)
        if is_last:
            last = (line, event)
        if first[0] == line or is_last:
            continue
        kind = event["event"]
        if kind == "eval":
            evals.append((line, event))
        elif kind != "iteration":
            stray += 1
        else:
            try:
                ints["_line"].append(line)
                for name in INT_FIELDS:
                    ints[name].append(event[name])
                for name in (*FLOAT_FIELDS, *CHECK_FIELDS):
                    floats[name].append(_float(event.get(name)))
            except OverflowError as err:
                raise EventError(f"{path}:{line}: iteration event: {err}") from None
            warmup.append(event.get("warmup") is True)
            if first_step is None and event["rank"] == 0:
                first_step = event
    if first is None or last is None:  # scan has raised for these
        raise EventError(f"{path}:1: events file is empty")
    columns: dict[str, np.ndarray] = {}
    for name, values in ints.items():
        columns[name] = np.frombuffer(values, dtype="int64") if len(values) else np.empty(0, "int64")
    for name, values in floats.items():
        columns[name] = np.frombuffer(values, dtype="float64") if len(values) else np.empty(0, "float64")
    columns["warmup"] = np.frombuffer(warmup, dtype="int8").astype(bool) if len(warmup) else np.empty(0, bool)
    return RunEvents(str(path), first, last, evals, stray, columns, first_step)
