"""SIGTERM reaches a rank that is blocked in native code (dlscale.runners.common).

A rank waiting in its framework's C++ (a collective whose peer has already ended) runs no
Python, so its SIGTERM handler cannot act; the rank's watchdog writes its end and exits it
instead of leaving it to the launcher's SIGKILL, 10 s later and with its end lost. A rank in
Python ends through its own handler, which the watchdog leaves alone. Real processes, a fake
runner: blocked in native code is a default pthread mutex locked twice by one thread (POSIX
never interrupts that wait).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.faults import fault_spec

RUNNER = """
import ctypes, sys, time
from dlscale.runners import common

def versions():
    return {}

def peers(ctx):
    return []

def train(ctx):
    print("TRAINING", flush=True)
    if sys.argv[1] == "native":
        libc = ctypes.CDLL(None)
        mutex = ctypes.create_string_buffer(64)  # zeroes: PTHREAD_MUTEX_INITIALIZER (glibc)
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # blocks for ever, the GIL released
    while True:
        time.sleep(0.05)

sys.exit(common.main(sys.modules[__name__], sys.argv[2:]))
"""


def end_of(part: Path) -> dict:
    return json.loads(part.read_text().splitlines()[-1])


@pytest.mark.parametrize("where", ["native", "python"])
def test_sigterm_ends_a_rank_wherever_it_is_blocked(tmp_path: Path, where: str) -> None:
    script = tmp_path / "fake_runner.py"
    script.write_text(RUNNER)
    work = tmp_path / "work"
    spec = fault_spec("torch", nodes=1).to_json()
    args = [str(script), where, "--spec-json", spec, "--data", str(tmp_path), "--work-dir", str(work)]
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "TRAINING", proc.stderr.read()
        time.sleep(0.3)  # well inside train's blocking call
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=20)  # the launcher's SIGKILL would come after 10 s
    finally:
        proc.kill()
    end = end_of(work / "rank0.jsonl")
    assert returncode == 1
    assert end["event"] == "rank_end" and end["status"] == "failed"
    assert end["reason"].startswith("terminated by SIGTERM (time limit or cancellation) at iteration 0")
    assert ("ended by its watchdog" in end["reason"]) == (where == "native"), end["reason"]
    # One end, whoever wrote it.
    assert sum('"rank_end"' in line for line in (work / "rank0.jsonl").read_text().splitlines()) == 1
