"""Linux network namespaces for local runs: loopback-only isolation and an emulated interconnect.

Two jobs, one mechanism:

* **Isolation** (every local run): TensorFlow's gRPC servers, Open MPI's TCP transport and
  Spark bind every interface, whatever we ask. A run's processes are therefore started in a
  namespace of their own whose only interface is ``lo``: whatever they bind, nothing outside
  the run can reach it, and concurrent runs cannot collide on ports.
* **Emulation** (``network: emulated-<preset>``): each emulated node gets its own namespace
  with one interface, ``eth0`` (10.77.0.<node+1>/24), joined to the other nodes by veth pairs
  on a bridge in a hub namespace; ``tc tbf`` on every node's ``eth0`` caps its bandwidth at
  the preset's (latency is the veth's own: see ``shaping_args``), so traffic between nodes crosses a shaped link while ranks
  of one node talk over their own loopback, as on a real cluster.

Processes join a namespace in the child between fork and exec (``setns``), so the launcher
keeps their PIDs and argv unchanged. Namespaces are named ``dlscale-<launcher pid>-...``:
a launcher killed with SIGKILL cannot clean up, and the next one removes namespaces whose
launcher is gone (only ours, by that name). Needs root and iproute2; ``unavailable()`` says
why not, in words, so the caller can degrade (isolation) or refuse (emulation).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.networks import NetworkPreset

NETNS_DIR = Path("/run/netns")
PREFIX = "dlscale-"
CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"
NODE_INTERFACE = "eth0"
COMMAND_TIMEOUT_S = 20


class NetnsError(RuntimeError):
    """A namespace, link or qdisc could not be set up; the message quotes the command."""


def unavailable(shaping: bool = False) -> str | None:
    """Why namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (this process is not running as root)"
    if not shutil.which("ip"):
        return "network namespaces need iproute2's `ip` (apt-get install iproute2)"
    if shaping and not shutil.which("tc"):
        return "bandwidth shaping needs iproute2's `tc` (apt-get install iproute2)"
    return None


def run_ip(*args: str, netns: str | None = None, tool: str = "ip") -> str:
    """Run ``ip``/``tc`` (inside ``netns`` if given); raise NetnsError naming the command."""
    argv = [tool, *(("-n", netns) if netns else ()), *args]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise NetnsError(f"`{' '.join(argv)}` failed: {err}") from None
    if out.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed: {out.stderr.strip() or out.returncode}")
    return out.stdout


def enter(path: str | os.PathLike[str]) -> None:
    """Move the calling process (a child before exec) into the network namespace at ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def _launcher_alive(name: str) -> bool:
    match = re.match(rf"{re.escape(PREFIX)}(\d+)-", name)
    if not match:
        return True  # not a name we make: never touch it
    try:
        os.kill(int(match[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Delete dlscale namespaces left by launchers that no longer exist; return their names."""
    if not NETNS_DIR.is_dir():
        return []
    removed = []
    for path in sorted(NETNS_DIR.glob(f"{PREFIX}*")):
        if not _launcher_alive(path.name):
            try:
                run_ip("netns", "delete", path.name)
                removed.append(path.name)
            except NetnsError:
                pass
    return removed


@dataclass
class RunNetwork:
    """The namespaces of one run: one per emulated node (a single one when only isolating)."""

    namespaces: list[str]
    addresses: list[str]  # the address ranks of node i use and publish
    interface: str  # the interface ranks talk on ("lo" when isolated, "eth0" when emulated)
    preset: NetworkPreset | None = None
    hub: str | None = None
    _created: list[str] = field(default_factory=list)

    def path(self, node: int) -> str:
        """The namespace file of emulated node ``node`` (every node shares it when isolated)."""
        return str(NETNS_DIR / self.namespaces[node % len(self.namespaces)])

    def describe(self) -> dict[str, object]:
        """What the run's start event records about its network."""
        info: dict[str, object] = {"isolation": "namespace", "interface": self.interface}
        if self.preset is not None:
            info.update(
                preset=self.preset.name,
                bandwidth_Bps=self.preset.bandwidth_Bps,
                latency_emulated=False,
                node_addresses=self.addresses,
            )
        return info

    def close(self) -> None:
        """Delete every namespace we made (their veths, bridge and qdiscs go with them)."""
        errors = []
        for name in reversed(self._created):
            try:
                run_ip("netns", "delete", name)
            except NetnsError as err:
                errors.append(str(err))
        self._created.clear()
        if errors:
            raise NetnsError("; ".join(errors))

    def __enter__(self) -> RunNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _name(tag: str) -> str:
    return f"{PREFIX}{os.getpid()}-{tag}-{uuid.uuid4().hex[:6]}"


