"""Stop process groups we started: a signal, a grace period, then SIGKILL.

Every child the house starts runs in a session of its own (``start_new_session=True``), so
its process group id is its PID and one ``killpg`` reaches its whole tree (mpirun's ranks,
Spark's JVMs). A child that ignores the polite signal is killed after the grace period, so
a stop always returns with nothing of ours left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from typing import Any


def stop_groups(procs: Iterable[subprocess.Popen[Any]], grace_s: float, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to the process group of each of ``procs`` still running, wait up to
    ``grace_s`` seconds (for all of them together), then SIGKILL the groups of those left."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, sig)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def stop_group(proc: subprocess.Popen[Any], grace_s: float, sig: int = signal.SIGTERM) -> None:
    """:func:`stop_groups` for one process."""
    stop_groups([proc], grace_s, sig)


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass  # the group has already gone
