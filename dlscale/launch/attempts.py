"""Attempt bookkeeping: what a failed or redone attempt leaves under the run's ``attempts/``.

A failed run's events are copied to ``attempts/failed-<time>.jsonl`` and a contended
attempt that is redone to ``attempts/contended-<time>.jsonl``; beside each, a folder of the
same name keeps what explains it (its part of run.log, the work dir's logs and part
files), which its run_end names. The training rule counts the failed attempts (its
``failed_attempts`` parameter), so a recorded failure makes the next invocation redo
exactly that run. Nothing of a failure is lost.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from dlscale.events import EventError, write_atomic

log = logging.getLogger(__name__)

#: Files of an attempt's work dir kept with it: every log (the BigDL driver's, Spark's
#: master, workers and executors, glog's files of Caffe's ranks) and the ranks' own part
#: files (what each rank recorded, before the merge). Not the scratch (jars, shards' copies).
KEPT_PATTERNS = ("*.log", "*.log.*", "rank*.jsonl")


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def attempt_id(run_dir: Path, kind: str) -> str:
    """``<kind>-<UTC time>`` (``failed``, ``contended``), unique in the run's ``attempts/``."""
    base = f"{kind}-{_stamp()}"
    name, n = base, 1
    while (run_dir / "attempts" / f"{name}.jsonl").exists() or (run_dir / "attempts" / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def point_to_logs(run_end: dict[str, Any], attempt: str) -> dict[str, Any]:
    """The attempt's run_end, naming the folder that keeps its logs (its reason too, if failed)."""
    folder = f"attempts/{attempt}/"
    marked = {**run_end, "attempt_logs": folder}
    if run_end["status"] != "ok":
        marked["reason"] = f"{run_end['reason'] or 'failed'} (logs: {folder})"
    return marked


def log_size(path: Path | None) -> int:
    """Where this attempt's part of the run's log starts (0: no log yet)."""
    try:
        return path.stat().st_size if path else 0
    except OSError:
        return 0


def keep_attempt_logs(
    run_dir: Path, attempt: str, work_dir: Path, run_log: Path | None, log_from: int
) -> list[str]:
    """Copy what explains an attempt into ``attempts/<attempt>/`` before the next attempt or
    a rerun replaces it: the part of ``run.log`` this attempt wrote (the launcher's and the
    ranks' output: mpirun's, TensorFlow's, Spark's driver), every log and part file of its
    work dir (``KEPT_PATTERNS``, at their paths there), and the run folder's
    ``bigdl-driver.log``. Returns the paths kept; a file that cannot be copied is named on
    stderr, never a crash (the attempt is recorded either way)."""
    target = run_dir / "attempts" / attempt
    kept: list[str] = []

    def copy(source: Path, name: str, offset: int = 0) -> None:
        try:
            dest = target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(source, "rb") as src, open(dest, "wb") as out:
                src.seek(offset)
                shutil.copyfileobj(src, out)
            kept.append(name)
        except OSError as err:
            log.warning("warning: %s not kept with attempt %s: %s", source, attempt, err)

    # What this process has written so far belongs to this attempt's part of run.log.
    sys.stdout.flush()
    sys.stderr.flush()
    if run_log is not None and run_log.is_file():
        copy(run_log, "run.log", log_from if run_log.stat().st_size >= log_from else 0)
    for name in ("bigdl-driver.log",):
        if (run_dir / name).is_file():
            copy(run_dir / name, name)
    if work_dir.is_dir():
        found = {p for pattern in KEPT_PATTERNS for p in work_dir.rglob(pattern)}
        for path in sorted(found):
            if path.is_file() and not path.is_symlink():
                copy(path, str(Path("work") / path.relative_to(work_dir)))
    return kept


def keep_redone(
    run_dir: Path, events: list[dict[str, Any]], work_dir: Path, run_log: Path | None, log_from: int
) -> str:
    """Keep a contended attempt that is about to be redone: its events (run_end naming its
    logs) in ``attempts/contended-<time>.jsonl`` and its logs beside them. Returns its id."""
    redone = attempt_id(run_dir, "contended")
    marked = [*events[:-1], point_to_logs(events[-1], redone)]
    write_atomic(run_dir / "attempts" / f"{redone}.jsonl", marked)
    keep_attempt_logs(run_dir, redone, work_dir, run_log, log_from)
    return redone


def record(events_path: Path, events: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """Write the run's events atomically; a failed run also as ``attempts/failed-<time>.jsonl``.

    A rank that wrote an event breaking the contract fails the run with that reason (its
    iterations are not evidence of anything), never a crash. Returns the run_end recorded
    and the failed attempt's id (None: the run is ok). An OSError leaves nothing
    half-written (atomic writes) and is the caller's to report.
    """
    run_dir = events_path.parent
    run_end = events[-1]
    try:
        write_atomic(events_path, events)  # validates every event first
    except EventError as err:
        run_end = {**run_end, "status": "failed", "reason": f"a rank wrote an invalid event: {err}"}
        events = [events[0], run_end]
    if run_end["status"] == "ok":
        return run_end, None
    failed = attempt_id(run_dir, "failed")
    run_end = point_to_logs(run_end, failed)
    events = [*events[:-1], run_end]
    write_atomic(events_path, events)
    write_atomic(run_dir / "attempts" / f"{failed}.jsonl", events)
    return run_end, failed
