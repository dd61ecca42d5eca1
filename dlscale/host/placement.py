"""Who am I: rank, world size, node and master address of a training process.

The same runner code runs under three launchers and must not care which:
- SLURM (``srun``): the ``SLURM_*`` variables describe the allocation;
- dlscale's local launcher (``python -m dlscale.launch``), which emulates n nodes x p ranks
  with processes on this host and sets ``DLSCALE_*`` variables the way srun sets SLURM's;
- nothing at all: a single process, rank 0 of 1.
SLURM wins when it describes a multi-task step, so that a run launched by srun inside an
allocation is placed by the allocation, not by stale local variables.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from dlscale.base.sysutil import DEFAULT_EPHEMERAL_LOW, PORTS_FROM

#: How far a job's own port lies above ``PORTS_FROM``: to Linux's default ephemeral range and no
#: further, where srun's and every connection's ports would compete (sysutil.free_ports).
JOB_PORT_SPAN = DEFAULT_EPHEMERAL_LOW - PORTS_FROM


@dataclass(frozen=True)
class Placement:
    rank: int
    world_size: int
    local_rank: int
    node_rank: int
    nodes: int
    host: str
    master_addr: str
    master_port: int
    launcher: str
    rank_hosts: tuple[str, ...] = ()  # address of every rank, by rank (for TF_CONFIG, hostfiles)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a SLURM hostlist expression: ``cn[001-003,7],gpu1`` -> cn001 cn002 cn003 cn7 gpu1.

    Zero padding of a range is kept, as SLURM does. Written here (rather than calling
    ``scontrol show hostnames``) so that placement works in the job step with no SLURM
    client on PATH and is unit-testable.
    """
    hosts: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", hostlist):
        item = item.strip()
        if not item:
            continue
        match = re.fullmatch(r"(?P<prefix>[^\[]*)\[(?P<ranges>[^\]]+)\](?P<suffix>.*)", item)
        if not match:
            hosts.append(item)
            continue
        for part in match["ranges"].split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                width = len(lo)
                if int(hi) < int(lo):
                    raise ValueError(f"bad range {part!r} in hostlist {hostlist!r}")
                for number in range(int(lo), int(hi) + 1):
                    hosts.append(f"{match['prefix']}{number:0{width}d}{match['suffix']}")
            else:
                hosts.append(f"{match['prefix']}{part}{match['suffix']}")
    return hosts


def expand_tasks_per_node(value: str) -> list[int]:
    """Expand SLURM's compressed tasks-per-node list: ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for item in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise ValueError(f"bad tasks-per-node list {value!r}")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except (KeyError, ValueError):
        raise ValueError(f"environment variable {key}={env.get(key)!r} is not an integer") from None


def from_slurm(env: Mapping[str, str]) -> Placement:
    """Placement inside a SLURM job step (``srun``)."""
    rank = _int(env, "SLURM_PROCID")
    world = _int(env, "SLURM_NTASKS")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    hosts = expand_hostlist(nodelist) if nodelist else [socket.gethostname()]
    master_addr = env.get("DLSCALE_MASTER_ADDR") or hosts[0]
    job = int(env.get("SLURM_JOB_ID", "0") or 0)
    step = int(env.get("SLURM_STEP_ID", "0") or 0) if env.get("SLURM_STEP_ID", "0").isdigit() else 0
    port = int(env.get("DLSCALE_MASTER_PORT") or PORTS_FROM + (job * 7 + step) % JOB_PORT_SPAN)
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    rank_hosts: tuple[str, ...] = ()
    if per_node:
        counts = expand_tasks_per_node(per_node)
        rank_hosts = tuple(host for host, count in zip(hosts, counts, strict=False) for _ in range(count))
    return Placement(
        rank=rank,
        world_size=world,
        local_rank=int(env.get("SLURM_LOCALID", "0")),
        node_rank=int(env.get("SLURM_NODEID", "0")),
        nodes=int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_JOB_NUM_NODES") or len(hosts)),
        host=env.get("SLURMD_NODENAME") or socket.gethostname(),
        master_addr=master_addr,
        master_port=port,
        launcher="slurm",
        rank_hosts=rank_hosts,
    )


def from_local(env: Mapping[str, str]) -> Placement:
    """Placement set by dlscale's local launcher (emulated nodes on one host)."""
    return Placement(
        rank=_int(env, "DLSCALE_RANK"),
        world_size=_int(env, "DLSCALE_WORLD_SIZE"),
        local_rank=_int(env, "DLSCALE_LOCAL_RANK"),
        node_rank=_int(env, "DLSCALE_NODE_RANK"),
        nodes=_int(env, "DLSCALE_NNODES"),
        host=env.get("DLSCALE_HOST", socket.gethostname()),
        master_addr=env.get("DLSCALE_MASTER_ADDR", "127.0.0.1"),
        master_port=_int(env, "DLSCALE_MASTER_PORT"),
        launcher="local",
        rank_hosts=(env.get("DLSCALE_MASTER_ADDR", "127.0.0.1"),) * _int(env, "DLSCALE_WORLD_SIZE"),
    )


def detect(env: Mapping[str, str] | None = None) -> Placement:
    """The placement of this process, from SLURM, the local launcher, or a lone process."""
    env = os.environ if env is None else env
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "DLSCALE_RANK" not in env:
        return from_slurm(env)
    if "DLSCALE_RANK" in env:
        return from_local(env)
    return Placement(0, 1, 0, 0, 1, socket.gethostname(), "127.0.0.1", PORTS_FROM, "single", ("127.0.0.1",))


