"""A Spark standalone cluster that belongs to one BigDL run: started, watched, stopped by PID.

Every BigDL job brings up its own master and workers and takes them down again, so that
runs never share daemons (a measurement is never disturbed by another job's executors, and
a failed job leaves nothing behind); with ``cluster: per_study`` one of these clusters is
instead held by a supervisor for a study's runs (``shared_cluster``). The pip ``pyspark`` has no ``sbin/`` scripts, so the
daemons are started with ``bin/spark-class`` (which ``exec``s the JVM: the PID we hold is
the JVM's).

- Local profile: the master and one worker per emulated node, all on 127.0.0.1 (on an
  emulated interconnect, each worker in its node's namespace at its node's address). Ports are
  picked free by the OS (the master's is read back from its log, because Spark moves to the
  next port when one is taken), web UIs get port 0: concurrent jobs on one host never meet.
- SLURM: the master on the allocation's first node (where the driver runs) and one worker
  per node started by a single ``srun`` step, each offering the cores and memory the
  allocation gives a node. Every daemon binds its node's address (``SPARK_LOCAL_IP``: the
  master and the driver the launcher's master address, a worker the address its node
  reaches the master from, ``python -m dlscale.host.placement``), never every interface.

Authentication (every mode): each cluster has its own random secret (``secret``, never
printed or logged). The daemons get it in ``_SPARK_AUTH_SECRET`` (their environment, not
their command line) with ``spark.authenticate=true``; the driver sets it on its SparkConf
after its JVM has started (``driver_settings``, ``SECRET_KEY``), so it is on no command
line either; executors get it from their worker's environment. A process that does not
hold the secret cannot register with the master, a worker or the driver.

Every daemon runs in a process group of its own (so that stopping a worker also stops the
executors it forked) with ``PR_SET_PDEATHSIG`` set: if the driver is SIGKILLed before its
``finally`` runs, the kernel still takes the daemons down. Worker and scratch directories
(the jars Spark copies per application, shuffle files) live under the run's work dir and
are deleted on stop; the daemons' and executors' logs are kept beside them as evidence.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.base.sysutil import free_port
from dlscale.host.netns import ENV_NODE_ADDRESSES, ENV_NODE_NAMESPACES, node_argv
from dlscale.host.placement import ADDRESS_TOKEN
from dlscale.runners.plan import first_srun_task_error
from dlscale.runspec import RunSpec

HOST = "127.0.0.1"
SECRET_KEY = "spark.authenticate.secret"
SECRET_ENV = "_SPARK_AUTH_SECRET"  # what Spark's daemons and executors read the secret from
STOP_GRACE_S = 4.0
PR_SET_PDEATHSIG = 1


class SparkClusterError(RuntimeError):
    """The cluster could not be started; the message quotes the daemon's log."""


@dataclass(frozen=True)
class ClusterShape:
    """How a run's nodes and ranks become Spark workers, executors and cores.

    One worker per node, each running one executor with ``ranks_per_node x
    threads_per_rank`` cores. BigDL trains one model replica per executor core, each on its
    own slice of the mini-batch, so a study rank (one data-parallel replica with its own
    batch) is one executor core when threads_per_rank is 1; with more threads, a rank's
    batch is split over that many replicas.
    """

    workers: int
    cores_per_executor: int
    executor_memory: str

    @property
    def total_cores(self) -> int:
        return self.workers * self.cores_per_executor


def cluster_shape(spec: RunSpec, executor_memory: str) -> ClusterShape:
    return ClusterShape(spec.nodes, spec.ranks_per_node * spec.threads_per_rank, executor_memory)


def bigdl_batch(spec: RunSpec, shape: ClusterShape) -> int:
    """The global batch BigDL is given: the study's batch per rank x ranks.

    DistriOptimizer splits it evenly over executors x cores and refuses a remainder, so a
    batch that does not divide is a configuration error, said before any JVM starts.
    """
    global_batch = spec.global_batch
    if global_batch % shape.total_cores:
        raise ValueError(
            f"BigDL needs the global batch ({global_batch} = batch {spec.batch} x"
            f" {spec.world_size} ranks) to be a multiple of executors x cores"
            f" ({shape.workers} x {shape.cores_per_executor}): with threads_per_rank > 1 the"
            " batch per rank must be a multiple of threads_per_rank"
        )
    return global_batch