def _add_namespace(net: RunNetwork, name: str) -> None:
    run_ip("netns", "add", name)
    net._created.append(name)
    run_ip("link", "set", "lo", "up", netns=name)


def isolated(tag: str = "run") -> RunNetwork:
    """One namespace with only ``lo`` up: every process of the run shares it."""
    sweep_stale()
    name = _name(tag)
    net = RunNetwork([name], ["127.0.0.1"], "lo")
    try:
        _add_namespace(net, name)
    except NetnsError:
        net.close()
        raise
    return net


def shaping_args(preset: NetworkPreset) -> list[str]:
    """The token-bucket qdisc that caps a link at the preset's bandwidth.

    The bucket holds 2 ms of traffic (at least 256 KiB, so that one 64 KiB GSO packet always
    fits) and the queue 100 ms, so a burst at the shaped rate queues rather than drops: TCP
    would otherwise measure its own loss recovery, not the link. Latency is not added: the
    kernels we run on often lack ``sch_netem``; the veth's own latency (tens of
    microseconds) stands in, and the start event says so.
    """
    rate_bit = max(8000, round(preset.bandwidth_Bps * 8))
    burst = max(256 * 1024, round(preset.bandwidth_Bps * 0.002))
    return ["tbf", "rate", f"{rate_bit}bit", "burst", str(burst), "latency", "100ms"]


def emulated(nodes: int, preset: NetworkPreset, tag: str = "run") -> RunNetwork:
    """``nodes`` namespaces joined by shaped veth links on a bridge in a hub namespace."""
    if nodes > 250:
        raise NetnsError(f"at most 250 emulated nodes fit the {SUBNET}.0/24 subnet, asked for {nodes}")
    sweep_stale()
    base = _name(tag)
    return bridged(f"{base}-hub", {f"{base}-n{i}": f"{SUBNET}.{i + 1}" for i in range(nodes)}, preset)


def interfaces(namespace: str) -> dict[str, list[str]]:
    """Each interface of a namespace and its IPv4/IPv6 addresses (for tests and checks)."""
    out = run_ip("-o", "addr", "show", netns=namespace)
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        parts = line.split()
        found.setdefault(parts[1], []).append(parts[3])
    links = run_ip("-o", "link", "show", netns=namespace)
    for line in links.splitlines():
        found.setdefault(line.split(":")[1].strip().split("@")[0], [])
    return found


def qdisc(namespace: str, device: str = NODE_INTERFACE) -> str:
    """The root qdisc line of ``device`` in ``namespace`` (what ``tc qdisc show`` says)."""
    return run_ip("qdisc", "show", "dev", device, netns=namespace, tool="tc").strip()


ENV_NODE_NAMESPACES = "DLSCALE_NETNS_NODES"  # the namespace file of every emulated node, by node
ENV_NODE_ADDRESSES = "DLSCALE_NODE_ADDRS"  # every emulated node's address, by node


def node_env(net: RunNetwork) -> dict[str, str]:
    """What processes that start processes of other nodes (mpirun, Spark's driver) need to know."""
    return {
        ENV_NODE_NAMESPACES: ",".join(net.path(i) for i in range(len(net.namespaces))),
        ENV_NODE_ADDRESSES: ",".join(net.addresses),
    }


def node_argv(python: str, node: int | None = None, rank_var: str | None = None) -> list[str]:
    """The prefix that runs a command in an emulated node's namespace (see ``main``)."""
    argv = [python, "-m", "dlscale.host.netns"]
    argv += ["--node", str(node)] if node is not None else ["--rank-var", str(rank_var)]
    return [*argv, "--"]


