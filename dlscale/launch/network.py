"""The network of a run: where ranks meet (launch mode, master address) and what they cross.

A local run on the host network is kept private in a network namespace where it can be
(root, else an unprivileged user namespace); an emulated network (``n2x1-1gbe``) gets one
namespace per node joined by shaped links; under SLURM the cluster's own network is used.
What was set up is recorded in run_start (``network_setup``) and named on the progress line.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any

from dlscale import networks
from dlscale.host import netns, placement, userns
from dlscale.launch.runner import runner_launcher
from dlscale.runspec import RunSpec


def launch_mode(env: Mapping[str, str]) -> str:
    """``slurm`` inside a SLURM allocation (ranks go through srun), else ``local``.

    ``DLSCALE_LAUNCHER=local`` forces emulated nodes even inside an allocation.
    """
    forced = env.get("DLSCALE_LAUNCHER")
    if forced in ("local", "slurm"):
        return forced
    return "slurm" if env.get("SLURM_JOB_ID") and shutil.which("srun") else "local"


def master_address(mode: str, env: Mapping[str, str]) -> str:
    """Where rank 0's rendezvous listens: loopback locally; this (first) node under SLURM.

    Under SLURM it is the address the allocation's second node reaches this one by
    (``placement.address_towards``), not what this host's name resolves to: many sites map
    their own name to a loopback address (Debian's 127.0.1.1) that no other node can reach.
    A one-node allocation, or a peer that cannot be resolved here, falls back to the host
    name's address: every rank is on this node then, or the run's own peer check names the
    unresolvable host. ``DLSCALE_MASTER_ADDR`` overrides it.
    """
    if env.get("DLSCALE_MASTER_ADDR"):
        return env["DLSCALE_MASTER_ADDR"]
    if mode == "local":
        return "127.0.0.1"
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    hosts = placement.expand_hostlist(nodelist) if nodelist else []
    if len(hosts) > 1:
        try:
            return placement.address_towards(hosts[1])
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def isolation_options() -> dict[str, str | None]:
    """Each way a local run's network can be kept private, strongest first, with why it
    cannot be used here (None: it can). Probed, not guessed (see ``netns``, ``userns``)."""
    return {"namespace": netns.unavailable(), "user namespace": userns.unavailable()}


def listens_on_every_interface(spec: RunSpec) -> str | None:
    """What of this run would listen on every interface whatever it is told (None: nothing);
    each runner's launcher says it for its framework (``dlscale.runners.contract.Launcher``)."""
    return runner_launcher(spec.framework).listens_on_every_interface(spec)


def setup_network(
    spec: RunSpec,
    mode: str,
    options: Mapping[str, str | None] | None = None,
    python: str = sys.executable,
) -> tuple[netns.RunNetwork | None, dict[str, Any]]:
    """The run's namespaces, and what the start event records about them.

    Local runs on the host network are isolated in a network namespace when root and
    iproute2 allow, else in an unprivileged user+network namespace (``userns``); with
    neither, a run whose processes bind only loopback (torch: a file rendezvous and gloo on
    ``lo``; BigDL: Spark on ``SPARK_LOCAL_IP``) runs on the host's loopback, saying so,
    and one that would listen on every interface (TensorFlow's gRPC servers, mpirun) is
    refused with the reason and what to do. ``options`` (``isolation_options()`` by
    default) is injectable for tests of the decision. An emulated network cannot degrade:
    without namespaces the run fails (NetnsError) with the reason.
    """
    name = spec.network
    preset = networks.emulated_preset(name)
    if preset is None:
        if mode != "local":
            return None, {"name": name, "isolation": "none (SLURM allocation: the cluster's network)"}
        # A runner whose daemons outlive the run (BigDL's per-study Spark cluster) keeps the
        # run on the study's loopback, where they listen (an optional launcher hook).
        shared = getattr(runner_launcher(spec.framework), "host_loopback_reason", None)
        reason = shared(spec, os.environ) if shared is not None else None
        if reason:
            return None, {"name": name, "isolation": f"none ({reason})", "listen": "127.0.0.1 only"}
        tried = []
        for kind, reason in (isolation_options() if options is None else options).items():
            if reason is None:
                try:
                    net = netns.isolated(spec.framework) if kind == "namespace" else userns.isolated(python)
                    return net, {"name": name, **net.describe()}
                except (netns.NetnsError, userns.UsernsError) as err:
                    reason = str(err)
            tried.append(f"{kind}: {reason}")
        why = "; ".join(tried)
        listens = listens_on_every_interface(spec)
        if listens:
            raise netns.NetnsError(
                f"refusing to run {spec.framework} on the host's network: {listens}, reachable"
                f" from other machines for the whole run, and no private network namespace can"
                f" be made here ({why}). To run it, {userns.REMEDY}"
            )
        return None, {"name": name, "isolation": f"none ({why})", "listen": "127.0.0.1 only"}
    if mode != "local":
        raise netns.NetnsError(f"network {name!r} is emulated on the local profile only, not inside SLURM")
    reason = netns.unavailable(shaping=True)
    if reason:
        raise netns.NetnsError(f"network {name!r} cannot be emulated here: {reason}")
    net = netns.emulated(spec.nodes, preset, spec.framework)
    return net, {"name": name, **net.describe()}


def joiner(net: netns.RunNetwork | None, node: int) -> Callable[[], None] | None:
    """How a process of ``node`` joins the run's network (None: it stays on the host's)."""
    if net is None:
        return None
    if isinstance(net, userns.UserRunNetwork):
        return net.join
    path = net.path(node)
    return lambda: netns.enter(path)


def describe_network(info: Mapping[str, Any]) -> str:
    """One phrase for the progress line: what the ranks' traffic crosses."""
    if info.get("preset"):
        return (
            f"emulated {info['preset']} ({info['bandwidth_Bps'] * 8 / 1e9:g} Gbit/s per node link,"
            f" nodes at {', '.join(info['node_addresses'])})"
        )
    if info.get("isolation") == "namespace":
        return "loopback only (own network namespace)"
    if info.get("isolation") == "user namespace":
        return "loopback only (own unprivileged user+network namespace)"
    if str(info.get("isolation", "")).startswith("none (SLURM"):
        return "the cluster's network between the allocated nodes"
    return f"host loopback, {info.get('isolation', 'not isolated')}"