def node_address(node: int) -> str:
    """Emulated node ``node``'s address: loopback, or its own on an emulated interconnect
    (``dlscale.host.netns``: each node a network namespace, the launcher lists the addresses)."""
    addresses = [a for a in os.environ.get(ENV_NODE_ADDRESSES, "").split(",") if a]
    return addresses[node % len(addresses)] if addresses else HOST


def slurm_master_host() -> str:
    """Under SLURM, where the master and the driver bind: the launcher's master address
    (``DLSCALE_MASTER_ADDR``, this first node's address), else the host name."""
    return os.environ.get("DLSCALE_MASTER_ADDR") or socket.gethostname()


def on_node(node: int) -> list[str]:
    """The prefix that starts a daemon on emulated node ``node`` (nothing without emulation).

    The driver and the master run on node 0, where the launcher put the driver; worker k
    joins node k's namespace (``python -m dlscale.host.netns``), so its executor's traffic to
    the others crosses the emulated links.
    """
    if not os.environ.get(ENV_NODE_NAMESPACES):
        return []
    return node_argv(sys.executable, node=node)


def placement_argv(master: str) -> list[str]:
    """The prefix that runs a daemon bound to its node's address towards ``master``."""
    return [sys.executable, "-m", "dlscale.host.placement", "--towards", master, "--"]


