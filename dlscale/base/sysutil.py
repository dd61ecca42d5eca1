"""Small host utilities shared by the launcher, the ranks and the benchmarks: a free port,
the git sha, dying with the parent process.

They sit on the ground floor (stdlib only) so that ``benchmarks/``, a rank's agent and the
namespace helpers can use them without importing the launcher.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import random
import signal
import socket
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

#: prctl's option that signals a child when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: prctl's option that makes a process the reaper of its orphaned descendants (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36


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


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (``PR_SET_CHILD_SUBREAPER``); False where
    the kernel refuses it.

    A daemon a job detaches (a study's Spark supervisor and the JVMs under it) is
    reparented to init when its parent exits, and its CPU time is then nobody's child
    time. Adopted and reaped by this process (``reap_adopted``), it lands in this
    process's ``RUSAGE_CHILDREN``: everything the command started is accounted for.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_adopted(grace_s: float, poll_s: float = 0.1) -> list[int]:
    """Reap every child of this process that has ended, waiting up to ``grace_s`` for the
    live ones (adopted daemons that stop on their own, such as a supervisor that notices
    its owner is gone); the PIDs still running after it, left as they are.

    Call it only when no ``subprocess`` of this process is running: it reaps any child.
    """
    deadline = time.monotonic() + grace_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []  # no child left
        if pid:
            continue
        if time.monotonic() >= deadline:
            return sorted(children_of(os.getpid()))
        time.sleep(poll_s)


def children_of(parent: int, proc: Path = Path("/proc")) -> set[int]:
    """The PIDs whose parent is ``parent`` now (from ``/proc/<pid>/stat``)."""
    found = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
            found.add(int(entry.name))
    return found


#: Where chosen ports start: torch's default rendezvous port, below Linux's default
#: ephemeral range (32768-60999).
PORTS_FROM = 29500
#: The kernel's ephemeral range, and the one assumed where /proc does not say it.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 32768


def ephemeral_low(path: Path = EPHEMERAL_RANGE_FILE) -> int:
    """The first port of the kernel's ephemeral range (where ``bind(0)`` and ``connect`` draw)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


#: Where a probe binds: every address, so that a port any socket of this network namespace
#: holds, on whichever address, fails it (the ranks' stores and servers bind every address).
PROBE_ADDRESS = "0.0.0.0"


#: Where the processes of one host note the ports they handed out: a lock file per port,
#: held (``flock``) by the process that drew it. Two launchers probing at the same moment can
#: both find a port free; only one of them gets its lock. A fixed path, not ``TMPDIR``, which
#: a batch system may set per job. Sticky and open to all, as /tmp is: every user's launchers
#: meet there.
PORT_LOCKS_DIR = Path("/tmp/dlscale-ports")
#: How long a process keeps a port it drew reserved. The ranks bind it within seconds of
#: the draw (a launcher lives the whole run, and its exit lets go of every lock); a process
#: that lives on and draws again (a benchmark, a test session) lets go of older ones.
PORT_HOLD_S = 600.0
#: The ports this process holds: port -> (the lock file's descriptor, when it was taken).
_held: dict[int, tuple[int, float]] = {}


def _let_go(older_than_s: float) -> None:
    now = time.monotonic()
    for port, (fd, taken) in list(_held.items()):
        if now - taken >= older_than_s:
            os.close(fd)  # closing the descriptor releases its flock
            del _held[port]


def _lock_dir() -> Path | None:
    """``PORT_LOCKS_DIR``, made sticky and open to all where this process creates it; None
    where it cannot be used (then the probe alone decides, as before the locks)."""
    try:
        PORT_LOCKS_DIR.mkdir(mode=0o1777)
        os.chmod(PORT_LOCKS_DIR, 0o1777)  # mkdir's mode passes through the umask
    except FileExistsError:
        pass
    except OSError:
        return None
    return PORT_LOCKS_DIR if PORT_LOCKS_DIR.is_dir() and not PORT_LOCKS_DIR.is_symlink() else None


def reserve_port(port: int) -> bool:
    """Take ``port``'s lock on this host for this process: False when another process (or
    this one, within ``PORT_HOLD_S``) holds it. Where no lock can be made (the folder is
    not usable, a lock file is not ours to open), True: the probe alone decides."""
    _let_go(PORT_HOLD_S)
    if port in _held:
        return False
    folder = _lock_dir()
    if folder is None:
        return True
    try:
        # Read-only is enough for flock, so a file another user created serves every user;
        # O_NOFOLLOW: a link planted in the shared folder is not followed.
        fd = os.open(folder / f"{port}.lock", os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held[port] = (fd, time.monotonic())
    return True


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct TCP ports free now, below the ephemeral range, reserved on this
    host for this process (``reserve_port``).

    A port the OS picks (``bind`` to 0) comes from the ephemeral range, the pool the kernel
    also draws from for every outgoing connection and every "any port" listener, srun's and
    slurmstepd's among them: between the probe's close and the rank's bind such a socket can
    take it, and the run fails with EADDRINUSE (docs/ports.md). Below the range only an
    explicit bind takes a port, so the ports are drawn at random from ``PORTS_FROM`` up to
    it; a port in use fails its probe, and one another launcher of this host drew and has
    not let go of fails its lock. All probes stay open until all are found, and none
    listens. Where that range is too small, the OS picks.
    """
    candidates = list(range(PORTS_FROM, ephemeral_low()))
    random.SystemRandom().shuffle(candidates)
    with ExitStack() as stack:
        ports: list[int] = []
        for port in [*candidates, *[0] * count]:
            if len(ports) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((PROBE_ADDRESS, port))
            except OSError:
                sock.close()
                continue
            if port and not reserve_port(port):
                sock.close()
                continue
            stack.enter_context(sock)
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port() -> int:
    """One port as ``free_ports`` chooses them."""
    return free_ports(1)[0]


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
