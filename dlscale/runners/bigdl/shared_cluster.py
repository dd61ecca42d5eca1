"""One Spark standalone cluster per study and cluster shape, shared by that study's BigDL runs.

With ``cluster: per_study`` (and only where sharing is safe: ``choose``), the first BigDL
run of a cluster key starts a supervisor (``dlscale.runners.bigdl.supervisor``, detached in
a session of its own) that starts the master and workers once and writes a lease
(``<clusters>/<key>/lease.json``: master URL, daemon PIDs with their start times, the
secret in a 0600 file beside it). Every later run of that key finds the lease and connects
as its own Spark application, with its own executors, so runs stay isolated and a run's
start-up is its application's. The supervisor stops the daemons when the study's process
is gone, when no run has held the cluster for ``IDLE_S``, or on SIGTERM/SIGINT; the
Snakefile's onsuccess/onerror stop every lease too (``stop_all``).

Two ``flock`` locks keep runs and the supervisor apart: ``<key>/lock`` (exclusive) while a
run looks up, replaces or creates the lease, and while the supervisor decides it is idle;
``<instance>/busy.lock``, held shared by every run from connecting to the end of its
application, so that the supervisor can tell idle from busy. A lease whose supervisor or
daemons are gone (a PID is compared with its start time, so a reused PID does not pass) is
replaced by a new cluster.

Inside a SLURM allocation (opt-in: ``cluster: per_study`` and runs grouped into one
allocation, ``--groups``) the owner is the Snakemake that runs in the allocation (the job
group's: ``owner_env``), the clusters live in a folder of that allocation's own, and the
supervisor starts the master on the allocation's first node and the workers by one ``srun
--overlap`` step (``SparkCluster.shared_step``), so that the other runs' steps in the
allocation are not held back by it; the job's end takes the step and, through the owner's
end, the supervisor down.

Standard library only (the Snakefile imports ``stop_all`` in the workflow's venv).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from dlscale.host.netns import ENV_NODE_NAMESPACES
from dlscale.runners.bigdl.spark import (
    STOP_GRACE_S,
    ClusterShape,
    SparkClusterError,
    find_executors,
    node_address,
    slurm_master_host,
)

#: Where the workflow keeps its studies' clusters (an absolute path), and the process that
#: owns them (Snakemake's PID): set by the Snakefile, inherited by every job.
ENV_CLUSTERS = "DLSCALE_SPARK_CLUSTERS"
ENV_OWNER_PID = "DLSCALE_STUDY_PID"
#: The SLURM allocation (its job ID) the owner runs in, where it runs in one: only runs of
#: that allocation share its clusters (``owner_env``, ``choose``).
ENV_OWNER_JOB = "DLSCALE_STUDY_JOB"
#: An idle cluster's life: longer than the gap between two BigDL runs of a study, where the
#: other frameworks' runs and the tuning race come between them in Snakemake's order (the
#: demo's 42 runs take ~7 minutes); the owner's exit, not this, ends a cluster normally.
#: Idle daemons only exchange heartbeats (a master and a worker per node, 512m heaps).
IDLE_S = 600.0
#: How often the supervisor looks at its owner, its daemons and the busy lock.
POLL_S = 1.0
#: The launcher's thread variables, inherited by the daemons and so by the executors: part
#: of the key, as the engine's own variables are.
INHERITED_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY")
LEASE = "lease.json"


class LeaseError(ValueError):
    """A lease file that is not one (torn, hand-edited, from another version)."""


def cluster_key(shape: ClusterShape, engine_env: Mapping[str, str], spark_home: str, owner: str = "") -> str:
    """What decides whether two runs can share a cluster: its shape, the environment its
    daemons pass to the executors, the Spark it runs, and its owner (``PID:start``: another
    invocation of the study, even one run with ``--nolock`` beside this one, has its own).
    A short hash: a folder name."""
    data = {
        "shape": asdict(shape),
        "env": dict(sorted(engine_env.items())),
        "spark_home": spark_home,
        "owner": owner,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def owner_env(environ: Mapping[str, str], pid: int, clusters: str) -> dict[str, str]:
    """The owner variables a Snakemake sets for its jobs (the Snakefile, at its top).

    Unset, this process owns the clusters, kept in ``clusters``. Inside a SLURM allocation
    that is not the owner's (a job group's Snakemake, which inherits the submitting one's
    variables with ``--export=ALL``), this process owns them instead, in a folder of the
    allocation's own: the submitting process runs on another host, and the allocation's
    nodes are its runs' alone. Otherwise (a job's own Snakemake, which re-parses this file)
    the values already set stand.
    """
    job = environ.get("SLURM_JOB_ID", "")
    if job and environ.get(ENV_OWNER_JOB, "") != job:
        return {
            ENV_CLUSTERS: os.path.join(clusters, f"slurm-{job}"),
            ENV_OWNER_PID: str(pid),
            ENV_OWNER_JOB: job,
        }
    return {
        ENV_CLUSTERS: environ.get(ENV_CLUSTERS) or clusters,
        ENV_OWNER_PID: environ.get(ENV_OWNER_PID) or str(pid),
    }


def choose(asked: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """``(per_run | per_study, why)``: per_study only where a shared cluster is safe.

    The local mode, or a SLURM allocation whose owner runs in it (a job group's Snakemake:
    ``owner_env``; a lone run's allocation is its own), no emulated network (each run has
    its own namespaces and addresses), a workflow that said where its clusters live and
    which process owns them, that process alive, and the run on its network.
    """
    if asked != "per_study":
        return "per_run", "asked"
    mode = environ.get("DLSCALE_SPARK_MODE", "local")
    job = environ.get("SLURM_JOB_ID", "")
    if mode == "slurm" and not (job and environ.get(ENV_OWNER_JOB) == job):
        return "per_run", (
            "per_study falls back to per_run: not the local mode, and no process of this SLURM"
            " allocation owns its clusters (runs share one only in an allocation of their own"
            " group: --groups)"
        )
    if mode not in ("local", "slurm"):
        return "per_run", "per_study falls back to per_run: not the local mode"
    if environ.get(ENV_NODE_NAMESPACES):
        return "per_run", "per_study falls back to per_run: the run has an emulated network"
    if not environ.get(ENV_CLUSTERS) or not environ.get(ENV_OWNER_PID, "").isdigit():
        return "per_run", f"per_study falls back to per_run: {ENV_CLUSTERS}/{ENV_OWNER_PID} not set"
    owner = int(environ[ENV_OWNER_PID])
    if start_time(owner) is None:
        return "per_run", f"per_study falls back to per_run: owner pid {owner} is gone"
    if not same_network(owner):
        return "per_run", "per_study falls back to per_run: the run is in a network namespace of its own"
    return "per_study", "asked"


def same_network(pid: int) -> bool:
    """Whether this process shares ``pid``'s network namespace: a shared cluster binds the
    loopback of the study's namespace, which a run isolated in its own cannot reach (the
    launcher leaves per_study runs on the study's: ``launcher.host_loopback_reason``)."""
    try:
        return os.readlink("/proc/self/ns/net") == os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return False


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22), None if it
    does not run (a zombie does not): with its PID, it names one process, never a reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


