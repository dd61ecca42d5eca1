"""What tests do to a running job's ranks (SLURM jobs and runs the runner tests launch):
find a rank's process once it trains, and kill it."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def rank_pid_when_running(
    run_dir: Path, rank: int, min_iterations: int, timeout: float, poll_s: float = 0.02
) -> int:
    """The PID of one rank of a running job (its part file's rank_start names it) once the
    rank has done ``min_iterations`` iterations."""
    part = run_dir / ".work" / f"rank{rank}.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if part.exists():
            lines = part.read_text().splitlines()
            if sum('"event":"iteration"' in line for line in lines) >= min_iterations:
                return json.loads(lines[0])["pid"]
        time.sleep(poll_s)
    raise TimeoutError(f"rank {rank} of {run_dir} never ran {min_iterations} iterations")


def kill_rank_when_running(
    run_dir: Path, rank: int, min_iterations: int, timeout: float, poll_s: float = 0.02
) -> int:
    """SIGKILL one rank of a running job once it has done some iterations; its PID."""
    pid = rank_pid_when_running(run_dir, rank, min_iterations, timeout, poll_s)
    os.kill(pid, signal.SIGKILL)
    return pid
