"""Small host utilities shared by the launcher, the ranks and the benchmarks: a free port
(reserved in the network namespace), the git sha, dying with the parent process, adopting
orphaned descendants.

They sit on the ground floor (stdlib only) so that ``benchmarks/``, a rank's agent and the
namespace helpers can use them without importing the launcher.
"""

from __future__ import annotations

import ctypes
import errno
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
    time. Adopted and reaped by this process (``dlscale.host.contention.reap_adopted``),
    it lands in this process's ``RUSAGE_CHILDREN``: everything the command started is
    accounted for.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


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


#: The name under which a process of this network namespace holds a port it drew: an
#: abstract Unix socket (Linux), bound and never listened on. Two launchers of one
#: namespace probing at the same moment can both find a port free; only one of them can
#: bind its name. Abstract names live in the network namespace, as TCP ports do, leave no
#: file behind, and go when their process does, however it ends.
PORT_NAME = "\0dlscale-port-{port}"
#: How long a process keeps a port it drew reserved. The ranks bind it within seconds of
#: the draw (a launcher lives the whole run, and its exit lets go of every name); a process
#: that lives on and draws again (a benchmark, a test session) lets go of older ones.
PORT_HOLD_S = 600.0
#: The ports this process holds: port -> (the socket holding its name, when it was taken).
_held: dict[int, tuple[socket.socket, float]] = {}


def _let_go(older_than_s: float) -> None:
    now = time.monotonic()
    for port, (holder, taken) in list(_held.items()):
        if now - taken >= older_than_s:
            holder.close()
            del _held[port]


def reserve_port(port: int) -> bool:
    """Hold ``port``'s name in this network namespace for this process: False when another
    process (or this one, within ``PORT_HOLD_S``) holds it. Where no such name can be made
    (no abstract Unix sockets), True: the probe alone decides."""
    _let_go(PORT_HOLD_S)
    if port in _held:
        return False
    try:
        holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except (AttributeError, OSError):
        return True
    try:
        holder.bind(PORT_NAME.format(port=port))
    except OSError as err:
        holder.close()
        return err.errno != errno.EADDRINUSE
    _held[port] = (holder, time.monotonic())
    return True


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct TCP ports free now, below the ephemeral range, reserved in this
    network namespace for this process (``reserve_port``).

    A port the OS picks (``bind`` to 0) comes from the ephemeral range, the pool the kernel
    also draws from for every outgoing connection and every "any port" listener, srun's and
    slurmstepd's among them: between the probe's close and the rank's bind such a socket can
    take it, and the run fails with EADDRINUSE (docs/ports.md). Below the range only an
    explicit bind takes a port, so the ports are drawn at random from ``PORTS_FROM`` up to
    it; a port in use fails its probe, and one another launcher of this network namespace
    drew and has not let go of fails its name (``reserve_port``). All probes stay open
    until all are found, and none listens. Where that range is too small, the OS picks.
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
