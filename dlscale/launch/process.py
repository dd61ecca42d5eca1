"""Process control for the launcher: spawn a rank, relay its stderr, stop ranks by PID.

The ranks run in sessions of their own, so that stopping one reaches its whole process
group (mpirun's children, Spark's JVMs); each is told to die with the launcher, so that a
launcher killed hard leaves no orphan training (``sysutil.die_with_parent``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO

from dlscale.base.process import stop_groups
from dlscale.base.sysutil import die_with_parent

#: After SIGTERM, how long the ranks get to end before SIGKILL.
GRACE_S = 10.0


def child_setup(join: Callable[[], None] | None) -> Callable[[], None]:
    """What a rank runs between fork and exec: die with the launcher, join its node's namespace."""

    def setup() -> None:
        die_with_parent()
        if join:
            join()

    return setup


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    join: Callable[[], None] | None = None,
    pipe_stderr: bool = False,
) -> subprocess.Popen[bytes]:
    """Start one process of a run in a session of its own (``join``: enter its node's
    network first); ``pipe_stderr`` for one whose stderr the launcher reads (srun's)."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        start_new_session=True,
        preexec_fn=child_setup(join),
        stderr=subprocess.PIPE if pipe_stderr else None,
    )


def relay_stderr(stream: IO[bytes], name: str, on_line: Callable[[str], None]) -> threading.Thread:
    """Copy a child's stderr into ours (the run's log) line by line on a thread, showing
    each line to ``on_line`` as it goes (srun's first report of a failed task)."""

    def relay() -> None:
        for raw in stream:
            line = raw.decode("utf-8", errors="replace")
            sys.stderr.write(line)
            sys.stderr.flush()
            on_line(line)

    thread = threading.Thread(target=relay, name=name, daemon=True)
    thread.start()
    return thread


def stop(
    procs: Iterable[subprocess.Popen[bytes]], sig: int = signal.SIGTERM, grace_s: float = GRACE_S
) -> None:
    """Stop the processes we started, by PID (their process groups): ``sig``, a grace
    period, then SIGKILL for whatever is left."""
    stop_groups(procs, grace_s, sig)