def main(argv: list[str] | None = None) -> int:
    """``python -m dlscale.host.netns (--node N | --rank-var VAR) -- COMMAND...``

    Runs COMMAND (exec, same PID) in emulated node N's namespace, or in the node of the rank
    that VAR names (``OMPI_COMM_WORLD_RANK`` under mpirun, packed ``DLSCALE_RANKS_PER_NODE``
    to a node): mpirun and Spark start a run's other processes themselves, and this is how
    each lands on its own emulated node.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m dlscale.host.netns", description=main.__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--node", type=int)
    where.add_argument("--rank-var")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    paths = [p for p in os.environ.get(ENV_NODE_NAMESPACES, "").split(",") if p]
    if not paths:
        print(f"dlscale.host.netns: {ENV_NODE_NAMESPACES} is not set", file=sys.stderr)
        return 2
    node = args.node
    if node is None:
        rank = int(os.environ.get(args.rank_var, "-1"))
        per_node = int(os.environ.get("DLSCALE_RANKS_PER_NODE", "1"))
        if rank < 0:
            print(f"dlscale.host.netns: {args.rank_var} is not set", file=sys.stderr)
            return 2
        node = rank // per_node
    if not 0 <= node < len(paths):
        print(
            f"dlscale.host.netns: node {node} is not one of the {len(paths)} emulated nodes", file=sys.stderr
        )
        return 2
    enter(paths[node])
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    raise SystemExit(main())


def bridged(
    hub: str,
    nodes: dict[str, str],
    preset: NetworkPreset | None = None,
    hub_address: str | None = None,
    prefix_len: int = 24,
) -> RunNetwork:
    """Namespaces named by ``nodes`` (name -> address) on a bridge in namespace ``hub``.

    The long-lived sibling of ``emulated``: the caller names every namespace (so that
    ``sweep_stale``, which removes ``dlscale-<pid>-`` namespaces of dead launchers, never
    takes them) and may give the bridge itself an address (``hub_address``), so that a
    process in the hub (a SLURM controller) reaches every node and every node reaches it.
    Each node's ``eth0`` is shaped to ``preset`` (None: the veth's own speed); change it
    later with ``set_bandwidth``.
    """
    names = list(nodes)
    net = RunNetwork(names, [nodes[n] for n in names], NODE_INTERFACE, preset, hub)
    try:
        _add_namespace(net, hub)
        run_ip("link", "add", "br0", "type", "bridge", netns=hub)
        run_ip("link", "set", "br0", "up", netns=hub)
        if hub_address:
            run_ip("addr", "add", f"{hub_address}/{prefix_len}", "dev", "br0", netns=hub)
        for i, name in enumerate(names):
            _add_namespace(net, name)
            port = f"p{i}"
            run_ip(
                "link", "add", port, "type", "veth", "peer", "name", NODE_INTERFACE, "netns", name, netns=hub
            )
            run_ip("link", "set", port, "master", "br0", "up", netns=hub)
            run_ip("addr", "add", f"{nodes[name]}/{prefix_len}", "dev", NODE_INTERFACE, netns=name)
            run_ip("link", "set", NODE_INTERFACE, "up", netns=name)
            if preset is not None:
                run_ip(
                    "qdisc",
                    "add",
                    "dev",
                    NODE_INTERFACE,
                    "root",
                    *shaping_args(preset),
                    netns=name,
                    tool="tc",
                )
    except NetnsError:
        net.close()
        raise
    return net


def set_bandwidth(namespace: str, preset: NetworkPreset | None, device: str = NODE_INTERFACE) -> None:
    """Reshape ``device`` in ``namespace`` to ``preset`` (None: remove the cap), in place.

    Connections stay up: a running cluster changes its links between runs without
    restarting its daemons.
    """
    if preset is None:
        try:
            run_ip("qdisc", "del", "dev", device, "root", netns=namespace, tool="tc")
        except NetnsError as err:
            if "No such file" not in str(err) and "Cannot delete qdisc with handle of zero" not in str(err):
                raise
        return
    run_ip("qdisc", "replace", "dev", device, "root", *shaping_args(preset), netns=namespace, tool="tc")
