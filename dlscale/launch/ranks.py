"""``Launch``: the ranks of one attempt at a run, started, watched, stopped and merged.

It lays the run out through the framework runner's launcher (``plan``), starts each of
its processes (a rank, or srun/mpirun speaking for many), and watches them: the first
that fails, the time limit, the start-up timeout or a signal to the launcher stops the
others instead of letting them hang in a collective. Whatever happened is one reason in
``failure``; ``merge`` turns the ranks' part files into the run's events.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from dlscale import networks
from dlscale.base.sysutil import free_port
from dlscale.host import netns, placement, userns
from dlscale.launch import records
from dlscale.launch.failures import (
    describe_failure,
    describe_group_failure,
    exit_after_end,
    startup_failure,
)
from dlscale.launch.network import describe_network, joiner, launch_mode, master_address, setup_network
from dlscale.launch.process import relay_stderr, spawn, stop
from dlscale.launch.records import read_parts, read_spec, run_settings
from dlscale.launch.runner import runner_launcher
from dlscale.runners.plan import LaunchContext, Plan, SrunTaskError, environ_with, srun_task_error

log = logging.getLogger(__name__)

#: How often the watch looks at the ranks.
POLL_S = 0.2


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
        #: The run's CPU settings (run_start ``settings``): see records.run_settings.
        self.settings: dict[str, Any] = {}
        self.mode = "local"
        self.network: netns.RunNetwork | None = None
        self.network_info: dict[str, Any] = {
            "name": self.spec.network if self.spec else str(self.spec_data.get("network") or networks.HOST)
        }

    def _fail(self, reason: str) -> None:
        self.failure = reason
        log.error("FAILED: %s", reason)

    def start(self) -> None:
        """Lay the run out and start its processes; a run that cannot start is a failure
        with its reason (the processes already started are stopped by ``stop_all``)."""
        if self.work_dir.exists():
            shutil.rmtree(self.work_dir)
        (self.work_dir / "tmp").mkdir(parents=True)
        if self.spec is None:  # not a run: nothing to start
            log.error("FAILED: %s", self.failure)
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
                log.info("allocation from scontrol: %s", " ".join(f"{k}={v}" for k, v in restored.items()))
        try:
            self.network, self.network_info = setup_network(spec, self.mode, python=self.args.python)
        except (netns.NetnsError, userns.UsernsError, KeyError) as err:
            self._fail(f"network not set up: {err}")
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
            self._fail(f"cannot start the run: {err}")
            return
        self.settings = run_settings(runner_launcher(spec.framework), spec, self.plan)
        where = "emulated node(s) on this host" if self.mode == "local" else "node(s) of SLURM job"
        if self.mode == "slurm":
            where += f" {os.environ.get('SLURM_JOB_ID')}"
        log.info(
            "%s: %s rank(s) on %s %s, %s thread(s) each, master %s:%s; processes: %s; network: %s",
            spec.run_id,
            spec.world_size,
            spec.nodes,
            where,
            spec.threads_per_rank,
            ctx.master_addr,
            port,
            ", ".join(p.label for p in self.plan.processes),
            describe_network(self.network_info),
        )
        for process in self.plan.processes:
            if self.terminated_by or time.time() - self.started > spec.timeout_s:
                break  # starting many ranks on a loaded host takes time: watch() says why it stopped
            relayed = process.rank is None and Path(process.argv[0]).name == "srun"
            try:
                proc = spawn(
                    process.argv,
                    environ_with(process.env),
                    joiner(self.network, process.node),
                    pipe_stderr=relayed,
                )
            except OSError as err:  # not executable, or joining the namespace refused
                self._fail(f"cannot start {process.label}: {err}")
                return
            self.procs.append(proc)
            if relayed:
                self.relay_srun(len(self.procs) - 1)

    def close_network(self) -> None:
        """Remove the run's namespaces once its processes are gone (never before)."""
        if self.network is None:
            return
        try:
            self.network.close()
        except netns.NetnsError as err:
            log.warning("warning: %s", err)
            self.exit_warnings[-1] = f"network namespaces not fully removed: {err}"
        self.network = None

    def stop_all(self, sig: int = signal.SIGTERM) -> None:
        """Stop the ranks we started, by PID: SIGTERM, a grace period, then SIGKILL."""
        stop(self.procs, sig)

    def relay_srun(self, index: int) -> None:
        """Copy an srun's stderr into the run's log, keeping its first report of a failed task."""
        stream = self.procs[index].stderr
        assert stream is not None

        def keep_first(line: str) -> None:
            task = srun_task_error(line)
            if task is not None and index not in self.srun_errors:
                self.srun_errors[index] = task

        self.relays[index] = relay_stderr(stream, f"srun-stderr-{index}", keep_first)

    def watch(self) -> None:
        """Wait until every process ended well, or the first failure (a process's, the time
        limit's, the start-up timeout's, a signal's); then stop the others."""
        if self.failure or self.spec is None:  # the run could not start: nothing to watch
            return
        timeout_s = self.spec.timeout_s
        # From launch to the first completed step (timed or warm-up) of any rank: the
        # framework's start-up timeout (ranks that cannot reach each other).
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
                    after_end = exit_after_end(
                        process.label, process.rank, code, parts, self.plan.reporting_ranks
                    )
                    if after_end is not None:
                        # Every event is in, then the framework crashed on its way out (gloo
                        # teardown): the measurement stands; note it and keep watching.
                        self.exit_warnings[index] = after_end
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
        log.error("FAILED: %s; stopping the other ranks", self.failure)
        self.stop_all()

    def _ended_itself(self, index: int, parts: dict[int, list[dict[str, Any]]]) -> bool:
        rank = self.plan.processes[index].rank
        return rank is not None and any(e.get("event") == "rank_end" for e in parts.get(rank, []))

    def merge(self) -> list[dict[str, Any]]:
        """The run's events from what its ranks wrote so far (see ``records.merge``)."""
        return records.merge(
            read_parts(self.work_dir),
            spec=self.spec,
            spec_data=self.spec_data,
            failure=self.failure,
            run_dir=self.events_path.parent,
            reporting_ranks=self.plan.reporting_ranks,
            started=self.started,
            loadavg_start=self.loadavg_start,
            config_sha256=self.args.config_sha256,
            repo=Path(self.args.repo),
            mode=self.mode,
            network_info=self.network_info,
            settings=self.settings,
            exit_warnings=self.exit_warnings,
        )
