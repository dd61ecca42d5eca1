"""The event schema shared by every runner, parser and the analysis.

A run's events live in one JSON Lines file (``events.jsonl``), one object a line:
``run_start``, then ``iteration`` events (one per rank and iteration) and ``eval`` events
(rank 0's held-out quality, between iterations), then ``run_end``.
The file is written atomically (temporary file + rename), so a reader never sees half a
run: a file that exists is a whole record, ok or failed. Ranks stream their own events
into part files while they train (so that a crash still leaves evidence of where it
happened); the launcher merges them into the final file.

``EVENT_SCHEMAS`` is the contract as JSON Schema (draft 2020-12, plain data: this module
stays standard-library only, since runners import it from framework venvs that may lack
``jsonschema``). ``validate_event`` is its fast check for the runner-facing writer and the
readers: it holds an iteration event to exactly what the schema says (tests check the two
agree), and a run_start / run_end to its required fields; ``dlscale.analysis.aggregate`` validates
run_start and run_end against the full schema with ``jsonschema`` (``SCHEMA_KEYWORDS``
says what the two extra keywords mean), then checks every event against its run.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from dlscale.base import atomic, foreign
from dlscale.runspec import LR_RULE_NAMES

EVENT_TYPES = ("run_start", "iteration", "eval", "run_end")

#: Held-out quality metrics an eval event may carry (dlscale.quality holds their rules).
EVAL_METRICS = ("top1", "top5", "mse")

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
    "eval": ("rank", "iteration", "split", "metric", "value", "samples", "eval_s", "train_s", "time"),
    "run_end": ("status", "reason", "time"),
}

STATUSES = ("ok", "failed")

#: Where a rank's start-up went, in seconds, on its first iteration event (optional: a
#: runner records the parts it measures; dlscale.analysis.wallsplit maps each to a column,
#: docs/wall-time.md says what each covers per framework).
STARTUP_SECONDS = (
    "import_s",  # the framework imported (dlscale.runners.common.main, every rank runner)
    "rendezvous_s",  # the ranks met: process group, MPI_Init, weight broadcast
    "data_setup_s",  # the rank's training part and held-out share read and converted
    "model_setup_s",  # the model built, initialised, compiled
    "setup_s",  # TensorFlow: connection, tracing, initial broadcast (before 2026-12-05: with its import)
    "spark_cluster_s",  # BigDL: the Spark standalone master and workers started
    "spark_context_s",  # BigDL: the SparkContext and its executors registered
    "input_load_s",  # BigDL: the training RDD read, checked, converted and cached (the driver's log)
)

#: Keywords of ``EVENT_SCHEMAS`` beyond JSON Schema's own (a validator must implement them):
#: ``finite``: a number, when the value is one, is neither NaN nor infinite (Python's json
#: reads the literals ``NaN`` and ``Infinity``, which no JSON writer should produce). And
#: ``integer`` means a JSON integer literal: ``2.0`` is not one (JSON Schema's draft 2020-12
#: would accept it), nor is ``true``.
SCHEMA_KEYWORDS = ("finite",)

_FINITE_NUMBER = {"type": "number", "finite": True}
_SECONDS = {"type": "number", "minimum": 0, "finite": True}
_OPTIONAL_SECONDS = {"type": ["number", "null"], "minimum": 0, "finite": True}
_CONTENTION = {
    "type": ["object", "null"],
    "properties": {
        "other_busy_share": {"type": ["number", "null"]},
        "steal_share": {"type": ["number", "null"]},
        "contended": {"type": ["boolean", "null"]},
    },
}
_LOADAVG = {"type": ["array", "null"], "items": {"type": "number"}}

#: The events contract (docs/DESIGN "Events") as JSON Schema, one per event type. Fields
#: beyond these are allowed in iteration, eval and run_end events (frameworks add their own
#: measures; each line is bounded by ``MAX_LINE_CHARS``), but not in run_start, which only the
#: launcher writes; the ones named here must have these types. What one event cannot say
#: (a rank below the world size, samples equal to the run's batch, a run id that matches its
#: fields and its folder) is checked against the run by ``dlscale.analysis.aggregate``.
EVENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "run_start": {
        "type": "object",
        "required": list(REQUIRED_FIELDS["run_start"]),
        # One run_start a run, written by the launcher alone (dlscale.launch.records): a field
        # it does not write is an error naming FILE:LINE, not a blob carried into the tables.
        "additionalProperties": False,
        "properties": {
            "event": {"const": "run_start"},
            "run_id": {"type": "string"},
            "framework": {"type": "string"},
            "model": {"type": "string"},
            "nodes": {"type": "integer", "minimum": 1},
            "ranks_per_node": {"type": "integer", "minimum": 1},
            "batch": {"type": "integer", "minimum": 1},
            "repeat": {"type": "integer", "minimum": 0},
            "world_size": {"type": "integer", "minimum": 1},
            "global_batch": {"type": ["integer", "null"], "minimum": 1},
            "dataset": {"type": ["string", "null"]},
            "scaling": {"enum": ["weak", "strong", None]},
            "network": {"type": ["string", "null"]},
            "hosts": {"type": "array", "items": {"type": ["string", "null"]}},
            "threads_per_rank": {"type": "integer", "minimum": 1},
            "versions": {"type": "object"},
            "config_sha256": {"type": "string"},
            "git_sha": {"type": "string"},
            "launcher": {"type": "string"},
            "network_setup": {"type": "object"},
            "loadavg": _LOADAVG,
            "startup_s": {"type": ["number", "null"], "finite": True},
            "contention": _CONTENTION,
            "spec": {
                "type": "object",
                "properties": {
                    "run_id": {"type": "string"},
                    "iterations": {"type": "integer", "minimum": 0},
                    "warmup": {"type": "integer", "minimum": 0},
                },
            },
            # The learning rate the run trained at (RunSpec.lr_record): the rule, its base rate
            # and batch, the warm-up ramp, the rate at the run's global batch.
            "learning_rate": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "lr_rule": {"enum": list(LR_RULE_NAMES)},
                    "lr_base_rate": {"type": "number", "minimum": 0, "finite": True},
                    "lr_base_batch": {"type": "integer", "minimum": 1},
                    "lr_warmup_iterations": {"type": "integer", "minimum": 0},
                    "lr_rate": {"type": "number", "minimum": 0, "finite": True},
                },
            },
            # The run's CPU settings (dlscale.launch.run_settings): engine, BLAS, thread
            # pools and variables; absent in runs recorded before it existed.
            "settings": {
                "type": "object",
                "properties": {"env": {"type": "object", "additionalProperties": {"type": "string"}}},
            },
            # What rank 0 measured about its own set-up while it ran (RunContext.record_measured):
            # Caffe's ``blas``, the BLAS library it really loaded (/proc/self/maps after its
            # first step; dlscale.runners.caffe.blas.loaded). Absent where nothing was measured.
            "measured": {"type": "object"},
            # The venv the run ran in and Caffe's build (dlscale.launch.records.environment_record).
            "env": {"type": "object"},
            "caffe_build_key": {"type": "string"},
            "time": _FINITE_NUMBER,
        },
    },
    "iteration": {
        "type": "object",
        "required": list(REQUIRED_FIELDS["iteration"]),
        "properties": {
            "event": {"const": "iteration"},
            "rank": {"type": "integer", "minimum": 0},
            "iteration": {"type": "integer", "minimum": 0},
            "samples": {"type": "integer", "minimum": 0},
            "step_s": _SECONDS,
            "compute_s": _OPTIONAL_SECONDS,
            "comm_s": _OPTIONAL_SECONDS,
            "input_s": _OPTIONAL_SECONDS,
            **dict.fromkeys(STARTUP_SECONDS, _OPTIONAL_SECONDS),
            # NaN/inf losses are written as null (``dumps``): a diverged run's loss is null.
            "loss": {"type": ["number", "null"]},
            "warmup": {"type": "boolean"},
            # null where a native log line carries no timestamp (dlscale.parse.bigdl)
            "time": {"type": ["number", "null"], "finite": True},
        },
    },
    # Held-out quality after ``iteration`` training iterations (warm-up included), measured
    # outside every timed step: ``eval_s`` is the evaluation's own wall time, ``train_s`` the
    # timed training seconds so far (warm-up excluded), the clock of time to target.
    "eval": {
        "type": "object",
        "required": list(REQUIRED_FIELDS["eval"]),
        "properties": {
            "event": {"const": "eval"},
            "rank": {"type": "integer", "minimum": 0},
            "iteration": {"type": "integer", "minimum": 0},
            "split": {"enum": ["test"]},
            "metric": {"enum": list(EVAL_METRICS)},
            "value": {"type": "number", "minimum": 0, "finite": True},
            "samples": {"type": "integer", "minimum": 1},
            "eval_s": _SECONDS,
            "train_s": _SECONDS,
            "time": _FINITE_NUMBER,
        },
    },
    "run_end": {
        "type": "object",
        "required": list(REQUIRED_FIELDS["run_end"]),
        "properties": {
            "event": {"const": "run_end"},
            "status": {"enum": list(STATUSES)},
            "reason": {"type": ["string", "null"]},
            "wall_s": {"type": ["number", "null"], "finite": True},
            "warnings": {"type": "array", "items": {"type": "string"}},
            "loadavg": _LOADAVG,
            "contention": _CONTENTION,
            "time": _FINITE_NUMBER,
        },
    },
}


class EventError(ValueError):
    """An events file or event that does not follow the schema.

    The message starts with ``FILE:LINE:`` where known, so that a person can open the
    offending line directly.
    """


class RefusedEvents(EventError):
    """An events file refused as hostile input rather than as a broken run: not a regular
    file (a FIFO, a link, a folder, a device), or a line nested deeper than
    ``dlscale.base.foreign.MAX_JSON_DEPTH``. verify refuses a study holding one (exit 2)."""


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
        for key in ("step_s", "compute_s", "comm_s", "input_s", *STARTUP_SECONDS):
            if key not in event:
                continue  # input_s and the start-up parts are optional
            value = event[key]
            if value is None and key != "step_s":
                continue
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise EventError(f"iteration event: {key}={value!r} is not a finite number >= 0")
        loss = event["loss"]
        if loss is not None and not _is_number(loss):
            raise EventError(f"iteration event: loss={loss!r} is not a number")
        when = event["time"]  # null where a native log line carries no timestamp (parsers)
        if when is not None and (not _is_number(when) or not math.isfinite(when)):
            raise EventError(f"iteration event: time={when!r} is not a finite number or null")
        if "warmup" in event and not isinstance(event["warmup"], bool):
            raise EventError(f"iteration event: warmup={event['warmup']!r} is not true or false")
    elif kind == "eval":
        for key in ("rank", "iteration", "samples"):
            if not isinstance(event[key], int) or isinstance(event[key], bool) or event[key] < 0:
                raise EventError(f"eval event: {key}={event[key]!r} is not an integer >= 0")
        if event["metric"] not in EVAL_METRICS:
            raise EventError(
                f"eval event: metric={event['metric']!r} is not one of {', '.join(EVAL_METRICS)}"
            )
        for key in ("value", "eval_s", "train_s"):
            value = event[key]
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise EventError(f"eval event: {key}={value!r} is not a finite number >= 0")
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


#: The longest line an events file may have, in characters (its newline included). The
#: longest a real run writes is its run_start (hosts, versions, settings, spec, the venv's
#: record: a few kB, tens of kB for a thousand ranks); a longer line is an error naming
#: ``FILE:LINE``, found before the line is parsed, so that one hostile line cannot take the
#: reader's memory (docs/memory.md).
MAX_LINE_CHARS = 1 << 20


def _numbered_lines(path: str | os.PathLike[str], handle: IO[str]) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for each line of ``handle``, one at a time; a line longer
    than ``MAX_LINE_CHARS`` is cut there (the caller refuses it: ``_too_long``), and text that
    is not UTF-8 is an EventError naming the line."""
    number = 0
    while True:
        number += 1
        try:
            line = handle.readline(MAX_LINE_CHARS + 1)
        except UnicodeDecodeError as err:
            # The decoder reads ahead, so the bad bytes are on this line or a few kB after it.
            raise EventError(
                f"{path}:{number}: not UTF-8 text, here or in the next lines ({err.reason})"
            ) from None
        if not line:
            return
        yield number, line
        if len(line) > MAX_LINE_CHARS:
            return  # the rest of that line is not a line of its own


