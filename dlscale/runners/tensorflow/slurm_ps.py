"""``python -m dlscale.runners.tensorflow.slurm_ps``: one SLURM task of a ps-mode run.

TensorFlow's parameter-server mode is not one process per rank: a chief drives one worker
server per rank and ``num_ps`` parameter servers (``ps.py``, ``server.py``). Inside a SLURM
allocation the run is nevertheless ONE ``srun`` step with one task per rank (n nodes x p
ranks, the allocation the workflow asked for), so that SLURM places, signals and ends it
like any other run (``--kill-on-bad-exit``). Each task runs this agent, which:

- computes the same cluster spec as every other task from the SLURM placement alone
  (``layout``): rank hosts from SLURM_STEP_NODELIST and the tasks per node; ports
  ``DLSCALE_MASTER_PORT + 1 + i`` for the i-th task of the spec (chief, workers, ps), as
  ``cluster.from_placement`` does for MWMS. The ports are deterministic, not probed: a
  port on another node cannot be probed free from here, and the tasks could not agree on
  a probed one without a rendezvous. The master port itself (free on the first node when
  the launcher chose it) stays unused;
- checks that every peer name of the spec resolves before any server starts,
  failing with the same message as MWMS;
- starts its task's processes as children: worker server k on rank k; parameter server j
  on node ``j mod nodes`` (by that node's local rank 0, where the local plan puts it too);
  on rank 0 also the chief, the normal runner, which writes ``rank0.jsonl`` with the
  iteration events (global samples; the plan's ``reporting_ranks`` is 1);
- waits for them, and leaves non-zero as soon as one fails (so srun ends the step), and
  forwards SIGTERM to them.

What it knows goes into the rank's part file, which ``dlscale.launch`` reads: on ranks
k >= 1 (which have no runner of their own) a rank_start with the task's host and its
children's PIDs, so that run_start says where every task ran, and a rank_end; on rank 0
only what the chief could not say itself (it was killed, or never started). A rank's
rank_end carries the cause when one of its children died: "rank k died (worker k,
SIGKILL) at iteration i", i from the chief's part file. No iteration event is ever written
here, so the merged events and the reporting ranks are the chief's alone.

No TensorFlow import here: the agent must stay light and outlive its children.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.base.sysutil import die_with_parent
from dlscale.events import PartWriter
from dlscale.host import placement as placement_mod
from dlscale.runners import common
from dlscale.runners.plan import signal_name
from dlscale.runners.tensorflow import cluster as cluster_mod

RUNNER = "dlscale.runners.tensorflow"
SERVER = "dlscale.runners.tensorflow.server"
POLL_S = 0.2
#: After SIGTERM, how long the children get before SIGKILL (SLURM's own KillWait is longer).
GRACE_S = 5.0


@dataclass(frozen=True)
class Task:
    """One process of the TensorFlow cluster and the SLURM task (rank) that starts it."""

    job: str  # chief, worker or ps
    index: int
    rank: int
    host: str
    port: int

    @property
    def label(self) -> str:
        return "chief" if self.job == "chief" else f"{self.job} {self.index}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Layout:
    """Every process of a ps-mode run under SLURM, in the cluster spec's order."""

    tasks: tuple[Task, ...]

    def cluster(self) -> dict[str, list[str]]:
        spec: dict[str, list[str]] = {"chief": [], "worker": [], "ps": []}
        for task in self.tasks:
            spec[task.job].append(task.address)
        return spec

    def of_rank(self, rank: int) -> list[Task]:
        """What SLURM task ``rank`` starts (the chief first on rank 0)."""
        return [task for task in self.tasks if task.rank == rank]