@dataclass(frozen=True)
class Lease:
    """A live cluster, as its supervisor wrote it. ``processes``: name -> (pid, start time)
    for the supervisor, the master and every worker (``worker<k>``)."""

    key: str
    master_url: str
    root: str  # the cluster's own folder: daemons' logs, worker dirs, busy.lock
    secret_file: str
    processes: dict[str, tuple[int, int]]
    owner: tuple[int, int]
    startup_s: float

    @property
    def supervisor_pid(self) -> int:
        return self.processes["supervisor"][0]

    @property
    def master_pid(self) -> int:
        return self.processes["master"][0]

    def workers(self) -> dict[int, int]:
        """Worker index -> PID (local workers; under SLURM they are one srun step, ``workers``)."""
        return {
            int(name.removeprefix("worker")): pid
            for name, (pid, _) in self.processes.items()
            if name.startswith("worker") and name.removeprefix("worker").isdigit()
        }

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def parse_lease(text: str) -> Lease:
    """A lease from its JSON; ``LeaseError`` with what is wrong otherwise."""
    try:
        data = json.loads(text)
        processes = {str(k): (int(v[0]), int(v[1])) for k, v in data["processes"].items()}
        lease = Lease(
            key=str(data["key"]),
            master_url=str(data["master_url"]),
            root=str(data["root"]),
            secret_file=str(data["secret_file"]),
            processes=processes,
            owner=(int(data["owner"][0]), int(data["owner"][1])),
            startup_s=float(data["startup_s"]),
        )
    except (ValueError, KeyError, TypeError, IndexError) as err:
        raise LeaseError(f"not a cluster lease ({type(err).__name__}: {err})") from None
    if (
        not lease.master_url.startswith("spark://")
        or "supervisor" not in processes
        or "master" not in processes
    ):
        raise LeaseError("not a cluster lease (no spark:// master URL, supervisor or master)")
    return lease


