"""Loopback-only isolation of a local run without root: an unprivileged user+network namespace.

``dlscale.host.netns`` isolates a run in a named network namespace, which needs root and
iproute2. Where either is missing, the run's processes still must not share the host's
network: TensorFlow's gRPC servers (which run any TF op for whoever connects) and Open
MPI's daemons listen on every interface. An unprivileged user may create a user namespace
and, inside it, a network namespace (``unshare --user --map-root-user --net``); its only
interface is ``lo``, down until someone with ``CAP_NET_ADMIN`` in that user namespace brings
it up.

How: a small *holder* process is started under ``unshare``; it brings ``lo`` up (an ioctl:
no iproute2 needed), says ``ready`` and waits for its stdin to close. Every process of the
run joins the holder's user namespace, then its network namespace (``setns``, in the child
between fork and exec, as ``netns.enter`` does), so the launcher keeps their PIDs and argv.
Inside, the run's processes are uid 0 of that user namespace (the caller's uid outside:
files they write belong to the caller); they have no privilege on the host. The holder
dies with the launcher (``PR_SET_PDEATHSIG``, and the closed pipe), and the namespace with
the last process in it.

Where user namespaces are disabled (``user.max_user_namespaces=0``, Ubuntu's AppArmor
restriction, a container's seccomp profile), ``unavailable()`` says so in words and the
launcher refuses to run what would listen on every interface (see ``dlscale.launch``).
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from dlscale.base.sysutil import die_with_parent
from dlscale.host.netns import CLONE_NEWNET, RunNetwork

CLONE_NEWUSER = 0x10000000
READY_TIMEOUT_S = 20.0
UNSHARE_ARGS = ("--user", "--map-root-user", "--net")

#: What the holder runs inside the new namespaces: ``lo`` up (SIOCGIFFLAGS, then
#: SIOCSIFFLAGS with IFF_UP), ``ready`` on stdout, then wait until stdin closes.
HOLDER = r"""
import fcntl, socket, struct, sys
ifreq = "16sH14x"
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    flags = struct.unpack(ifreq, fcntl.ioctl(sock, 0x8913, struct.pack(ifreq, b"lo", 0)))[1]
    fcntl.ioctl(sock, 0x8914, struct.pack(ifreq, b"lo", flags | 1))
print("ready", flush=True)
sys.stdin.read()
"""

#: What the message says to do when no namespace at all can be made.
REMEDY = (
    "run as root with iproute2 installed (a network namespace per run), or allow unprivileged"
    " user namespaces (sysctl user.max_user_namespaces > 0; on Ubuntu also"
    " kernel.apparmor_restrict_unprivileged_userns=0; in a container, a seccomp profile that"
    " permits unshare), or run the study under SLURM"
)


class UsernsError(RuntimeError):
    """The user+network namespace could not be made; the message says why."""


_probed: dict[str, str | None] = {}


def unavailable() -> str | None:
    """Why an unprivileged user+network namespace cannot be made here (None when it can).

    Probed once per process by making one (``unshare ... true``, a few milliseconds): the
    sysctls alone do not tell (AppArmor, seccomp and nested containers refuse too).
    """
    if "reason" in _probed:
        return _probed["reason"]
    unshare = shutil.which("unshare")
    reason: str | None
    if not unshare:
        reason = "user namespaces need util-linux's `unshare` (apt-get install util-linux)"
    else:
        try:
            out = subprocess.run([unshare, *UNSHARE_ARGS, "true"], capture_output=True, text=True, timeout=10)
            reason = None
            if out.returncode != 0:
                reason = (
                    f"unprivileged user namespaces are not available: `unshare {' '.join(UNSHARE_ARGS)}`"
                    f" failed: {out.stderr.strip() or out.returncode}"
                )
        except (OSError, subprocess.TimeoutExpired) as err:
            reason = f"unprivileged user namespaces are not available: `unshare` failed: {err}"
    _probed["reason"] = reason
    return reason


def enter(pid: int) -> None:
    """Move the calling process (a child before exec) into ``pid``'s user, then network, namespace.

    Both files are opened first: once in the user namespace, the holder's /proc entry is
    still ours to open, but there is no reason to depend on it.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    fds = [
        (os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC), flag, kind)
        for kind, flag in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET))
    ]
    try:
        for fd, flag, kind in fds:
            if libc.setns(fd, flag) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns(/proc/{pid}/ns/{kind}): {os.strerror(errno)}")
    finally:
        for fd, _, _ in fds:
            os.close(fd)


@dataclass
class UserRunNetwork(RunNetwork):
    """A run isolated in the user+network namespace of a holder process (loopback only)."""

    holder: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def path(self, node: int) -> str:
        """The holder's network namespace (every process of the run shares it)."""
        return f"/proc/{self.pid}/ns/net"

    @property
    def pid(self) -> int:
        if self.holder is None:
            raise UsernsError("the namespace holder is gone")
        return self.holder.pid

    def join(self) -> None:
        """Join the run's namespaces (in a child between fork and exec)."""
        enter(self.pid)

    def describe(self) -> dict[str, object]:
        return {"isolation": "user namespace", "interface": self.interface}

    def close(self) -> None:
        """Let the holder go (its stdin closes); the namespace goes with its last process."""
        holder, self.holder = self.holder, None
        if holder is None:
            return
        if holder.stdin:
            holder.stdin.close()
        try:
            holder.wait(timeout=5)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
        for stream in (holder.stdout, holder.stderr):
            if stream:
                stream.close()


def isolated(python: str = sys.executable) -> UserRunNetwork:
    """A user+network namespace with only ``lo`` up, held open until ``close()``."""
    unshare = shutil.which("unshare")
    if not unshare:
        raise UsernsError("user namespaces need util-linux's `unshare` (apt-get install util-linux)")
    argv = [unshare, *UNSHARE_ARGS, "--", python, "-c", HOLDER]
    try:
        holder = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only
        )
    except OSError as err:
        raise UsernsError(f"`{' '.join(argv[:5])}` could not start: {err}") from None
    net = UserRunNetwork([f"userns-{holder.pid}"], ["127.0.0.1"], "lo", holder=holder)
    assert holder.stdout is not None and holder.stderr is not None
    deadline = time.time() + READY_TIMEOUT_S
    line = b""
    while time.time() < deadline and holder.poll() is None and not line.endswith(b"\n"):
        ready, _, _ = select.select([holder.stdout], [], [], 0.1)
        if ready:
            line += os.read(holder.stdout.fileno(), 64) or b""
    if line.strip() != b"ready":
        code = holder.poll()
        error = holder.stderr.read().decode(errors="replace").strip() if code is not None else ""
        net.close()
        raise UsernsError(
            f"`unshare {' '.join(UNSHARE_ARGS)}` did not make a namespace"
            + (f" (exit {code}): {error}" if code is not None else f" within {READY_TIMEOUT_S:.0f} s")
        )
    return net


def choose(options: Mapping[str, str | None]) -> str | None:
    """The strongest isolation available: the first kind (in the order given) whose reason
    is None; None when none is."""
    return next((kind for kind, reason in options.items() if reason is None), None)