def _daemon_preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Daemon:
    label: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class SparkCluster:
    """Start with ``start()``, stop with ``stop()`` (idempotent); or use as a context manager."""

    spark_home: Path
    root: Path  # everything the cluster writes goes below this directory
    shape: ClusterShape
    env: dict[str, str] = field(default_factory=dict)
    mode: str = "local"  # "local" (emulated nodes) or "slurm" (inside an allocation)
    startup_timeout_s: float = 120.0
    # A study's cluster in an allocation (shared_cluster): the workers' srun step shares the
    # allocation's resources (--overlap) instead of holding them from the other runs' steps.
    shared_step: bool = False
    daemons: list[Daemon] = field(default_factory=list)
    master_url: str | None = None
    startup_s: float | None = None
    secret: str = field(default_factory=lambda: secrets.token_hex(32), repr=False)

    def master_host(self) -> str:
        """Where the master (and the driver) bind: node 0 locally; under SLURM the launcher's
        master address (``DLSCALE_MASTER_ADDR``, this first node's address), else the host name."""
        if self.mode == "local":
            return node_address(0)
        return slurm_master_host()

    def driver_settings(self) -> dict[str, str]:
        """The driver's SparkConf entries for this cluster: authentication on (the secret itself
        is set after the JVM starts: ``SECRET_KEY``) and, under SLURM, the node's address."""
        settings = {"spark.authenticate": "true"}
        if self.mode != "local":
            host = self.master_host()
            settings.update({"spark.driver.host": host, "spark.driver.bindAddress": host})
        return settings

    @property
    def pids(self) -> list[int]:
        return [d.pid for d in self.daemons]

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def worker_dir(self, index: int) -> Path:
        return self.root / f"worker{index}"

    def _spawn(self, label: str, argv: list[str], env: Mapping[str, str]) -> Daemon:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log = self.logs_dir / f"{label}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env, **env},
                preexec_fn=_daemon_preexec,  # noqa: PLW1509 - setpgid + pdeathsig, nothing else
            )
        daemon = Daemon(label, proc, log)
        self.daemons.append(daemon)
        return daemon

    def _daemon_env(self, scratch: Path) -> dict[str, str]:
        scratch.mkdir(parents=True, exist_ok=True)
        return {
            "SPARK_HOME": str(self.spark_home),
            "SPARK_LOCAL_DIRS": str(scratch),
            "SPARK_DAEMON_MEMORY": "512m",
            # Master and workers only pass messages: the client compiler and a serial GC
            # start them sooner and keep them off the cores the training needs. No
            # /tmp/hsperfdata_* file, which a SIGKILLed JVM would leave behind.
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"
            " -Dspark.authenticate=true" + self._marker(),
            "SPARK_LOG_DIR": str(self.logs_dir),
            "SPARK_PID_DIR": str(self.root),
            SECRET_ENV: self.secret,
        }

    def _marker(self) -> str:
        """A JVM property naming the run's directory on every daemon's command line (the
        master has no path of its own there): a leftover daemon can be found by the run's
        path, as tests do. Left out for a path that option parsing would split."""
        root = str(self.root.resolve())
        return "" if any(c.isspace() or c in "\"'\\" for c in root) else f" -Ddlscale.spark.root={root}"

    def _wait_for(self, pattern: str, logs: list[Path], count: int = 1) -> str:
        """Wait until ``pattern`` appears ``count`` times in ``logs``; the last match.

        Every daemon started so far must stay alive meanwhile: one that exits fails the
        start at once, with the end of its log, instead of a wait for the time-out.
        """
        deadline = time.time() + self.startup_timeout_s
        regex = re.compile(pattern)
        while True:
            matches = []
            for path in logs:
                try:
                    matches += regex.findall(path.read_text(errors="replace"))
                except OSError:
                    pass
            if len(matches) >= count:
                return matches[-1]
            for daemon in self.daemons:
                if daemon.proc.poll() is not None:
                    raise SparkClusterError(
                        f"Spark {daemon.label} exited with status {daemon.proc.returncode} while"
                        f" starting; its log ({daemon.log}) ends:\n{_tail(daemon.log)}"
                    )
            if time.time() > deadline:
                raise SparkClusterError(
                    f"Spark cluster not ready after {self.startup_timeout_s:.0f} s (waiting for"
                    f" {pattern!r} x{count}); the log ({logs[0]}) ends:\n{_tail(logs[0])}"
                )
            time.sleep(0.2)

    def start(self) -> str:
        """Start the master and the workers; return the master URL once every worker registered."""
        started = time.time()
        spark_class = str(self.spark_home / "bin" / "spark-class")
        # Under SLURM the master runs where the driver does (the first node); the launcher's
        # DLSCALE_MASTER_ADDR names that node's address where its hostname does not do.
        host = self.master_host()
        master_env = self._daemon_env(self.root / "scratch" / "master")
        if self.mode != "local":
            master_env["SPARK_LOCAL_IP"] = host
        master = self._spawn(
            "master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                host,
                "--port",
                str(free_port()),
                "--webui-port",
                "0",
            ],
            master_env,
        )
        self.master_url = self._wait_for(r"Starting Spark master at (spark://\S+)", [master.log])
        memory = self.shape.executor_memory
        if self.mode == "local":
            for index in range(self.shape.workers):
                env = self._daemon_env(self.root / "scratch" / f"worker{index}")
                env["SPARK_LOCAL_IP"] = node_address(index)
                self._spawn(
                    f"worker{index}",
                    [
                        *on_node(index),
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        node_address(index),
                        "--cores",
                        str(self.shape.cores_per_executor),
                        "--memory",
                        memory,
                        "--work-dir",
                        str(self.worker_dir(index)),
                        "--webui-port",
                        "0",
                        self.master_url,
                    ],
                    env,
                )
        else:
            self._start_slurm_workers(spark_class)
        self._wait_for(r"Registering worker", [master.log], count=self.shape.workers)
        self.startup_s = time.time() - started
        return self.master_url

    def _start_slurm_workers(self, spark_class: str) -> None:
        """One worker per allocated node, by one srun step, sized from the allocation.

        Each worker offers every CPU and (nearly) all the memory SLURM gives its node; the
        executor still takes only the study's cores and executor memory, so the node's other
        cores stay idle as they do for the other frameworks.
        """
        cpus = os.environ.get("SLURM_CPUS_ON_NODE", str(self.shape.cores_per_executor))
        mem_mb = int(os.environ.get("SLURM_MEM_PER_NODE", "0") or 0)
        memory = f"{max(mem_mb - 2048, 1024)}m" if mem_mb else self.shape.executor_memory
        work = self.root / "worker-slurm"  # executors get unique app-*/<id> folders below
        self._spawn(
            "workers",
            [
                "srun",
                f"--nodes={self.shape.workers}",
                f"--ntasks={self.shape.workers}",
                "--ntasks-per-node=1",
                "--kill-on-bad-exit=1",
                *(["--overlap"] if self.shared_step else []),
                # Each worker binds the address its node reaches the master from.
                *placement_argv(self.master_host()),
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                ADDRESS_TOKEN,
                "--cores",
                cpus,
                "--memory",
                memory,
                "--work-dir",
                str(work),
                "--webui-port",
                "0",
                str(self.master_url),
            ],
            self._daemon_env(self.root / "scratch" / "workers"),
        )

    def executor_pids(self) -> dict[int, int]:
        """Worker index -> PID of the executor JVM that worker runs for us (local mode only).

        A standalone worker forks its executors; they are found among its descendants by
        their main class. Under SLURM the workers run on other nodes, out of sight: ``{}``
        (the driver watches them through Spark instead: ``executors.RemoteExecutors``).
        """
        if self.mode != "local":
            return {}
        workers = {
            int(d.label.removeprefix("worker")): d.pid
            for d in self.daemons
            if d.label.startswith("worker") and d.label != "workers"
        }
        return find_executors(workers)

    def dead_workers(self) -> list[tuple[int | None, str]]:
        """``(node, what happened)`` for every worker daemon that has exited.

        Locally each node's worker is a daemon of its own. Under SLURM all the workers are
        one ``srun`` step (``--kill-on-bad-exit``: one worker's end ends them all), and srun
        names the task that ended first (``srun: error: n2: task 1: Killed``); task k runs on
        the allocation's k-th node (one task per node). Where srun said nothing the node is
        None.
        """
        dead: list[tuple[int | None, str]] = []
        for daemon in self.daemons:
            if not daemon.label.startswith("worker") or daemon.proc.poll() is None:
                continue
            status = daemon.proc.returncode
            if daemon.label != "workers":
                node = int(daemon.label.removeprefix("worker"))
                dead.append((node, f"the Spark worker of node {node}, pid {daemon.pid}, exited ({status})"))
                continue
            try:
                text = daemon.log.read_text(errors="replace")
            except OSError:
                text = ""
            said = first_srun_task_error(text)
            if said is not None:
                dead.append(
                    (said.task, f"the Spark worker of node {said.task}, {said.node}, ended: {said.what}")
                )
            else:
                dead.append(
                    (None, f"the srun step of the Spark workers, pid {daemon.pid}, exited ({status})")
                )
        return dead

    def stop(self) -> None:
        """Stop every daemon by PID (its process group): SIGTERM, a short grace, SIGKILL.

        Then keep the executors' logs and delete the worker and scratch directories.
        Safe to call twice, and after a failed start.
        """
        for daemon in reversed(self.daemons):  # workers first, the master last
            if daemon.proc.poll() is None:
                _killpg(daemon.pid, signal.SIGTERM)
        deadline = time.time() + STOP_GRACE_S
        for daemon in self.daemons:
            try:
                daemon.proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
            _killpg(daemon.pid, signal.SIGKILL)  # leftovers of the group (executors) too
            if daemon.proc.poll() is None:
                daemon.proc.wait()
        self._keep_executor_logs()
        for path in [*self.root.glob("worker*"), self.root / "scratch"]:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)

    def _keep_executor_logs(self) -> None:
        for stream in sorted(self.root.glob("worker*/app-*/*/std*")):
            worker, executor = stream.parts[-4], stream.parts[-2]
            target = self.logs_dir / f"{worker}-executor{executor}.{stream.name}.log"
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(stream, target)

    def __enter__(self) -> SparkCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_executors(workers: Mapping[int, int], marker: str | None = None) -> dict[int, int]:
    """Worker index -> the first executor JVM among that worker's descendants (``/proc``),
    one whose command line holds ``marker`` where given (a run's own on a shared cluster)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found = {}
    for index, worker in workers.items():
        for pid in sorted(parents):
            ancestor, hops = parents.get(pid), 0
            while ancestor not in (None, 0, 1, worker) and hops < 8:
                ancestor, hops = parents.get(ancestor), hops + 1
            if ancestor == worker and _is_executor(pid, marker):
                found[index] = pid
                break
    return found


def _is_executor(pid: int, marker: str | None = None) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        return b"CoarseGrainedExecutorBackend" in cmdline and (marker is None or marker.encode() in cmdline)
    except OSError:
        return False


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
