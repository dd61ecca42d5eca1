"""Small host utilities shared by the launcher, the ranks and the benchmarks: a free port,
the git sha, dying with the parent process.

They sit on the ground floor (stdlib only) so that ``benchmarks/``, a rank's agent and the
namespace helpers can use them without importing the launcher.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
from pathlib import Path

#: prctl's option that signals a child when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child, before exec: get SIGTERM when the parent dies, however it dies.

    The ranks run in their own sessions (so that stopping them reaches their whole process
    group); without this, a launcher killed with SIGKILL (snakemake killed hard) would
    leave them training as orphans.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    """A TCP port free on loopback right now (the OS picks it, so concurrent runs differ)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def git_sha(repo: Path) -> str:
    """The commit ``repo`` is at, ``-dirty`` when tracked files differ from it, ``unknown``
    when there is no git or no repository (a run records where its code came from)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        sha = out.stdout.strip()
        if out.returncode != 0 or not sha:
            return "unknown"
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
