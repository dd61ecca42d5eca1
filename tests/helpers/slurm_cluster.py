"""A real SLURM cluster on this host, for the tests: munge, slurmctld and n slurmd.

Debian's SLURM is built with multiple-slurmd support, so each emulated node is its own
``slurmd -N nK`` with its own port, spool, pid and log (``%n`` in slurm.conf). Everything
lives under one private directory; ports are picked free on loopback; every daemon runs in
the foreground as our child and is stopped by its PID (jobs first, then their steps).
Client commands get the config path from wrapper scripts first on PATH, because the
Snakemake SLURM plugin strips every ``SLURM_*`` variable (SLURM_CONF included) from jobs.

The cluster is wired like a real one (``dlscale.host.netns.bridged``): every node runs in a
network namespace of its own with one interface, ``eth0`` at 10.78.0.<k>, joined to the
others by veth pairs on a bridge in a hub namespace, where the controller (slurmctld,
munged; 10.78.0.254 on the bridge) and the clients run. Each node's link is shaped with
``tc tbf`` when the cluster has a ``network`` preset (``set_network`` changes it between
runs). Every daemon also runs in a mount and a UTS namespace of its own: its hostname is its
node name, and a hosts file of the cluster's names (``ctl``, ``n1``...) is bind-mounted on
/etc/hosts, as DNS would answer on a real cluster. So jobs find their peers by node name or
by the node's address, never over a shared loopback, and no job script sets anything
test-only. SLURM's daemons bind every interface, but none of these namespaces has a link to
the host's: nothing the cluster or its jobs listen on is reachable from outside. Clients
run in the hub: ``netns_prefix()`` (``bin/on-node ctl``), e.g. by hand
``DIR/bin/on-node ctl env PATH=DIR/bin:$PATH sinfo``.

Usable from pytest (the suite shares one per session: tests/helpers/slurm_fixtures.py, ``slurm``;
``reset`` puts it back as it started between tests), as a context manager, and by hand:
``python tests/helpers/slurm_cluster.py up DIR`` / ``down DIR``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # not helpers.paths: also run by hand, as a script
if str(REPO) not in sys.path:  # by hand: python tests/helpers/slurm_cluster.py up DIR
    sys.path.insert(0, str(REPO))
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo", "sacct", "salloc")
SUBNET = "10.78.0"  # node k at .k, the controller at .254 (the namespaces are the cluster's own)
CONTROLLER = "ctl"


#: The SLURM variables Snakemake's job-step executor keeps when it runs a job's shell
#: (snakemake_executor_plugin_slurm_jobstep: the job's identity only).
JOBSTEP_KEEPS = (
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP", "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_DIR",
    "SLURM_SUBMIT_HOST",
)  # fmt: skip


#: The one test-only flag the workflow tests give the SLURM profile: the plugin's first job
#: status check after 2 s instead of the profile's 10, then 10 s more each time no job has
#: ended. The waits are then the study's, not the poller's (each run waited up to 30 s for
#: it); the cluster's MinJobAge (60 s) stays above 3 x 2 s, as the profile asks.
FAST_STATUS_CHECKS = ("--slurm-init-seconds-before-status-checks", "2")


def launch_job(job: Path, python: Path | str, spec: dict, data: Path | str, events: Path) -> Path:
    """A batch script that runs one run as the training rule does: the launcher alone, with
    nothing in its environment that a user's job would not have, and without what the
    workflow's job step takes away (every ``SLURM_*``, ``SRUN_*`` and ``SBATCH_*`` variable
    but the job's identity), so that a test sees what a run sees under ``profiles/slurm``."""
    keep = "|".join(JOBSTEP_KEEPS)
    job.write_text(
        "#!/bin/bash\n"
        "for var in $(compgen -e); do\n"
        f'  case "$var" in {keep}) ;; SLURM_*|SRUN_*|SBATCH_*) unset "$var" ;; esac\n'
        "done\n"
        f"cd {REPO} && exec {python} -m dlscale.launch"
        f" --spec-json '{json.dumps(spec)}' --data {data} --events {events} --python {python}\n"
    )
    job.chmod(0o755)
    return job


def daemon_port() -> int:
    """A port for a SLURM daemon, from the ephemeral range (the OS picks it): the launcher
    draws the ranks' ports below that range (dlscale.base.sysutil.free_ports), so a daemon
    of the test cluster never holds a port a job's rank is handed, as on a real cluster's
    6817/6818."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def descendants(pids: list[int]) -> list[int]:
    """Every live process below ``pids`` (slurmstepd and job processes), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    stack = list(pids)
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False


