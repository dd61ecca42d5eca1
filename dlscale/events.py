"""The event schema shared by every runner, parser and the analysis.

A run's events live in one JSON Lines file (``events.jsonl``), one object a line:
``run_start``, then ``iteration`` events (one per rank and iteration), then ``run_end``.
The file is written atomically (temporary file + rename), so a reader never sees half a
run: a file that exists is a whole record, ok or failed. Ranks stream their own events
into part files while they train (so that a crash still leaves evidence of where it
happened); the launcher merges them into the final file.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from dlscale import atomic

EVENT_TYPES = ("run_start", "iteration", "run_end")

RUN_ID_FIELDS = ("framework", "model", "nodes", "ranks_per_node", "batch", "repeat")

REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "run_start": (
        "run_id",
        *RUN_ID_FIELDS,
        "world_size",
        "hosts",
        "threads_per_rank",
        "versions",
        "config_sha256",
        "git_sha",
        "time",
    ),
    "iteration": (
        "rank",
        "iteration",
        "samples",
        "step_s",
        "compute_s",
        "comm_s",
        "loss",
        "time",
    ),
    "run_end": ("status", "reason", "time"),
}

STATUSES = ("ok", "failed")


class EventError(ValueError):
    """An events file or event that does not follow the schema.

    The message starts with ``FILE:LINE:`` where known, so that a person can open the
    offending line directly.
    """


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_event(event: Any) -> dict[str, Any]:
    """Check one event against the schema and return it; raise EventError if it is wrong."""
    if not isinstance(event, dict):
        raise EventError(f"event is a {type(event).__name__}, expected a JSON object")
    kind = event.get("event")
    if kind not in EVENT_TYPES:
        raise EventError(f"unknown event type {kind!r} (expected one of {', '.join(EVENT_TYPES)})")
    missing = [key for key in REQUIRED_FIELDS[kind] if key not in event]
    if missing:
        raise EventError(f"{kind} event lacks {', '.join(missing)}")
    if kind == "iteration":
        for key in ("rank", "iteration", "samples"):
            if not isinstance(event[key], int) or isinstance(event[key], bool) or event[key] < 0:
                raise EventError(f"iteration event: {key}={event[key]!r} is not an integer >= 0")
        for key in ("step_s", "compute_s", "comm_s"):
            value = event[key]
            if value is None and key != "step_s":
                continue
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise EventError(f"iteration event: {key}={value!r} is not a finite number >= 0")
        loss = event["loss"]
        if loss is not None and not _is_number(loss):
            raise EventError(f"iteration event: loss={loss!r} is not a number")
    elif kind == "run_end":
        if event["status"] not in STATUSES:
            raise EventError(f"run_end event: status={event['status']!r} is not ok or failed")
    elif kind == "run_start":
        if not isinstance(event["world_size"], int) or event["world_size"] < 1:
            raise EventError(f"run_start event: world_size={event['world_size']!r} is not >= 1")
    return event


def dumps(event: dict[str, Any]) -> str:
    """One event as one line of JSON (NaN is written as null: JSON has no NaN)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in event.items()}
    return json.dumps(clean, sort_keys=False, separators=(",", ":"))


def write_atomic(path: str | os.PathLike[str], events: Iterable[dict[str, Any]]) -> Path:
    """Write events to ``path`` so that the file appears whole or not at all.

    The data go to a temporary file in the same directory, are fsynced, and the file is
    renamed over the target: a crash, a full disk or a kill leaves either the old file or
    none, never a torn one.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = [dumps(validate_event(dict(e))) + "\n" for e in events]
    atomic.write_text(target, "".join(lines))
    return target


def iter_lines(path: str | os.PathLike[str], *, strict: bool = True) -> Iterator[dict[str, Any]]:
    """Yield the events of a JSON Lines file, validated.

    With ``strict`` a malformed line raises EventError naming ``FILE:LINE``. Without it, a
    last line cut in the middle (a rank killed while writing its part file) is skipped;
    that is only for part files, which are evidence, never for final events files.
    """
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        is_last = number == len(lines)
        if not line.endswith("\n") and strict:
            raise EventError(f"{path}:{number}: line is cut off (no newline): the file is truncated")
        try:
            event = json.loads(line)
            yield validate_event(event)
        except (json.JSONDecodeError, EventError) as err:
            if not strict and is_last:
                return
            raise EventError(f"{path}:{number}: {err}") from None


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a final events file and check its structure: run_start first, run_end last."""
    events = list(iter_lines(path, strict=True))
    if not events:
        raise EventError(f"{path}:1: events file is empty")
    if events[0]["event"] != "run_start":
        raise EventError(f"{path}:1: first event is {events[0]['event']!r}, expected run_start")
    if events[-1]["event"] != "run_end":
        raise EventError(f"{path}:{len(events)}: last event is {events[-1]['event']!r}, expected run_end")
    return events


class PartWriter:
    """A rank's own stream of events, flushed line by line.

    Each rank appends to its own part file, so no locking is needed and a rank that dies
    leaves every completed iteration on disk for the launcher to report.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle: IO[str] = open(self.path, "a", encoding="utf-8", buffering=1)

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"event": kind, **fields}
        event.setdefault("time", time.time())
        self._handle.write(dumps(event) + "\n")
        return event

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
