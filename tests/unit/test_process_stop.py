"""dlscale.base.process on real, short-lived process groups that this test starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from dlscale.base.process import stop_group, stop_groups

#: A group leader that ignores SIGTERM and has a child of its own (which ignores it too,
#: having inherited the disposition); it prints the child's PID, then waits for it.
STUBBORN = (
    "import signal, subprocess, sys\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen(['sleep', '60'])\n"
    "print(child.pid, flush=True)\n"
    "child.wait()\n"
)


def start_stubborn() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    child_pid = int(proc.stdout.readline())
    return proc, child_pid


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (reaped, or a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace_period() -> None:
    proc, child_pid = start_stubborn()
    try:
        stop_group(proc, grace_s=0.5)
        assert proc.returncode == -signal.SIGKILL  # SIGTERM ignored: the escalation ended it
        for _ in range(100):  # the grandchild is killed with its group; init reaps it
            if gone(child_pid):
                break
            time.sleep(0.05)
        assert gone(child_pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_group_that_obeys_sigterm_ends_by_it() -> None:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        stop_groups([proc], grace_s=30.0)
        assert proc.returncode == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_processes_that_already_ended_are_left_alone() -> None:
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait()
    stop_groups([proc], grace_s=0.1)  # no ProcessLookupError, nothing signalled
    assert proc.returncode == 0