class SlurmCluster:
    """``nodes`` emulated nodes of ``cpus`` CPUs and ``mem_mb`` MB each, in ``base``."""

    def __init__(
        self,
        base: Path | None = None,
        nodes: int = 4,
        cpus: int = 2,
        mem_mb: int = 4000,
        network: str | None = None,
    ):
        self.base = Path(base or tempfile.mkdtemp(prefix="dlslurm-", dir="/tmp"))
        self.nodes, self.cpus, self.mem_mb = nodes, cpus, mem_mb
        self.network = network  # a dlscale.networks preset name for every node's link, or None
        self.default_network = network  # what reset() restores
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.conf = self.base / "slurm.conf"
        self.bin = self.base / "bin"
        self.hosts = self.base / "etc" / "hosts"
        self.partition = "test"
        # Not netns.PREFIX: sweep_stale() must never take a cluster whose creator has exited
        # (``up`` by hand returns at once).
        self.netns = f"dlslurm-{os.getpid()}-{self.base.name[-6:]}"
        self.net = None  # dlscale.host.netns.RunNetwork once made

    @property
    def node_names(self) -> list[str]:
        return [f"n{k}" for k in range(1, self.nodes + 1)]

    def address(self, node: str) -> str:
        """The address a node name (or ``ctl``) resolves to on the cluster."""
        return f"{SUBNET}.254" if node == CONTROLLER else f"{SUBNET}.{int(node.removeprefix('n'))}"

    def namespace(self, node: str) -> str:
        return f"{self.netns}-hub" if node == CONTROLLER else f"{self.netns}-{node}"

    def netns_prefix(self, node: str = CONTROLLER) -> list[str]:
        """Prefix a command with this to run it on ``node`` (default: the controller, where
        clients run): its network namespace, hostname and hosts file."""
        return [str(self.bin / "on-node"), node]

    def _make_network(self) -> None:
        from dlscale import networks
        from dlscale.host import netns

        preset = networks.PRESETS[self.network] if self.network else None
        nodes = {self.namespace(n): self.address(n) for n in self.node_names}
        self.net = netns.bridged(
            self.namespace(CONTROLLER), nodes, preset, hub_address=self.address(CONTROLLER)
        )

    def set_network(self, network: str | None) -> None:
        """Shape every node's link to preset ``network`` (None: unshaped), between runs."""
        from dlscale import networks
        from dlscale.host import netns

        preset = networks.PRESETS[network] if network else None
        for node in self.node_names:
            netns.set_bandwidth(self.namespace(node), preset)
        self.network = network

    def namespaces(self) -> list[str]:
        return [self.namespace(CONTROLLER), *(self.namespace(n) for n in self.node_names)]

    def interfaces(self, node: str = CONTROLLER) -> dict[str, str]:
        """Interface name -> kind (``loopback``, ``bridge``, ``veth``, ...) on ``node``."""
        out = subprocess.run(
            ["ip", "-j", "-d", "-n", self.namespace(node), "link", "show"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        return {
            link["ifname"]: "loopback"
            if link.get("link_type") == "loopback"
            else link.get("linkinfo", {}).get("info_kind", "other")
            for link in json.loads(out or "[]")
        }

    # ----------------------------------------------------------------- set-up
    def _write_config(self) -> None:
        for sub in ("state", "spool", "run", "log", "tmp", "munge", "bin", "etc"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        for k in range(1, self.nodes + 1):
            (self.base / "tmp" / f"n{k}").mkdir(exist_ok=True)
        base = self.base
        lines = [
            "ClusterName=dlscale-test",
            f"SlurmctldHost={CONTROLLER}({self.address(CONTROLLER)})",
            f"SlurmctldPort={daemon_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={base}/munge/munge.socket",
            f"StateSaveLocation={base}/state",
            f"SlurmdSpoolDir={base}/spool/%n",
            f"SlurmctldPidFile={base}/run/slurmctld.pid",
            f"SlurmdPidFile={base}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={base}/log/slurmctld.log",
            f"SlurmdLogFile={base}/log/slurmd-%n.log",
            f"TmpFS={base}/tmp/%n",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SlurmdParameters=config_overrides",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=60",  # >= 3 x the plugin's first status check (profile: 10 s)
            "KillWait=10",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
        ]
        for k in range(1, self.nodes + 1):
            lines.append(
                f"NodeName=n{k} NodeHostname=n{k} NodeAddr={self.address(f'n{k}')} Port={daemon_port()}"
                f" CPUs={self.cpus} RealMemory={self.mem_mb} State=UNKNOWN"
            )
        lines.append(
            f"PartitionName={self.partition} Nodes=n[1-{self.nodes}] Default=YES MaxTime=120 State=UP"
        )
        self.conf.write_text("\n".join(lines) + "\n")
        names = [CONTROLLER, *self.node_names]
        self.hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{self.address(n)} {n}\n" for n in names))
        cases = "".join(f"  {n}) ns={self.namespace(n)} ;;\n" for n in names)
        on_node = self.bin / "on-node"
        on_node.write_text(
            "#!/bin/sh\n"
            "# on-node NODE COMMAND...: run COMMAND on a node of the dlscale SLURM test cluster\n"
            "# (its network namespace; its own hostname; the cluster's hosts file on /etc/hosts).\n"
            "node=$1; shift\ncase $node in\n"
            + cases
            + '  *) echo "on-node: no node $node" >&2; exit 2 ;;\nesac\n'
            # nsenter enters the network namespace only; `ip netns exec` would also remount
            # /sys, hiding the cgroup file system that slurmd insists on finding.
            f"exec nsenter --net=/run/netns/$ns unshare --mount --uts --propagation slave sh -c"
            f' \'mount --bind {self.hosts} /etc/hosts && hostname "$0" && exec "$@"\' "$node" "$@"\n'
        )
        on_node.chmod(0o755)
        for client in CLIENTS:
            wrapper = self.bin / client
            record = (
                f'printf "%s\\n" "$*" >> "{self.base}/log/{client}.calls"\n' if client == "sbatch" else ""
            )
            wrapper.write_text(f'#!/bin/sh\n{record}SLURM_CONF="{self.conf}" exec /usr/bin/{client} "$@"\n')
            wrapper.chmod(0o755)
        # sbatch --wait polls the job at 2, 10 and 42 s (then every 32 s): a 12-s job held a
        # test for 42 s. This waits as it does, polled every 0.25 s: until the job has left
        # the queue (not pending, running or completing), exit status the job's.
        waiter = self.bin / "sbatch-wait"
        waiter.write_text(
            "#!/bin/sh\n"
            "# sbatch-wait SBATCH-ARGS...: sbatch --wait, polled every 0.25 s\n"
            'id=$(sbatch --parsable "$@") || exit $?\nid=${id%%;*}\n'
            # A failing squeue (the controller busy) is asked again, a few times.
            "fails=0\nwhile :; do\n"
            '  queued=$(squeue -h -j "$id" -o %i 2>/dev/null); rc=$?\n'
            "  if [ $rc -ne 0 ]; then fails=$((fails + 1)); [ $fails -lt 40 ] || break\n"
            '  elif [ -z "$queued" ]; then break; fi\n'
            "  sleep 0.25\ndone\n"
            'code=$(scontrol -o show job "$id" 2>/dev/null | sed -n "s/.* ExitCode=\\([0-9]*\\):\\([0-9]*\\).*/\\1 \\2/p")\n'
            "set -- $code\n"
            'if [ -z "$1" ]; then echo "sbatch-wait: job $id: no exit code" >&2; exit 1; fi\n'
            'if [ "$1" = 0 ] && [ "${2:-0}" != 0 ]; then exit $((128 + $2)); fi\n'
            'exit "$1"\n'
        )
        waiter.chmod(0o755)

    def sbatch_wait(self, job: Path, log: Path, nodes: int, mem_mb: int, minutes: int) -> list[str]:
        """``sbatch --wait`` of ``job`` (as ``bin/sbatch-wait``, polled sooner) on ``nodes``
        nodes, one 1-core task each, run from the controller's namespace (with ``env()``):
        the allocation a training job asks for."""
        return [
            *self.netns_prefix(), str(self.bin / "sbatch-wait"), "-N", str(nodes), "-n", str(nodes),
            "--cpus-per-task=1", f"--mem={mem_mb}", "-t", str(minutes), "-o", str(log), str(job),
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        """The environment that talks to this cluster (wrappers first on PATH)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["PATH"] = f"{self.bin}:{env.get('PATH', '')}"
        env["SLURM_CONF"] = str(self.conf)
        return env

    def _spawn(self, name: str, cmd: list[str], node: str = CONTROLLER) -> None:
        log = open(self.base / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(
            [*self.netns_prefix(node), *cmd],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,
        )
        log.close()

    def _wait(self, what: str, check, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode} while waiting for {what}: {self.logs()}"
                    )
            if check():
                return
            time.sleep(0.3)
        raise TimeoutError(f"SLURM test cluster: {what} not ready after {timeout:.0f} s: {self.logs()}")

    def logs(self) -> str:
        tails = []
        for path in sorted((self.base / "log").glob("*")):
            text = path.read_text(errors="replace").strip().splitlines()[-5:]
            tails.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(tails)

    def start(self, timeout: float = 90) -> SlurmCluster:
        started = time.time()
        install = subprocess.run(
            ["bash", str(REPO / "scripts" / "install-slurm.sh")], capture_output=True, text=True, timeout=1200
        )
        if install.returncode != 0:
            raise RuntimeError(f"installing SLURM failed: {install.stderr[-2000:]}")
        self._write_config()
        self._make_network()
        munge = self.base / "munge"
        key = munge / "munge.key"
        if not key.exists():
            subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True, timeout=30)
            key.chmod(0o400)
        munge.chmod(0o700)
        self._spawn(
            "munged",
            [
                "munged", "--foreground", "--force", f"--key-file={key}", f"--socket={munge}/munge.socket",
                f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/munged.seed",
            ],
        )  # fmt: skip
        self._wait("munge", lambda: (munge / "munge.socket").exists(), 30)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self._run(["scontrol", "ping"]).stdout.count("UP") > 0, timeout)
        for k in range(1, self.nodes + 1):
            self._spawn(f"slurmd-n{k}", ["slurmd", "-D", "-N", f"n{k}", "-f", str(self.conf)], node=f"n{k}")
        self._wait("all nodes idle", self._all_idle, timeout)
        self.startup_s = time.time() - started
        state = {n: p.pid for n, p in self.procs.items()}
        (self.base / "cluster.json").write_text(json.dumps({**state, "netns": self.namespaces()}))
        return self

    def _run(self, cmd: list[str], timeout: float = 20) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*self.netns_prefix(), *cmd], capture_output=True, text=True, env=self.env(), timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(cmd, 124, "", "timeout")

    def node_states(self) -> dict[str, str]:
        """Node name -> SLURM state (``idle``, ``mixed``, ``drained``...), from sinfo."""
        out = self._run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split("\n")
        return dict(line.split() for line in out if len(line.split()) == 2)

    def _all_idle(self) -> bool:
        states = self.node_states()
        return len(states) == self.nodes and all(s == "idle" for s in states.values())

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until no job is queued and every node is idle (a finished job's nodes pass
        through ``completing``); a node left drained or down is resumed, as an admin would."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.jobs() and self._all_idle():
                return
            for node, state in self.node_states().items():
                if state.startswith(("drain", "down")):
                    self._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
            time.sleep(0.5)
        raise TimeoutError(
            f"SLURM test cluster not idle after {timeout:.0f} s: jobs {self.jobs()}, nodes {self.node_states()}"
        )

    def reset(self, timeout: float = 60) -> list[str]:
        """Back to how it started, between tests: every job cancelled, the links unshaped
        (its starting ``network``), every node idle. The jobs it found, so that a caller can
        say a test left some behind."""
        left = self.jobs()
        for job in left:
            self._run(["scancel", job])
        if self.network != self.default_network:
            self.set_network(self.default_network)
        self.wait_idle(timeout)
        return left

    # --------------------------------------------------------------- tear-down
    def jobs(self) -> list[str]:
        return self._run(["squeue", "-h", "-o", "%i"]).stdout.split()

    def stop(self, timeout: float = 60) -> None:
        """Cancel every job, then stop the daemons and whatever they started, by PID."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            for job in self.jobs():
                self._run(["scancel", job])
            deadline = time.time() + timeout / 2
            while self.jobs() and time.time() < deadline:
                time.sleep(0.5)
        daemon_pids = [p.pid for p in self.procs.values() if p.poll() is None]
        stragglers = descendants(daemon_pids)
        for name in [n for n in self.procs if n.startswith("slurmd")] + ["slurmctld", "munged"]:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        for pid in stragglers:  # steps and job processes our slurmds started
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.net is not None:
            self.net.close()
            self.net = None
        for name in self.namespaces():  # made before an interruption left self.net unset
            if (Path("/run/netns") / name).exists():
                subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)

    def sbatch_calls(self) -> list[str]:
        """Every sbatch command line submitted to this cluster (recorded by the wrapper)."""
        path = self.base / "log" / "sbatch.calls"
        return path.read_text().splitlines() if path.exists() else []

    def pids(self) -> list[int]:
        """Every daemon this cluster started (munged, slurmctld, each slurmd), alive or not."""
        return [p.pid for p in self.procs.values()]

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] not in ("up", "down") or (len(argv) == 3 and argv[0] == "down"):
        print(
            "usage: python tests/helpers/slurm_cluster.py up DIR [NETWORK-PRESET] | down DIR", file=sys.stderr
        )
        return 2
    base = Path(argv[1])
    if argv[0] == "up":
        cluster = SlurmCluster(base, network=argv[2] if len(argv) == 3 else None).start()
        print(
            f"up in {cluster.startup_s:.1f} s; clients: {' '.join(cluster.netns_prefix())} env"
            f" PATH={cluster.bin}:$PATH ...; pids in {base}/cluster.json"
        )
        return 0
    state = json.loads((base / "cluster.json").read_text())
    for name, pid in state.items():
        if name == "netns":
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    time.sleep(2)
    for name in reversed(state["netns"]):
        subprocess.run(["ip", "netns", "del", name], timeout=30)
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
