"""Launch one training run's ranks, watch them, and write its events file.

``python -m dlscale.launch`` is what a training rule calls. It starts the run's ranks
(locally: n x p processes on this host, each told its place through ``DLSCALE_*``
variables, the way srun tells ranks through ``SLURM_*``), watches them, and when one dies
stops the others instead of letting them hang in a collective. Whatever happens, it merges
the ranks' part files into ``events.jsonl`` written atomically, with a run_end that says
ok, or failed and why ("rank 1 died (SIGKILL) at iteration 37", "time limit ...").

A failed run's events file still feeds the tables (a row with status failed), and a copy
is kept in ``attempts/failed-<time>.jsonl`` beside it, its logs (its part of run.log, the
work dir's logs: BigDL's driver, Spark's daemons and executors, the ranks' part files) in
``attempts/failed-<time>/``, which its reason names; a contended attempt that is redone
keeps the same, as ``contended-<time>``. The training rule takes the number
of such attempts as a parameter, so the next invocation sees a changed parameter and
redoes that run, and only that run (Snakemake's ``params`` rerun trigger); a successful
rerun leaves the count unchanged, so it is not redone again. Nothing of a failure is lost.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from dlscale import contention, envs, netns, networks, placement, userns
from dlscale.events import EventError, write_atomic
from dlscale.runners.plan import (
    LaunchContext,
    Plan,
    SrunTaskError,
    environ_with,
    signal_name,
    srun_task_error,
)
from dlscale.runspec import RunSpec, SpecError, run_id_fields
from dlscale.sysutil import free_port, git_sha


def runner_launcher(framework: str) -> ModuleType:
    """The runner's light launcher module (``dlscale.runners.<framework>.launcher``)."""
    return importlib.import_module(f"dlscale.runners.{framework}.launcher")


POLL_S = 0.2
PR_SET_PDEATHSIG = 1
GRACE_S = 10.0


def die_with_parent() -> None:
    """In a child, before exec: get SIGTERM when the launcher dies, however it dies.

    The ranks run in their own sessions (so that stopping them reaches their whole process
    group); without this, a launcher killed with SIGKILL (snakemake killed hard) would
    leave them training as orphans.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


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
    each runner's launcher says it for its framework."""
    says = getattr(runner_launcher(spec.framework), "listens_on_every_interface", None)
    return says(spec) if says else None


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


def child_setup(join: Callable[[], None] | None):
    """What a rank runs between fork and exec: die with the launcher, join its node's namespace."""

    def setup() -> None:
        die_with_parent()
        if join:
            join()

    return setup


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