def _too_long(line: str) -> bool:
    return len(line) > MAX_LINE_CHARS


def iter_numbered(
    path: str | os.PathLike[str], *, strict: bool = True
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, event)`` for each event of a JSON Lines file, validated.

    The file is read one line at a time (never whole: a long run's file is hundreds of MB).
    With ``strict`` a malformed line raises EventError naming ``FILE:LINE``. Without it, a
    last line cut in the middle (a rank killed while writing its part file) is skipped;
    that is only for part files, which are evidence, never for final events files. A line
    longer than ``MAX_LINE_CHARS`` is an error in either mode.
    """
    try:
        opened = foreign.open_text(path, None, str(path))
    except foreign.Refused as err:
        raise RefusedEvents(str(err)) from None
    with opened as handle:
        lines = _numbered_lines(path, handle)
        pending = next(lines, None)
        while pending is not None:
            number, line = pending
            pending = next(lines, None)
            if _too_long(line):
                raise EventError(
                    f"{path}:{number}: line is longer than {MAX_LINE_CHARS} characters"
                    " (dlscale.events.MAX_LINE_CHARS): no run writes one"
                )
            if not line.strip():
                continue
            is_last = pending is None
            if not line.endswith("\n") and strict:
                raise EventError(f"{path}:{number}: line is cut off (no newline): the file is truncated")
            try:
                event = json.loads(line)
            except RecursionError:  # the decoder's own bound (about 1,000 levels)
                event = None
            except ValueError as err:  # JSONDecodeError, an integer of 4,300+ digits
                if not strict and is_last:
                    return
                raise EventError(f"{path}:{number}: {err}") from None
            # An iteration event (nearly every line) keeps only its numbers (readevents); any
            # other event is kept whole and read by recursive code (jsonschema, the tables),
            # so its nesting is bounded (one count per line, a regex pass a level past it).
            if event is None or (
                not (isinstance(event, dict) and event.get("event") == "iteration")
                and foreign.json_depth_exceeds(line)
            ):
                raise RefusedEvents(
                    f"{path}:{number}: JSON nested deeper than {foreign.MAX_JSON_DEPTH} levels"
                    " (dlscale.base.foreign.MAX_JSON_DEPTH): no run writes that"
                )
            try:
                yield number, validate_event(event)
            except EventError as err:
                if not strict and is_last:
                    return
                raise EventError(f"{path}:{number}: {err}") from None


def iter_lines(path: str | os.PathLike[str], *, strict: bool = True) -> Iterator[dict[str, Any]]:
    """Yield the events of a JSON Lines file, validated (``iter_numbered`` without numbers)."""
    for _, event in iter_numbered(path, strict=strict):
        yield event


def read_numbered(path: str | os.PathLike[str]) -> list[tuple[int, dict[str, Any]]]:
    """Read a final events file as ``(line number, event)`` pairs and check its structure:
    run_start first, run_end last (errors name the line). The whole file is in memory: the
    aggregation streams it instead (``scan``)."""
    numbered = list(iter_numbered(path, strict=True))
    check_ends(path, numbered[:1], numbered[-1:])
    return numbered


def check_ends(
    path: str | os.PathLike[str],
    first: list[tuple[int, dict[str, Any]]],
    last: list[tuple[int, dict[str, Any]]],
) -> None:
    """A final events file's structure from its first and last ``(line, event)`` (empty
    lists for an empty file): run_start first, run_end last."""
    if not first:
        raise EventError(f"{path}:1: events file is empty")
    first_line, start = first[0]
    if start["event"] != "run_start":
        raise EventError(f"{path}:{first_line}: first event is {start['event']!r}, expected run_start")
    last_line, end = last[0]
    if end["event"] != "run_end":
        raise EventError(f"{path}:{last_line}: last event is {end['event']!r}, expected run_end")


def scan(
    path: str | os.PathLike[str],
) -> Iterator[tuple[int, dict[str, Any], bool]]:
    """A final events file one event at a time, in bounded memory: yields ``(line, event,
    is_last)`` with each event validated, then checks the file's structure (``check_ends``)
    once the last has been yielded. A consumer that keeps only what it needs of each
    event (``dlscale.analysis.readevents``) reads a file of any length in the memory of that."""
    events = iter_numbered(path, strict=True)
    first = next(events, None)
    pending = first
    while pending is not None:
        following = next(events, None)
        yield pending[0], pending[1], following is None
        if following is None:
            break
        pending = following
    check_ends(path, [first] if first else [], [pending] if pending else [])


def check_file(path: str | os.PathLike[str]) -> None:
    """Check a final events file as ``read_numbered`` does, keeping none of it in memory."""
    for _ in scan(path):
        pass


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a final events file and check its structure: run_start first, run_end last."""
    return [event for _, event in read_numbered(path)]


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