def layout(rank_hosts: Sequence[str], num_ps: int, master_port: int) -> Layout:
    """Where each process of a ps-mode run goes, from the ranks' hosts alone.

    The chief and worker 0 go with rank 0, worker k with rank k, and parameter server j on
    the ``j mod nodes``-th node (nodes in the order of their first rank), started by that
    node's first rank (its local rank 0 under SLURM's block distribution). The i-th task
    of the spec (chief, workers, ps) listens on ``master_port + 1 + i``: distinct on any
    one node, and the same on every task without talking to the others.
    """
    workers = len(rank_hosts)
    if workers < 1 or num_ps < 1:
        raise ValueError(f"ps mode needs >= 1 worker and >= 1 parameter server, got {workers} and {num_ps}")
    last = master_port + 1 + workers + num_ps
    if last > 65535:
        raise ValueError(f"master port {master_port} leaves no room for {workers + num_ps + 1} ports")
    nodes = list(dict.fromkeys(rank_hosts))
    first_rank = {host: rank_hosts.index(host) for host in nodes}
    tasks = [Task("chief", 0, 0, rank_hosts[0], master_port + 1)]
    tasks += [Task("worker", k, k, host, master_port + 2 + k) for k, host in enumerate(rank_hosts)]
    for j in range(num_ps):
        host = nodes[j % len(nodes)]
        tasks.append(Task("ps", j, first_rank[host], host, master_port + 2 + workers + j))
    return Layout(tuple(tasks))


def rank_hosts_of(where: placement_mod.Placement) -> list[str]:
    """Every rank's host (from SLURM's node list and tasks per node), as MWMS uses them."""
    hosts = list(where.rank_hosts) or [where.master_addr] * where.world_size
    if len(hosts) != where.world_size:
        raise ValueError(f"placement knows {len(hosts)} rank hosts for a world of {where.world_size}")
    return hosts


def iteration_phrase(work_dir: Path) -> str:
    """ "at iteration i" (iterations the chief completed) or "before its first iteration",
    read from the chief's part file on the shared work dir (a cut last line is skipped)."""
    done = 0
    path = work_dir / "rank0.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            break
        if event.get("event") == "iteration":
            done = int(event["iteration"]) + 1
    return f"at iteration {done}" if done else "before the first iteration"


def has_rank_end(path: Path) -> bool:
    try:
        return '"event":"rank_end"' in path.read_text(encoding="utf-8").replace(" ", "")
    except OSError:
        return False


def child_failure(task: Task, returncode: int, work_dir: Path) -> str:
    """The reason a person reads when ``task`` ended with ``returncode`` (not 0)."""
    how = signal_name(returncode) if returncode < 0 else f"exit status {returncode}"
    where = iteration_phrase(work_dir)
    if task.job == "ps":
        return (
            f"parameter server {task.index} died ({how}, on {task.host}, started by rank {task.rank}) {where}"
        )
    verb = "died" if returncode < 0 else "failed"
    return f"rank {task.rank} {verb} ({task.label}, {how}) {where}"


