"""Helpers of the fault suite: launching a runner the way the workflow does, injecting a
fault, and recording the outcome in a table that ``make test-faults`` prints.

Outcomes: ``failed cleanly`` (the run ended in bounded time, recorded as failed with a
reason a person understands, nothing left running), ``rejected cleanly`` (bad input refused
with a message naming where and why), ``hung`` (it did not end in time), ``wrong result``
(it ended but recorded success, or an unclear reason, or left processes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlscale.catalog import CONFIG_SCHEMA
from dlscale.runspec import RunSpec
from dlscale.study.matrix import expand_runs, run_spec
from dlscale.study.validation import load_schema, validate_config
from helpers.paths import REPO

TABLE = REPO / "results" / "fault-table.jsonl"


@dataclass
class FaultRow:
    fault: str
    framework: str
    outcome: str
    time_to_fail_s: float | None
    detail: str = ""
    #: The exit status of a command-line entry point refusing the input (None: not one).
    exit_code: int | None = None


def record(row: FaultRow) -> None:
    """Append a row to the fault table (read by the terminal summary in tests/conftest.py)."""
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    with open(TABLE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row.__dict__) + "\n")


def judge(
    fault: str, framework: str, cases: dict[str, Callable[[], str | None]], handled: str = "rejected cleanly"
) -> None:
    """Run every case (None: handled as it should be; else what went wrong), record the
    class as one row (``handled`` when every case was), and fail the test naming the cases
    that went wrong."""
    wrong, slowest = {}, 0.0
    for name, case in cases.items():
        started = time.perf_counter()
        try:
            problem = case()
        except Exception as err:  # noqa: BLE001 - an unexpected crash is a wrong result, named
            problem = f"crashed: {type(err).__name__}: {err}"
        slowest = max(slowest, time.perf_counter() - started)
        if problem:
            wrong[name] = problem
    outcome = "wrong result" if wrong else handled
    detail = "; ".join(f"{k}: {v}" for k, v in wrong.items()) or ", ".join(cases)
    record(FaultRow(f"{fault} ({len(cases)} cases)", framework, outcome, round(slowest, 2), detail))
    assert not wrong, wrong


#: Iterations of a run a fault interrupts (a kill at its 5th step, SIGTERM, a time limit of
#: 12-20 s): endless where input costs nothing before the first step, 200 for BigDL, whose
#: executors convert and cache every sample the run will consume before it (a run of
#: 100,000 steps: all of MNIST, ~12 s of its start-up). 200 BigDL steps last ~30 s or more
#: here, past every fault those rows inflict.
INTERRUPTIBLE_ITERATIONS: dict[str, int] = {"bigdl": 200}


def fault_spec(framework: str, *, nodes: int = 2, iterations: int | None = None, **overrides: Any) -> RunSpec:
    """A LeNet run spec for ``framework`` built by dlscale.study.matrix, as the workflow builds it
    (by default a run that only a fault ends: ``INTERRUPTIBLE_ITERATIONS``)."""
    if iterations is None:
        iterations = INTERRUPTIBLE_ITERATIONS.get(framework, 100_000)
    config = {
        "frameworks": [framework],
        "models": ["lenet"],
        "nodes": [nodes],
        "iterations": {"lenet": iterations},
        "warmup": 1,
        **overrides,
    }
    study = validate_config(config, load_schema(CONFIG_SCHEMA))
    return run_spec(study, expand_runs(study)[0])


@dataclass
class LaunchedRun:
    """A run started through ``python -m dlscale.launch`` in the background."""

    proc: subprocess.Popen[bytes]
    events: Path
    started: float = field(default_factory=time.time)

    @property
    def work(self) -> Path:
        return self.events.parent / ".work"

    def parts(self) -> dict[int, list[dict[str, Any]]]:
        found = {}
        for path in self.work.glob("rank*.jsonl"):
            events = []
            for line in path.read_text().splitlines():
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    break
            found[int(path.stem.removeprefix("rank"))] = events
        return found

    def rank_pids(self) -> dict[int, int]:
        """Rank -> the PID of the process that is that rank, for ranks that said it.

        A rank_start without a PID (a BigDL executor under SLURM, out of the driver's
        sight) has none to give, and is left out.
        """
        return {
            rank: events[0]["pid"]
            for rank, events in self.parts().items()
            if events and events[0].get("event") == "rank_start" and "pid" in events[0]
        }

    def wait_for_iterations(self, rank: int, count: int, timeout: float = 300) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            events = self.parts().get(rank, [])
            if sum(e.get("event") == "iteration" for e in events) >= count:
                return
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the run ended before rank {rank} did {count} iterations: {self.output()}"
                )
            time.sleep(0.1)
        raise TimeoutError(f"rank {rank} did not reach {count} iterations in {timeout} s")

    def wait(self, timeout: float) -> float | None:
        """Seconds until the launcher exited, or None if it hung past ``timeout``."""
        start = time.time()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return time.time() - start

    @property
    def log(self) -> Path:
        """The launcher's output (and its ranks'), where the training rule puts it."""
        return self.events.parent / "run.log"

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def launch(
    python: Path, spec: RunSpec, data: Path, events: Path, env: dict[str, str] | None = None
) -> LaunchedRun:
    """``env``: variables added to the launcher's environment (a fault injected there)."""
    cmd = [
        str(python), "-m", "dlscale.launch", "--spec-json", spec.to_json(), "--data", str(data),
        "--events", str(events), "--python", str(python),
    ]  # fmt: skip
    env = {**os.environ, **(env or {})}
    events.parent.mkdir(parents=True, exist_ok=True)
    # Output to run.log beside the events, as the training rule sends it: the launcher
    # keeps a failed attempt's part of it (attempts/<id>/run.log).
    with open(events.parent / "run.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return LaunchedRun(proc, events)


def assert_attempt_kept(events: Path, *logs: str) -> Path:
    """The failed attempt's record and logs are kept: one ``failed-*.jsonl``
    and its folder, which the reason names, with its part of run.log and ``logs`` (paths
    in the folder: ``work/...`` for the run's work dir). Returns the folder."""
    attempts = events.parent / "attempts"
    records = sorted(attempts.glob("failed-*.jsonl"))
    assert records, "the failure was not kept"
    folder = attempts / records[-1].stem
    reason = json.loads(records[-1].read_text().splitlines()[-1])["reason"]
    assert f"(logs: attempts/{folder.name}/)" in reason, reason
    kept = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert "run.log" in kept and "[launch]" in (folder / "run.log").read_text(errors="replace"), kept
    missing = set(logs) - kept
    assert not missing, f"not kept: {sorted(missing)}; kept: {sorted(kept)}"
    return folder


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_mentioning(text: str, wait_s: float = 5.0) -> list[int]:
    """PIDs of live processes whose command line contains ``text`` (a run's own paths),
    after giving processes that are being killed ``wait_s`` to go."""
    deadline = time.time() + wait_s
    while True:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            pid = int(cmdline.parent.name)
            try:
                if pid != os.getpid() and text in cmdline.read_bytes().replace(b"\0", b" ").decode(
                    errors="replace"
                ):
                    found.append(pid)
            except OSError:
                continue
        found = [pid for pid in found if alive(pid)]
        if not found or time.time() > deadline:
            return found
        time.sleep(0.2)


def descendants(root: int) -> list[int]:
    """Every live process under ``root`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def assert_loopback_only(launcher_pid: int) -> int:
    """Every process a run started (ranks, servers, Spark daemons, mpirun's ranks) lives in a
    network namespace whose only interface is ``lo``: whatever they bind (TF's gRPC servers,
    Open MPI and Spark bind every interface), nothing outside the run can reach it.
    Returns how many processes were checked."""
    own = os.readlink("/proc/self/ns/net")
    seen: dict[str, set[str]] = {}
    checked = 0
    for pid in descendants(launcher_pid):
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            continue  # ended meanwhile
        assert ns != own, f"process {pid} of the run shares this host's network namespace"
        if ns not in seen:
            out = subprocess.run(
                ["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show"],
                capture_output=True, text=True, timeout=10,
            )  # fmt: skip
            if out.returncode != 0:
                continue  # ended meanwhile
            seen[ns] = {line.split(":")[1].strip() for line in out.stdout.splitlines()}
        assert seen[ns] == {"lo"}, f"process {pid}'s namespace has interfaces {seen[ns]}"
        checked += 1
    return checked
