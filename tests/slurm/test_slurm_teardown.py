"""A pytest session ended by SIGTERM (``timeout``, a CI runner) or SIGINT (Ctrl-C) stops its
SLURM test cluster: no daemon, no job and no network namespace of it is left.

A small session of its own (the suite's fixtures, ``-p helpers.slurm_fixtures``, and one test that
holds the cluster with a job running on it) is signalled once the cluster is up; then
every PID the cluster reported (munged, slurmctld, each slurmd), the job's process and
every namespace it made must be gone. Its own session, not the suite's: the signal ends it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.faults import FaultRow, record
from helpers.paths import REPO
from helpers.slurm_cluster import alive

pytestmark = pytest.mark.workflow

#: The inner session's one test: a job on node n1, then it reports what to check and waits.
HOLDER = """
import json, os, subprocess, time
from pathlib import Path


def test_holds_the_cluster_with_a_job_running(slurm):
    out = Path(os.environ["DLSCALE_TEARDOWN_PROBE"])
    pid_file = out.parent / "job.pid"
    submit = [*slurm.netns_prefix(), "sbatch", "-N", "1", "-o", str(out.parent / "job.log"),
              "--wrap", f"echo $$ > {pid_file}; exec sleep 600"]
    done = subprocess.run(submit, env=slurm.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    deadline = time.time() + 120
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.time() < deadline, "the job never started"
        time.sleep(0.2)
    state = {"pids": slurm.pids(), "namespaces": slurm.namespaces(), "job_pid": int(pid_file.read_text())}
    (out.parent / "probe.tmp").write_text(json.dumps(state))
    os.replace(out.parent / "probe.tmp", out)
    time.sleep(600)
"""


def namespaces_now() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def leftovers(state: dict) -> list[str]:
    """What of the cluster ``state`` names still exists: live daemons or job, namespaces."""
    pids = [*state["pids"], *([state["job_pid"]] if state["job_pid"] else [])]
    return [f"pid {pid}" for pid in pids if alive(pid)] + sorted(set(state["namespaces"]) & namespaces_now())


def clean_up(state: dict) -> None:
    """Kill and delete what a failed stop left: only what the cluster reported as its own."""
    if not state:
        return
    for pid in [*state["pids"], state["job_pid"]]:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    for name in set(state["namespaces"]) & namespaces_now():
        subprocess.run(["ip", "netns", "delete", name], timeout=30)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        if proc.poll() is not None:
            raise AssertionError(
                f"the inner session ended before the cluster was up: {proc.communicate()[0]}"
            )
        time.sleep(0.3)
    raise TimeoutError(f"the inner session's cluster was not up after {timeout:.0f} s")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_session_stops_its_slurm_cluster(tmp_path, signum):
    (tmp_path / "test_holder.py").write_text(HOLDER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    probe = tmp_path / "probe.json"
    tests = REPO / "tests"
    env = {**os.environ, "PYTHONPATH": f"{tests}:{REPO}", "DLSCALE_TEARDOWN_PROBE": str(probe)}
    cmd = [
        sys.executable, "-m", "pytest", "--noconftest", "-p", "helpers.slurm_fixtures", "-p", "no:cacheprovider",
        "-q", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
        "--basetemp", str(tmp_path / "base"), str(tmp_path / "test_holder.py"),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    state: dict = {}
    try:
        state = wait_for(probe, proc, timeout=300)
        assert len(leftovers(state)) == len(state["pids"]) + 1 + len(state["namespaces"]), "not all up"
        assert alive(state["job_pid"]), "the job is not running"
        proc.send_signal(signum)
        signalled = time.monotonic()
        output, _ = proc.communicate(timeout=240)
        stopped_s = time.monotonic() - signalled
        left = leftovers(state)
    finally:
        if proc.poll() is None:  # the stop hung: end it, then clean up what it left
            proc.kill()
            proc.wait()
        clean_up(state)
    name = signal.Signals(signum).name
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    assert f"{name}: stopping the SLURM test cluster" in output, output[-3000:]
    assert not left, (left, output[-3000:])
    record(
        FaultRow(f"pytest ended by {name}, SLURM cluster up", "slurm", "ended cleanly", round(stopped_s, 1))
    )