def stale_reason(lease: Lease, started: Callable[[int], int | None] = start_time) -> str | None:
    """Why ``lease`` cannot be used (a process of it is gone or is another process now), or None."""
    for name, (pid, start) in sorted(lease.processes.items()):
        if started(pid) != start:
            return f"its {name} (pid {pid}) is gone"
    return None


def read_lease(path: Path) -> Lease | None:
    try:
        return parse_lease(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, LeaseError) as err:
        print(f"[bigdl] ignoring the lease {path}: {err}", file=sys.stderr, flush=True)
        return None


def write_secret(path: Path, secret: str) -> None:
    """The secret in a file only its owner reads, written whole (temporary file, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret)
    os.replace(tmp, path)


def lock(path: Path, mode: int) -> IO[str]:
    """An open file holding an ``flock`` (``fcntl.LOCK_EX``/``LOCK_SH``, waiting for it)."""
    handle = open(path, "a")  # noqa: SIM115 - held until released by its caller
    fcntl.flock(handle, mode)
    return handle


def retire(lease: Lease, lease_path: Path, grace_s: float = STOP_GRACE_S + 4.0) -> None:
    """Stop a lease's cluster: SIGTERM to its supervisor (only if it is still the process the
    lease names), a wait, then SIGKILL of every daemon's process group still there; remove
    the lease. What ``stop_all`` does for each lease, and a run for a stale one."""
    pid, start = lease.processes["supervisor"]
    if start_time(pid) == start:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while start_time(pid) == start and time.monotonic() < deadline:
            time.sleep(0.2)
    for name, (daemon, daemon_start) in lease.processes.items():
        if name != "supervisor" and start_time(daemon) == daemon_start:
            try:
                os.killpg(daemon, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    try:
        if read_lease(lease_path) == lease:
            lease_path.unlink()
    except OSError:
        pass


def stop_all(clusters: Path) -> list[int]:
    """Stop every cluster with a lease under ``clusters`` (the Snakefile's onsuccess/onerror);
    the supervisor PIDs that were signalled."""
    stopped = []
    for path in sorted(Path(clusters).glob(f"*/{LEASE}")):
        lease = read_lease(path)
        if lease is not None:
            retire(lease, path)
            stopped.append(lease.supervisor_pid)
    return stopped


def cpu_s(pids: list[int]) -> float:
    """CPU seconds of ``pids`` and of their reaped children (/proc/PID/stat utime + stime +
    cutime + cstime): the supervisor and the daemons, and a worker's executors once ended."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(value) for value in fields[11:15])
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


class SharedCluster:
    """The run's side of a shared cluster: what ``train._optimize`` uses of a ``SparkCluster``.

    ``start()`` connects to the key's live lease or starts a supervisor for a new one;
    ``stop()`` ends only this run's part: its executors (already told to go by the
    SparkContext's stop), their logs kept into the run's folder, its application's folder
    in the workers' directories deleted, its hold on the cluster released.
    """

    def __init__(
        self,
        clusters: Path,
        key: str,
        spark_home: Path,
        root: Path,
        shape: ClusterShape,
        owner_pid: int,
        startup_timeout_s: float = 120.0,
        mode: str | None = None,
    ) -> None:
        # "local" or "slurm" (inside an allocation), as the launcher said: DLSCALE_SPARK_MODE.
        self.mode = mode or os.environ.get("DLSCALE_SPARK_MODE", "local")
        self.dir = Path(clusters) / key
        self.key = key
        self.spark_home = spark_home
        self.root = root  # the run's own folder: the driver's scratch and logs
        self.shape = shape
        self.owner_pid = owner_pid
        self.startup_timeout_s = startup_timeout_s
        self.lease: Lease | None = None
        self.started_it = False
        self.master_url: str | None = None
        self.secret = ""
        self.startup_s: float | None = None
        self.outside_cpu_s = 0.0  # the cluster's CPU for this run, which the launcher does not see
        self._busy: IO[str] | None = None
        self._cpu_before = 0.0
        self._executors: dict[int, int] = {}

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> list[int]:
        return [pid for pid, _ in self.lease.processes.values()] if self.lease else []

    def master_host(self) -> str:
        return node_address(0) if self.mode == "local" else slurm_master_host()

    def driver_settings(self) -> dict[str, str]:
        """As a per-run cluster's: authentication, and under SLURM the node's address."""
        settings = {"spark.authenticate": "true"}
        if self.mode != "local":
            host = self.master_host()
            settings.update({"spark.driver.host": host, "spark.driver.bindAddress": host})
        return settings

    def describe(self) -> dict[str, Any]:
        """What bigdl-settings.json and the log say about the cluster the run used."""
        if self.lease is None:
            return {"cluster": "per_study", "key": self.key, "connected": False}
        return {
            "cluster": "per_study",
            "key": self.key,
            "how": "started" if self.started_it else "reused",
            "master_url": self.lease.master_url,
            "master_pid": self.lease.master_pid,
            "supervisor_pid": self.lease.supervisor_pid,
            "cluster_root": self.lease.root,
        }

    def start(self) -> str:
        """Connect to the key's live cluster, or start one; the master URL."""
        started = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        lease_path = self.dir / LEASE
        with lock(self.dir / "lock", fcntl.LOCK_EX) as _held:
            lease = read_lease(lease_path)
            reason = stale_reason(lease) if lease is not None else None
            if lease is not None and reason is not None:
                print(
                    f"[bigdl] the shared Spark cluster {lease.root} is stale ({reason}): replacing it",
                    flush=True,
                )
                retire(lease, lease_path)
                lease = None
            if lease is None:
                lease = self._start_supervisor(lease_path)
                self.started_it = True
            self._busy = lock(Path(lease.root) / "busy.lock", fcntl.LOCK_SH)
        self.lease = lease
        self.secret = Path(lease.secret_file).read_text().strip()
        self.master_url = lease.master_url
        # The cluster's CPU from here on is this run's (its executors, the daemons serving
        # it, and the start-up of a cluster it started), as a per-run cluster's is.
        self._cpu_before = 0.0 if self.started_it else cpu_s(self.pids)
        self.startup_s = time.monotonic() - started
        print(
            f"[bigdl] shared Spark cluster {'started' if self.started_it else 'reused'}: master"
            f" {lease.master_url} (pid {lease.master_pid}), supervisor pid {lease.supervisor_pid},"
            f" {self.startup_s:.1f} s",
            flush=True,
        )
        return lease.master_url

    def _start_supervisor(self, lease_path: Path) -> Lease:
        instance = self.dir / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        instance.mkdir(parents=True)
        env = {**os.environ, "TMPDIR": str(instance)}
        env.pop("SPARK_LOCAL_DIRS", None)  # the run's driver scratch, not the daemons'
        owner_start = start_time(self.owner_pid)
        log = instance / "supervisor.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dlscale.runners.bigdl.supervisor",
                    "--lease",
                    str(lease_path),
                    "--root",
                    str(instance),
                    "--key",
                    self.key,
                    "--spark-home",
                    str(self.spark_home),
                    "--shape",
                    json.dumps(asdict(self.shape)),
                    "--owner",
                    f"{self.owner_pid}:{owner_start}",
                    "--startup-timeout-s",
                    str(self.startup_timeout_s),
                    "--mode",
                    self.mode,
                ],  # fmt: skip
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=instance,
                start_new_session=True,  # outlives this run; its own group, not the run's
            )
        deadline = time.monotonic() + self.startup_timeout_s + 2 * STOP_GRACE_S
        while True:
            lease = read_lease(lease_path) if lease_path.exists() else None
            if lease is not None and lease.supervisor_pid == proc.pid:
                return lease
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    proc.terminate()  # it stops its daemons on SIGTERM
                    proc.wait(timeout=3 * STOP_GRACE_S)
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise SparkClusterError(f"the shared Spark cluster did not start; {log} ends:\n{tail}")
            time.sleep(0.2)

    def executor_pids(self) -> dict[int, int]:
        """Worker index -> this run's executor: the workers' descendants whose command line
        names this run's folder (the driver puts it there: java.io.tmpdir). Under SLURM they
        run on other nodes, out of sight: ``{}`` (the driver watches them through Spark)."""
        if self.lease is None or self.mode != "local":
            return {}
        found = find_executors(self.lease.workers(), marker=str(self.root))
        self._executors.update(found)
        return found

    def dead_workers(self) -> list[tuple[int | None, str]]:
        if self.lease is None:
            return []
        dead: list[tuple[int | None, str]] = []
        for name, (pid, start) in sorted(self.lease.processes.items()):
            if not name.startswith("worker") or start_time(pid) == start:
                continue
            index = name.removeprefix("worker")
            if index.isdigit():
                dead.append((int(index), f"the Spark worker of node {index}, pid {pid}, exited"))
            else:  # SLURM: every worker is one srun step, which its supervisor ran
                dead.append((None, f"the srun step of the shared Spark workers, pid {pid}, exited"))
        return dead

    def stop(self) -> None:
        """End this run's part of the cluster (the SparkContext's stop ended the application):
        wait for its executors, keep their logs, delete its application folders, release the
        cluster. The daemons stay for the next run."""
        if self.lease is None:
            return
        deadline = time.monotonic() + STOP_GRACE_S
        while any(start_time(pid) for pid in self._executors.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self._executors.values():  # still there: the worker did not get to it
            if start_time(pid) is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.2)  # the worker reaps it: its CPU lands in the worker's children's
        self.outside_cpu_s = max(0.0, cpu_s(self.pids) - self._cpu_before)
        for app in self._own_applications():
            for stream in sorted(app.glob("*/std*")):
                target = self.logs_dir / f"{app.parent.name}-executor{stream.parent.name}.{stream.name}.log"
                try:
                    self.logs_dir.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(stream, target)
                except OSError as err:  # the application's folder goes all the same
                    print(f"[bigdl] could not keep {stream}: {err}", file=sys.stderr, flush=True)
            shutil.rmtree(app, ignore_errors=True)
        shutil.rmtree(self.root / "scratch", ignore_errors=True)
        if self._busy is not None:
            self._busy.close()  # releases the shared lock: the supervisor may count idle time
            self._busy = None

    def _own_applications(self) -> list[Path]:
        """This run's application folders in the workers' directories: the executor's stderr
        starts with its launch command, which names the run's folder."""
        assert self.lease is not None
        marker = str(self.root).encode()
        own = []
        for app in sorted(Path(self.lease.root).glob("worker*/app-*")):
            for stderr in app.glob("*/stderr"):
                try:
                    with open(stderr, "rb") as head:
                        if marker in head.read(65536):
                            own.append(app)
                            break
                except OSError:
                    continue
        return own