class Agent:
    """The children of one SLURM task and what became of them."""

    def __init__(self, argv: list[str], where: placement_mod.Placement, spec_num_ps: int, work_dir: Path):
        self.argv = argv
        self.where = where
        self.work_dir = work_dir
        self.layout = layout(rank_hosts_of(where), spec_num_ps, where.master_port)
        self.cluster = self.layout.cluster()
        self.tasks = self.layout.of_rank(where.rank)
        self.children: list[tuple[Task, subprocess.Popen[bytes]]] = []
        self.terminated = False
        self.part = work_dir / f"rank{where.rank}.jsonl"
        # Rank 0's part file is the chief's: the agent adds only an end the chief could not write.
        self.writer: PartWriter | None = None if where.rank == 0 else PartWriter(self.part)
        self.name = f"[tf ps agent, rank {where.rank} on {where.host}, pid {os.getpid()}]"

    def say(self, text: str, err: bool = False) -> None:
        print(f"{self.name} {text}", file=sys.stderr if err else sys.stdout, flush=True)

    def argv_of(self, task: Task) -> list[str]:
        if task.job == "chief":
            return [sys.executable, "-m", RUNNER, *self.argv]
        return [
            sys.executable, "-m", SERVER, "--job", task.job, "--index", str(task.index),
            "--work-dir", str(self.work_dir),
        ]  # fmt: skip

    def on_sigterm(self, signum: int, frame: Any) -> None:
        self.terminated = True
        for _, proc in self.children:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def start(self) -> None:
        env = {**os.environ, cluster_mod.ENV_CLUSTER: json.dumps(self.cluster)}
        for task in self.tasks:
            if self.terminated:
                break
            proc = subprocess.Popen(self.argv_of(task), env=env, preexec_fn=die_with_parent)
            self.children.append((task, proc))
        self.say(
            "started "
            + ", ".join(f"{t.label} (pid {p.pid}, {t.address})" for t, p in self.children)
            + f"; cluster {self.cluster}"
        )

    def rank_start(self) -> None:
        """Where this task ran and its children's PIDs (ranks >= 1: the agent speaks for them)."""
        if self.writer is None:
            return
        self.writer.emit(
            "rank_start",
            rank=self.where.rank,
            host=self.where.host,
            pid=os.getpid(),
            placement=self.where.as_dict(),
            processes={task.label: proc.pid for task, proc in self.children},
            role="tensorflow ps agent",
            threads=int(os.environ.get("OMP_NUM_THREADS", "1") or 1),
        )

    def end(self, status: str, reason: str | None, chief_spoke: bool = False) -> None:
        """This rank's rank_end. Rank 0's part file is the chief's: the agent appends there
        only what the chief could not say (``chief_spoke``: its own end is the story)."""
        if self.writer is None:
            if chief_spoke and has_rank_end(self.part):
                return
            self.writer = PartWriter(self.part)
            if not self.part.stat().st_size:  # the chief never started: say where rank 0 was
                self.writer.emit("rank_start", rank=0, host=self.where.host, pid=os.getpid(),
                                 placement=self.where.as_dict(), role="tensorflow ps agent")  # fmt: skip
        self.writer.emit("rank_end", rank=self.where.rank, status=status, reason=reason)
        self.writer.close()

    def stop_children(self, signal_first: bool = True) -> None:
        """SIGTERM to the children still running (unless already forwarded), a grace
        period, then SIGKILL (by PID)."""
        for _, proc in self.children:
            if signal_first and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.time() + GRACE_S
        for _, proc in self.children:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def watch(self) -> int:
        """Wait for every child; the first failure ends this task (non-zero)."""
        while True:
            if self.terminated:
                # SLURM follows its SIGTERM with SIGKILL within seconds: the end goes on
                # disk first, so that this rank is not mistaken for one that died.
                reason = (
                    f"terminated by SIGTERM (time limit or cancellation) {iteration_phrase(self.work_dir)}"
                )
                self.end("failed", reason, chief_spoke=True)
                self.say(f"FAILED: {reason}", err=True)
                self.stop_children(signal_first=False)
                return 1
            for task, proc in self.children:
                code = proc.poll()
                if code not in (None, 0):
                    reason = child_failure(task, code, self.work_dir)
                    # The siblings go first: on rank 0 the chief, told to stop, writes its
                    # own "terminated" end, and the cause must come after it (the last end
                    # is the rank's story).
                    self.stop_children()
                    self.end("failed", reason, chief_spoke=task.job == "chief")
                    self.say(f"FAILED: {reason}", err=True)
                    return 1
            if all(proc.poll() == 0 for _, proc in self.children):
                self.end("ok", None, chief_spoke=True)
                return 0
            time.sleep(POLL_S)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        try:
            # Before any server starts: a peer whose name does not resolve fails the run now.
            common.check_peers_resolve(cluster_mod.peers_of(self.cluster), self.where.rank)
        except common.RunFailure as err:
            if self.writer is not None:
                self.rank_start()
            self.end("failed", str(err))
            self.say(f"FAILED: {err}", err=True)
            return 2
        self.start()
        self.rank_start()
        return self.watch()


def main(argv: list[str] | None = None) -> int:
    """Run this SLURM task's share of a ps-mode run; takes the runner's own arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = common.parse_args(argv)
    where = placement_mod.from_slurm(os.environ)
    agent = Agent(argv, where, args.spec.options["num_ps"], args.work_dir)
    return agent.run()


if __name__ == "__main__":
    raise SystemExit(main())
