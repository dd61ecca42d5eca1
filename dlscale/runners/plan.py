"""How a run's processes are laid out: the ``Plan`` a runner's launcher returns.

Frameworks start differently: PyTorch and Caffe want one process per rank; TensorFlow's
parameter-server mode adds server processes; BigDL runs one driver that brings up its own
Spark cluster. So each runner's launcher module plans its run (``plan(ctx) -> Plan``, see
``dlscale.runners.contract.Launcher``) from the ``LaunchContext`` and helpers here;
``dlscale.launch`` starts, watches and stops whatever the plan lists, and merges the part
files of the ranks that report.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from dlscale.host import placement
from dlscale.runspec import RunSpec


@dataclass
class Process:
    """One process of a run. ``rank`` names the part file that tells its story, if any."""

    label: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    rank: int | None = None
    node: int = 0  # the emulated node whose network namespace the process runs in


@dataclass
class Plan:
    processes: list[Process]
    reporting_ranks: int  # ranks that write iteration events (the launcher checks the count)


@dataclass
class LaunchContext:
    spec: RunSpec
    python: str
    data: Path
    work_dir: Path
    master_port: int
    mode: str = "local"  # "local" (emulated nodes on this host) or "slurm" (inside an allocation)
    master_addr: str = "127.0.0.1"
    # Local runs on an emulated interconnect (dlscale.host.netns): each emulated node's address
    # and the interface ranks talk on; by default every node is this host's loopback.
    node_addresses: tuple[str, ...] = ("127.0.0.1",)
    interface: str = "lo"
    # Set on an emulated interconnect: what a process that starts other nodes' processes
    # (mpirun, Spark's driver) needs to put each on its node (dlscale.host.netns.node_env).
    node_env: dict[str, str] = field(default_factory=dict)

    @property
    def emulated(self) -> bool:
        return bool(self.node_env)

    def node_of(self, rank: int) -> int:
        """The emulated node of ``rank`` (ranks packed by node, as srun's block distribution)."""
        return rank // self.spec.ranks_per_node

    def address_of(self, rank: int) -> str:
        """The address rank ``rank`` listens on and publishes to its peers (node 0's is the
        master address, which ``DLSCALE_MASTER_ADDR`` may name)."""
        node = self.node_of(rank)
        return self.master_addr if node == 0 else self.node_addresses[node % len(self.node_addresses)]

    def runner_argv(self, module: str, *extra: str) -> list[str]:
        """The command line of one rank of ``module`` (``python -m module ...``)."""
        return [
            self.python, "-m", module, "--spec-json", self.spec.to_json(),
            "--data", str(self.data), "--work-dir", str(self.work_dir), *extra,
        ]  # fmt: skip

    def base_env(self) -> dict[str, str]:
        """Threads pinned, traffic on loopback, temporary files inside the run's work dir."""
        threads = str(self.spec.threads_per_rank)
        env = {
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "OMP_WAIT_POLICY": "PASSIVE",
            "TMPDIR": str(self.work_dir / "tmp"),
            "PYTHONUNBUFFERED": "1",
        }
        if self.mode == "local":
            env.update(
                {
                    "GLOO_SOCKET_IFNAME": self.interface,
                    "OMPI_MCA_btl_tcp_if_include": self.interface,
                    "OMPI_MCA_oob_tcp_if_include": self.interface,
                    "SPARK_LOCAL_IP": self.node_addresses[0],
                    **self.node_env,
                }
            )
        return env


def srun_argv(ctx: LaunchContext, *extra: str) -> list[str]:
    """srun inside the job's allocation: n nodes x p tasks, the whole step dies with a rank.

    ``--kill-on-bad-exit`` ends the step when one rank fails, so no rank waits forever
    in a collective for a dead peer.
    """
    spec = ctx.spec
    return [
        "srun", f"--nodes={spec.nodes}", f"--ntasks={spec.world_size}",
        f"--ntasks-per-node={spec.ranks_per_node}", f"--cpus-per-task={spec.threads_per_rank}",
        "--kill-on-bad-exit=1", "--export=ALL", *extra,
    ]  # fmt: skip


def slurm_env(ctx: LaunchContext) -> dict[str, str]:
    """What srun's ranks need beyond SLURM's own variables: where rank 0 listens."""
    return {
        **ctx.base_env(),
        "DLSCALE_MASTER_ADDR": ctx.master_addr,
        "DLSCALE_MASTER_PORT": str(ctx.master_port),
    }


def per_rank_plan(ctx: LaunchContext, module: str) -> Plan:
    """The common layout: n x p rank processes, each told its place as srun would tell it.

    Inside a SLURM allocation srun starts them on the allocated nodes and SLURM tells each
    its place; locally the launcher starts them and tells them through DLSCALE_* variables.
    """
    world = ctx.spec.world_size
    if ctx.mode == "slurm":
        argv = srun_argv(ctx, *ctx.runner_argv(module))
        return Plan([Process(f"srun ({world} ranks)", argv, slurm_env(ctx), None)], reporting_ranks=world)
    processes = []
    for rank in range(world):
        env = {
            **ctx.base_env(),
            **placement.local_rank_env(
                rank, ctx.spec.nodes, ctx.spec.ranks_per_node, ctx.master_port, ctx.address_of(0)
            ),
            "DLSCALE_NODE_ADDR": ctx.address_of(rank),
        }
        processes.append(Process(f"rank {rank}", ctx.runner_argv(module), env, rank, ctx.node_of(rank)))
    return Plan(processes, reporting_ranks=world)


def signal_name(returncode: int) -> str:
    """``SIGKILL`` for a process that ended with ``-9`` (what ``Popen.returncode`` says)."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


#: srun's report of a task that ended badly: "srun: error: n3: task 2: Killed" (or
#: "tasks 0-2: Exited with exit code 1", which names the first of them); with
#: --kill-on-bad-exit the first such line is the cause, the others its consequence.
SRUN_TASK_ERROR = re.compile(r"^srun: error: (?P<node>\S+): tasks? (?P<task>\d+)[-,\d]*: (?P<what>.+)$")


class SrunTaskError(NamedTuple):
    """One task's end as srun reported it: task k (the step's k-th rank or node), where, what."""

    task: int
    node: str
    what: str

    def __str__(self) -> str:
        return f"{self.node}: task {self.task}: {self.what}"


def srun_task_error(line: str) -> SrunTaskError | None:
    """The task an srun error line reports as failed, else None (not such a line)."""
    match = SRUN_TASK_ERROR.match(line.strip())
    if not match:
        return None
    return SrunTaskError(int(match["task"]), match["node"], match["what"].strip())


def first_srun_task_error(text: str) -> SrunTaskError | None:
    """srun's first report of a failed task in ``text`` (its stderr), the one that ended the step."""
    for line in text.splitlines():
        found = srun_task_error(line)
        if found is not None:
            return found
    return None


def environ_with(overrides: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **overrides}