def read_parts(work_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Each rank's events so far. A line cut off by a killed rank is evidence lost, not an error."""
    parts: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(work_dir.glob("rank*.jsonl")):
        rank = int(path.stem.removeprefix("rank"))
        events = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                break
        parts[rank] = events
    return parts


def finished_ok(events: list[dict[str, Any]]) -> bool:
    """Whether a rank recorded its own successful end (all its iterations are on disk)."""
    return any(e.get("event") == "rank_end" and e.get("status") == "ok" for e in events)


def where_it_stopped(events: list[dict[str, Any]]) -> str:
    """ "at iteration N" (the one a rank was in when it stopped) or "before its first iteration"."""
    iterations = [e["iteration"] for e in events if e.get("event") == "iteration"]
    return f"at iteration {iterations[-1] + 1}" if iterations else "before its first iteration"


def describe_failure(label: str, returncode: int, events: list[dict[str, Any]]) -> str:
    """A reason a person understands, from how a rank ended and what it last recorded."""
    for event in reversed(events):
        if event.get("event") == "rank_end" and event.get("status") == "failed" and event.get("reason"):
            return str(event["reason"])
    where = where_it_stopped(events)
    if returncode < 0:
        return f"{label} died ({signal_name(returncode)}) {where}"
    return f"{label} exited with status {returncode} {where}"


def startup_failure(startup_s: float, parts: dict[int, list[dict[str, Any]]], plan: Plan | None) -> str:
    """Why no rank completed a first step in time: what each rank last logged."""
    ranks = sorted(set(range(plan.reporting_ranks if plan else 1)) | set(parts))
    last = []
    for rank in ranks:
        events = parts.get(rank, [])
        last.append(f"rank {rank}: {events[-1].get('event') if events else 'nothing'}")
    return (
        f"no rank completed a first step within {startup_s} s (start-up timeout; peers unreachable?):"
        f" last logged {', '.join(last)}"
    )


def describe_group_failure(
    label: str,
    returncode: int,
    parts: dict[int, list[dict[str, Any]]],
    first_error: SrunTaskError | None = None,
) -> str:
    """Why a process that stands for many ranks (srun, mpirun) failed, from their parts.

    A rank with no end of its own died first (killed, crashed); a rank that recorded a
    failure other than being terminated comes next; ranks the launcher tore down after a
    peer died only say "terminated", which is the consequence, not the cause. When the step
    ends every rank with SIGKILL, several ranks leave no end: then srun's first report of a
    task (``first_error``, which srun prints for the task that failed first, before it
    ends the others) names the rank.
    """
    code = f"{label} exited with {signal_name(returncode) if returncode < 0 else returncode}"
    if not parts:
        return f"{code} before any rank started"
    if first_error is not None:
        rank, said = first_error.task, str(first_error)
        ends = [e for e in parts.get(rank, []) if e.get("event") == "rank_end"]
        if ends and ends[-1].get("status") == "failed" and "SIGTERM" not in str(ends[-1].get("reason")):
            return str(ends[-1].get("reason"))
        if not ends:
            where = where_it_stopped(parts.get(rank, []))
            return f"rank {rank} died {where} (srun: {said}; {code})"
    silent, failed = [], []
    for rank, events in sorted(parts.items()):
        ends = [e for e in events if e.get("event") == "rank_end"]
        if not ends:
            silent.append(rank)
        elif ends[-1].get("status") == "failed" and "SIGTERM" not in str(ends[-1].get("reason")):
            failed.append((rank, str(ends[-1].get("reason"))))
    # A rank's death recorded by what outlived its process (TensorFlow ps mode under SLURM:
    # the task's agent saw its worker server killed) is the cause; a rank that the step's
    # end then killed before it could write its own end is the consequence.
    for rank, reason in failed:
        if reason.startswith(f"rank {rank} died"):
            return reason
    if silent:
        rank = silent[0]
        where = where_it_stopped(parts[rank])
        return f"rank {rank} died {where} ({code})"
    if failed:
        return failed[0][1]
    return code


def read_spec(text: str) -> tuple[RunSpec | None, dict[str, Any], str | None]:
    """The run spec the rule passed, the plain data it was made of, and why it is not a run.

    A spec that is not a run (a field missing, of the wrong type, unknown) is a recorded
    failure like any other: the reason names the field, and the run's record keeps what
    could be read of it.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        return None, {}, f"bad run spec: not JSON: {err}"
    raw = data if isinstance(data, dict) else {}
    try:
        return RunSpec.from_dict(data), raw, None
    except SpecError as err:
        return None, raw, f"bad run spec: {err}"
    except KeyError as err:  # the catalog's: an unknown framework or model, named
        return None, raw, f"bad run spec: {err.args[0] if err.args else err}"


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


class Launch:
    """The ranks of one run and what became of them."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.spec, self.spec_data, self.failure = read_spec(args.spec_json)
        self.events_path = Path(args.events)
        self.work_dir = self.events_path.parent / ".work"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = time.time()
        self.loadavg_start = list(os.getloadavg())
        self.terminated_by: str | None = None
        self.exit_warnings: dict[int, str] = {}
        #: Per srun process (index in procs): its first report of a failed task, and the
        #: thread that relays its stderr into the run's log while reading it.
        self.srun_errors: dict[int, SrunTaskError] = {}
        self.relays: dict[int, threading.Thread] = {}
        self.plan = Plan([], 0)
        #: The run's CPU settings (run_start ``settings``): see run_settings.
        self.settings: dict[str, Any] = {}
        self.mode = "local"
        self.network: netns.RunNetwork | None = None
        self.network_info: dict[str, Any] = {
            "name": self.spec.network if self.spec else str(self.spec_data.get("network") or networks.HOST)
        }

    def start(self) -> None:
        if self.work_dir.exists():
            shutil.rmtree(self.work_dir)
        (self.work_dir / "tmp").mkdir(parents=True)
        if self.spec is None:  # not a run: nothing to start
            print(f"[launch] FAILED: {self.failure}", file=sys.stderr, flush=True)
            return
        spec = self.spec
        port = free_port()
        self.mode = launch_mode(os.environ)
        if self.mode == "slurm":
            # A workflow job's shell has lost the allocation's variables (placement.allocation_env):
            # restore them for this launcher and everything it starts.
            restored = placement.allocation_env(os.environ)
            os.environ.update(restored)
            if restored:
                print(
                    f"[launch] allocation from scontrol: {' '.join(f'{k}={v}' for k, v in restored.items())}"
                )
        try:
            self.network, self.network_info = setup_network(spec, self.mode, python=self.args.python)
        except (netns.NetnsError, userns.UsernsError, KeyError) as err:
            self.failure = f"network not set up: {err}"
            print(f"[launch] FAILED: {self.failure}", file=sys.stderr, flush=True)
            return
        net = self.network
        ctx = LaunchContext(
            spec=spec,
            python=self.args.python,
            data=Path(self.args.data),
            work_dir=self.work_dir,
            master_port=port,
            mode=self.mode,
            # DLSCALE_MASTER_ADDR overrides node 0's address on emulated nodes too (the
            # fault suite names an unreachable master with it).
            master_addr=(os.environ.get("DLSCALE_MASTER_ADDR") or net.addresses[0])
            if net
            else master_address(self.mode, os.environ),
            node_addresses=tuple(net.addresses) if net else ("127.0.0.1",),
            interface=net.interface if net else "lo",
            node_env=netns.node_env(net) if net and net.preset else {},
        )
        try:
            self.plan = runner_launcher(spec.framework).plan(ctx)
        except (ValueError, RuntimeError, OSError) as err:
            # A run that cannot be laid out (no Caffe build, ...) is a
            # recorded failure with its reason, like any other.
            self.failure = f"cannot start the run: {err}"
            print(f"[launch] FAILED: {self.failure}", file=sys.stderr, flush=True)
            return
        self.settings = run_settings(runner_launcher(spec.framework), spec, self.plan)
        where = "emulated node(s) on this host" if self.mode == "local" else "node(s) of SLURM job"
        if self.mode == "slurm":
            where += f" {os.environ.get('SLURM_JOB_ID')}"
        print(
            f"[launch] {spec.run_id}: {spec.world_size} rank(s) on {spec.nodes}"
            f" {where}, {spec.threads_per_rank} thread(s) each, master {ctx.master_addr}:{port};"
            f" processes: {', '.join(p.label for p in self.plan.processes)};"
            f" network: {describe_network(self.network_info)}",
            flush=True,
        )
        for process in self.plan.processes:
            if self.terminated_by or time.time() - self.started > spec.timeout_s:
                break  # starting many ranks on a loaded host takes time: watch() says why it stopped
            relayed = process.rank is None and Path(process.argv[0]).name == "srun"
            try:
                self.procs.append(
                    subprocess.Popen(
                        process.argv,
                        env=environ_with(process.env),
                        start_new_session=True,
                        preexec_fn=child_setup(joiner(self.network, process.node)),
                        stderr=subprocess.PIPE if relayed else None,
                    )
                )
                if relayed:
                    self.relay_srun(len(self.procs) - 1)
            except OSError as err:  # not executable, or joining the namespace refused
                self.failure = f"cannot start {process.label}: {err}"
                print(f"[launch] FAILED: {self.failure}", file=sys.stderr, flush=True)
                return  # the ones already started are stopped by run_once

    def close_network(self) -> None:
        """Remove the run's namespaces once its processes are gone (never before)."""
        if self.network is None:
            return
        try:
            self.network.close()
        except netns.NetnsError as err:
            print(f"[launch] warning: {err}", file=sys.stderr, flush=True)
            self.exit_warnings[-1] = f"network namespaces not fully removed: {err}"
        self.network = None

    def stop_all(self, sig: int = signal.SIGTERM) -> None:
        """Stop the ranks we started, by PID: SIGTERM, a grace period, then SIGKILL."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.time() + GRACE_S
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()

    def relay_srun(self, index: int) -> None:
        """Copy an srun's stderr into the run's log, keeping its first report of a failed task."""
        stream = self.procs[index].stderr
        assert stream is not None

        def relay() -> None:
            for raw in stream:
                line = raw.decode("utf-8", errors="replace")
                sys.stderr.write(line)
                sys.stderr.flush()
                task = srun_task_error(line)
                if task is not None and index not in self.srun_errors:
                    self.srun_errors[index] = task

        thread = threading.Thread(target=relay, name=f"srun-stderr-{index}", daemon=True)
        thread.start()
        self.relays[index] = thread

    def watch(self) -> None:
        if self.failure or self.spec is None:  # the run could not start: nothing to watch
            return
        timeout_s = self.spec.timeout_s
        # From launch to the first completed step (timed or warm-up) of any rank: the
        # framework's start-up timeout (issue 22: ranks that cannot reach each other).
        startup_s = self.spec.options.get("startup_timeout_s")
        first_step = False
        while True:
            if self.terminated_by:
                self.failure = f"launcher received {self.terminated_by} (time limit or cancellation)"
                break
            codes = [proc.poll() for proc in self.procs]
            bad = [(index, code) for index, code in enumerate(codes) if code not in (None, 0)]
            if bad:
                parts = read_parts(self.work_dir)
                # The cause before its consequences: a rank that died without ending itself
                # (killed, crashed) comes before ranks that then failed on its broken pipe.
                bad.sort(key=lambda item: (self._ended_itself(item[0], parts), item[0]))
                for index, code in bad:
                    process = self.plan.processes[index]
                    events = parts.get(process.rank, []) if process.rank is not None else []
                    if process.rank is not None and finished_ok(events):
                        # Every event is in, then the framework crashed on its way out (gloo
                        # teardown): the measurement stands; note it and keep watching.
                        self.exit_warnings[index] = f"{process.label} finished, then exited with {code}"
                        codes[index] = 0
                    elif process.rank is None:
                        # srun/mpirun speak for many ranks: ask srun (what it printed last
                        # is in once its stderr is closed) and their part files who died.
                        if index in self.relays:
                            self.relays[index].join(timeout=5)
                        self.failure = describe_group_failure(
                            process.label, code, parts, self.srun_errors.get(index)
                        )
                        break
                    else:
                        self.failure = describe_failure(process.label, code, events)
                        break
                if self.failure:
                    break
            if all(code == 0 for code in codes):
                return
            if time.time() - self.started > timeout_s:
                self.failure = f"time limit of {timeout_s} s exceeded (run_timeout_min)"
                break
            if not first_step and startup_s and time.time() - self.started > startup_s:
                parts = read_parts(self.work_dir)
                first_step = any(e.get("event") == "iteration" for ev in parts.values() for e in ev)
                if not first_step:
                    self.failure = startup_failure(startup_s, parts, self.plan)
                    break
            time.sleep(POLL_S)
        print(f"[launch] FAILED: {self.failure}; stopping the other ranks", file=sys.stderr, flush=True)
        self.stop_all()

    def identity_of_bad_spec(self) -> dict[str, Any]:
        """Which run a spec that is not a run was for: read off the run's folder
        (``results/runs/<run id>/events.jsonl``), so that its failed record is well typed
        and names the right run; the raw spec stays under ``spec`` as evidence."""
        run_id = "/".join(self.events_path.parent.parts[-5:])
        fields = run_id_fields(run_id)
        if fields is None:
            world = _positive_int(self.spec_data.get("world_size")) or 1
            return {"world_size": world}
        world = fields["nodes"] * fields["ranks_per_node"]
        return {**fields, "run_id": run_id, "world_size": world, "global_batch": fields["batch"] * world}

    def _ended_itself(self, index: int, parts: dict[int, list[dict[str, Any]]]) -> bool:
        rank = self.plan.processes[index].rank
        return rank is not None and any(e.get("event") == "rank_end" for e in parts.get(rank, []))

    def merge(self) -> list[dict[str, Any]]:
        parts = read_parts(self.work_dir)
        starts = {r: next((e for e in ev if e.get("event") == "rank_start"), None) for r, ev in parts.items()}
        spec = self.spec
        record = spec.to_dict() if spec else self.spec_data
        identity = record if spec else self.identity_of_bad_spec()
        world = spec.world_size if spec else identity["world_size"]
        hosts = [(starts.get(r) or {}).get("host") for r in range(world)]
        rank0 = starts.get(0) or {}
        iterations = [e for r in sorted(parts) for e in parts[r] if e.get("event") == "iteration"]
        timed0 = [e for e in parts.get(0, []) if e.get("event") == "iteration" and not e.get("warmup")]
        startup_s = (timed0[0]["time"] - timed0[0]["step_s"] - self.started) if timed0 else None
        status = "ok"
        reason = None
        if self.failure or spec is None:
            status, reason = "failed", self.failure
        else:
            expected = self.plan.reporting_ranks * spec.total_iterations
            if len(iterations) != expected:
                status, reason = "failed", f"expected {expected} iteration events, found {len(iterations)}"
        fields = ("framework", "model", "nodes", "ranks_per_node", "batch", "repeat")
        run_start = {
            "event": "run_start",
            "run_id": identity.get("run_id"),
            **{k: identity.get(k) for k in fields},
            "dataset": record.get("dataset"),
            "scaling": record.get("scaling"),
            "global_batch": identity.get("global_batch"),
            "world_size": world,
            "hosts": hosts,
            "threads_per_rank": record.get("threads_per_rank"),
            "versions": rank0.get("versions", {}),
            "config_sha256": self.args.config_sha256,
            "git_sha": git_sha(Path(self.args.repo)),
            "launcher": self.mode,
            "network": self.network_info.get("name", networks.HOST),
            "network_setup": self.network_info,
            "loadavg": self.loadavg_start,
            "startup_s": startup_s,
            "spec": record,
            "settings": self.settings,
            **environment_record(os.environ),
            "time": self.started,
        }
        run_end = {
            "event": "run_end",
            "status": status,
            "reason": reason,
            "loadavg": list(os.getloadavg()),
            "wall_s": time.time() - self.started,
            # The launcher's own (a rank crashed after its last event) and the ranks' (rank_end).
            "warnings": sorted(
                [*self.exit_warnings.values()]
                + [
                    str(w)
                    for r in sorted(parts)
                    for e in parts[r]
                    if e.get("event") == "rank_end"
                    for w in e.get("warnings") or ()
                ]
            ),
            "time": time.time(),
        }
        return [run_start, *iterations, run_end]


#: The thread variables every rank's environment may set, recorded with the settings.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "MKL_DEBUG_CPU_TYPE",
)


def run_settings(launcher: ModuleType, spec: RunSpec, plan: Plan) -> dict[str, Any]:
    """The CPU settings a run uses: the runner launcher's ``settings(spec)`` (engine, BLAS,
    thread pools, ...) and the thread variables its first process is given (what the
    ranks really get, not what the spec meant). A runner without the hook records the
    variables only; a hook that fails is recorded with its error, never a crash.
    """
    record: dict[str, Any] = {}
    describe = getattr(launcher, "settings", None)
    if describe is not None:
        try:
            record.update(describe(spec))
        except (KeyError, ValueError, TypeError) as err:
            record["error"] = f"{type(err).__name__}: {err}"
    env = plan.processes[0].env if plan.processes else {}
    record["env"] = {name: env[name] for name in THREAD_VARIABLES if name in env}
    return record


def environment_record(env: Mapping[str, str]) -> dict[str, Any]:
    """What the run ran with: its venv's lock (from the marker the training rule passes as
    ``DLSCALE_ENV_MARKER``) and, for Caffe, the key of its build. Empty where unknown
    (a run started by hand, ``--sdm conda``)."""
    record: dict[str, Any] = {}
    marker = env.get("DLSCALE_ENV_MARKER")
    if marker and Path(marker).is_file():
        try:
            record["env"] = envs.env_record(marker)
        except (OSError, ValueError) as err:
            record["env"] = {"error": f"{marker}: {err}"}
    caffe = env.get("DLSCALE_CAFFE_MARKER")
    if caffe:
        try:
            record["caffe_build_key"] = envs.marker_key(caffe)
        except ValueError:
            pass  # a user's caffe.home named by hand: its marker carries no key
    return record


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec-json", required=True)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--events", required=True, type=Path)
    parser.add_argument("--python", default=sys.executable, help="the framework venv's python")
    parser.add_argument("--config-sha256", default="unknown")
    parser.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument(
        "--run-log",
        default=None,
        help="the file the launcher's output goes to (default: run.log beside --events; '' for none),"
        " whose part of a failed or redone attempt is kept under attempts/",
    )
    parser.add_argument(
        "--contended-retries",
        type=int,
        default=CONTENDED_RETRIES,
        help="times a run whose host was busy with other work is redone before it is recorded as is",
    )
    args = parser.parse_args(argv)
    if args.run_log is None:
        args.run_log = str(Path(args.events).parent / "run.log")
    return args


#: A run whose host was busy with other work (dlscale.contention) is redone this many
#: times; if every attempt is contended the last is recorded as is, marked ``contended``,
#: and the analysis leaves it out of the findings with that reason. Two: a busy spell
#: from a neighbour (an apt update, another user's build) rarely outlasts three runs of a
#: few seconds to minutes, while a host that is busy all the time should not hold a study
#: forever.
CONTENDED_RETRIES = 2


#: The contention record of a run whose host load the launcher cannot attribute (SLURM).
NOT_MEASURED: dict[str, Any] = {"other_busy_share": None, "steal_share": None, "contended": None}


def run_once(args: argparse.Namespace) -> tuple[Launch, list[dict[str, Any]]]:
    """One attempt: start the ranks, watch them, merge their events (with the contention
    the host had meanwhile in run_end)."""
    launch = Launch(args)

    def on_signal(signum: int, frame: Any) -> None:
        launch.terminated_by = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    probe = contention.ContentionProbe()
    probe.start()
    try:
        launch.start()
        launch.watch()
    finally:
        launch.stop_all()
        launch.close_network()
    # After the ranks are reaped: their CPU time is the launcher's children's. Not under
    # SLURM: there the ranks are slurmstepd's children on every node, not the launcher's,
    # and the allocation's cores are the job's own (the cluster's business, not ours).
    measured = probe.stop() if launch.mode == "local" else NOT_MEASURED
    events = launch.merge()
    events[-1]["contention"] = measured
    return launch, events


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


#: Files of an attempt's work dir kept with it: every log (the BigDL driver's, Spark's
#: master, workers and executors, glog's files of Caffe's ranks) and the ranks' own part
#: files (what each rank recorded, before the merge). Not the scratch (jars, shards' copies).
KEPT_PATTERNS = ("*.log", "*.log.*", "rank*.jsonl")


def attempt_id(run_dir: Path, kind: str) -> str:
    """``<kind>-<UTC time>`` (``failed``, ``contended``), unique in the run's ``attempts/``."""
    base = f"{kind}-{_stamp()}"
    name, n = base, 1
    while (run_dir / "attempts" / f"{name}.jsonl").exists() or (run_dir / "attempts" / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def point_to_logs(run_end: dict[str, Any], attempt: str) -> dict[str, Any]:
    """The attempt's run_end, naming the folder that keeps its logs (its reason too, if failed)."""
    folder = f"attempts/{attempt}/"
    marked = {**run_end, "attempt_logs": folder}
    if run_end["status"] != "ok":
        marked["reason"] = f"{run_end['reason'] or 'failed'} (logs: {folder})"
    return marked


def keep_attempt_logs(
    run_dir: Path, attempt: str, work_dir: Path, run_log: Path | None, log_from: int
) -> list[str]:
    """Copy what explains an attempt into ``attempts/<attempt>/`` before the next attempt or
    a rerun replaces it: the part of ``run.log`` this attempt wrote (the launcher's and the
    ranks' output: mpirun's, TensorFlow's, Spark's driver), every log and part file of its
    work dir (``KEPT_PATTERNS``, at their paths there), and the run folder's
    ``bigdl-driver.log``. Returns the paths kept; a file that cannot be copied is named on
    stderr, never a crash (the attempt is recorded either way)."""
    target = run_dir / "attempts" / attempt
    kept: list[str] = []

    def copy(source: Path, name: str, offset: int = 0) -> None:
        try:
            dest = target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(source, "rb") as src, open(dest, "wb") as out:
                src.seek(offset)
                shutil.copyfileobj(src, out)
            kept.append(name)
        except OSError as err:
            print(
                f"[launch] warning: {source} not kept with attempt {attempt}: {err}",
                file=sys.stderr,
                flush=True,
            )

    sys.stdout.flush()
    sys.stderr.flush()
    if run_log is not None and run_log.is_file():
        copy(run_log, "run.log", log_from if run_log.stat().st_size >= log_from else 0)
    for name in ("bigdl-driver.log",):
        if (run_dir / name).is_file():
            copy(run_dir / name, name)
    if work_dir.is_dir():
        found = {p for pattern in KEPT_PATTERNS for p in work_dir.rglob(pattern)}
        for path in sorted(found):
            if path.is_file() and not path.is_symlink():
                copy(path, str(Path("work") / path.relative_to(work_dir)))
    return kept


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path else 0
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir = Path(args.events).parent
    # The training rule sends the launcher's output (and the ranks') to run.log beside
    # the events; --run-log names another file, "" none.
    run_log = Path(args.run_log) if args.run_log else None
    for attempt in range(args.contended_retries + 1):
        log_from = _size(run_log)
        launch, events = run_once(args)
        run_end = events[-1]
        busy = run_end["contention"]
        if run_end["status"] != "ok" or not busy.get("contended") or launch.terminated_by:
            break
        if attempt == args.contended_retries:
            print(
                f"[launch] contended in every one of {attempt + 1} attempts: recorded as contended",
                file=sys.stderr,
                flush=True,
            )
            break
        print(
            f"[launch] host busy with other work during the run (other work {busy['other_busy_share']:.0%},"
            f" steal {busy['steal_share']:.0%} of {busy['cpus']} CPU(s)): redoing it"
            f" (attempt {attempt + 2} of at most {args.contended_retries + 1})",
            flush=True,
        )
        redone = attempt_id(run_dir, "contended")
        events[-1] = point_to_logs(run_end, redone)
        write_atomic(run_dir / "attempts" / f"{redone}.jsonl", events)
        keep_attempt_logs(run_dir, redone, launch.work_dir, run_log, log_from)
    try:
        failed = None
        try:
            write_atomic(launch.events_path, events)  # validates every event first
        except EventError as err:
            # A rank wrote an event that breaks the contract: the run is failed with that
            # reason (its iterations are not evidence of anything), never a crash.
            run_end = {**run_end, "status": "failed", "reason": f"a rank wrote an invalid event: {err}"}
            events = [events[0], run_end]
        if run_end["status"] != "ok":
            failed = attempt_id(run_dir, "failed")
            run_end = point_to_logs(run_end, failed)
            events = [*events[:-1], run_end]
            write_atomic(launch.events_path, events)
            write_atomic(run_dir / "attempts" / f"{failed}.jsonl", events)
    except OSError as err:
        # Nothing half-written is left (atomic writes); the job fails so Snakemake redoes it.
        print(
            f"[launch] cannot record the run in {launch.events_path.parent}: {err}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    if failed:
        print(f"[launch] run recorded as FAILED: {run_end['reason']}", file=sys.stderr, flush=True)
        keep_attempt_logs(run_dir, failed, launch.work_dir, run_log, log_from)
    else:
        shutil.rmtree(launch.work_dir, ignore_errors=True)
        print(f"[launch] ok: {launch.events_path} ({run_end['wall_s']:.1f} s)", flush=True)
    # A recorded failure (signals included) is a result, not a crash: the job succeeds
    # with a failed record, and its attempt count makes the next invocation redo it.
    return 0


if __name__ == "__main__":
    sys.exit(main())