def local_rank_env(
    rank: int, nodes: int, ranks_per_node: int, master_port: int, master_addr: str = "127.0.0.1"
) -> dict[str, str]:
    """The variables the local launcher gives rank ``rank`` of an emulated n x p run.

    Ranks are packed by node (ranks 0..p-1 on node 0, ...), as srun's block distribution
    does, and each emulated node gets its own host name so events show the spread.
    """
    node_rank = rank // ranks_per_node
    return {
        "DLSCALE_RANK": str(rank),
        "DLSCALE_WORLD_SIZE": str(nodes * ranks_per_node),
        "DLSCALE_LOCAL_RANK": str(rank % ranks_per_node),
        "DLSCALE_NODE_RANK": str(node_rank),
        "DLSCALE_NNODES": str(nodes),
        "DLSCALE_HOST": f"{socket.gethostname()}/node{node_rank}",
        "DLSCALE_MASTER_ADDR": master_addr,
        "DLSCALE_MASTER_PORT": str(master_port),
    }


def address_towards(peer: str) -> str:
    """This node's address as ``peer`` sees it: the source address of the route to ``peer``.

    Not the address the host name resolves to: many systems map their own name to a
    loopback address (Debian's 127.0.1.1), which peers on other nodes cannot reach. A UDP
    ``connect`` sends nothing; it only asks the kernel which source address it would use.
    Raises OSError when ``peer`` does not resolve or has no route.
    """
    target = socket.gethostbyname(peer)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((target, 9))
        return str(sock.getsockname()[0])


#: What a launcher's children need to know of the allocation beyond the job's identity.
ALLOCATION_VARS = ("SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_CPUS_ON_NODE", "SLURM_MEM_PER_NODE")
_MEMORY_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def _megabytes(value: str) -> int | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", value or "")
    return int(float(match[1]) * _MEMORY_UNITS[match[2] or "M"]) if match else None


def allocation_from_show_job(text: str) -> dict[str, str]:
    """``SLURM_*`` allocation variables from ``scontrol show job -o`` output (what is there).

    CPUs per node are the job's CPUs over its nodes (SLURM's own variable is per node, and
    the training rule asks the same of every node); memory is ``MinMemoryNode``, or
    ``MinMemoryCPU`` times the CPUs of a node.
    """
    fields = dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", text))
    facts: dict[str, str] = {}
    if fields.get("NodeList") not in (None, "", "(null)"):
        facts["SLURM_JOB_NODELIST"] = fields["NodeList"]
    nodes = int(fields["NumNodes"]) if fields.get("NumNodes", "").isdigit() else None
    cpus = int(fields["NumCPUs"]) if fields.get("NumCPUs", "").isdigit() else None
    if nodes:
        facts["SLURM_JOB_NUM_NODES"] = str(nodes)
    per_node = cpus // nodes if cpus and nodes else None
    if per_node:
        facts["SLURM_CPUS_ON_NODE"] = str(per_node)
    memory = _megabytes(fields.get("MinMemoryNode", ""))
    if memory is None and per_node and _megabytes(fields.get("MinMemoryCPU", "")) is not None:
        memory = per_node * (_megabytes(fields["MinMemoryCPU"]) or 0)
    if memory:
        facts["SLURM_MEM_PER_NODE"] = str(memory)
    return facts


def allocation_env(env: Mapping[str, str], show_job: Callable[[str], str] | None = None) -> dict[str, str]:
    """The allocation's variables the job's environment lacks, from SLURM itself.

    Snakemake's SLURM job-step executor runs a job's shell with every ``SLURM_*`` variable
    removed but the job's identity (``SLURM_JOB_ID``...), so that a nested ``srun`` does not
    inherit the batch step's task settings. srun needs no more than the job id, but what
    a launcher decides before its srun does (the master's address, BigDL's Spark workers'
    size, which node an executor is on) needs the node list and the node's CPUs and memory:
    they are asked of ``scontrol show job -o`` (``show_job``, injectable for tests) and
    only where missing. ``{}`` outside a job, or when SLURM cannot say.
    """
    missing = [name for name in ALLOCATION_VARS if not env.get(name)]
    job = env.get("SLURM_JOB_ID")
    if not missing or not job:
        return {}
    try:
        text = show_job(job) if show_job else _show_job(job)
    except (OSError, subprocess.SubprocessError):
        return {}
    return {name: value for name, value in allocation_from_show_job(text).items() if name in missing}


def _show_job(job: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=30, check=True
    ).stdout


ADDRESS_TOKEN = "{address}"


def main(argv: list[str] | None = None) -> int:
    """``python -m dlscale.host.placement --towards PEER -- COMMAND...``: run COMMAND bound to this node.

    For daemons that another node's process starts on every node of an allocation (Spark's
    workers, by one ``srun`` step): each computes its own node's address (``address_towards``
    PEER), gets it as ``SPARK_LOCAL_IP`` and in place of ``{address}`` in COMMAND, and is
    exec'ed (same PID). Exits 2 naming PEER when it does not resolve or cannot be reached.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m dlscale.host.placement", description=main.__doc__)
    parser.add_argument("--towards", required=True, help="a peer (the master) this node must reach")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    try:
        address = address_towards(args.towards)
    except OSError as err:
        node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        print(
            f"dlscale.host.placement: {node} cannot reach {args.towards}: {err}", file=sys.stderr, flush=True
        )
        return 2
    os.environ["SPARK_LOCAL_IP"] = address
    os.execvp(command[0], [part.replace(ADDRESS_TOKEN, address) for part in command])
    return 127  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
