"""The launcher's pure parts, one module at a time: the wording of failures, the records it
merges from part files, the attempts it keeps, its network phrases, its process control and
its log lines. No framework, no rank of a real run: the fault suites run those."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlscale.base.logsetup import log_to_streams
from dlscale.events import read_events
from dlscale.launch import attempts, failures, network, process, records
from dlscale.runners.plan import SrunTaskError
from dlscale.runspec import RunSpec

RUN_ID = "torch/lenet/n2x1/b64/r0"
SPEC = {
    "framework": "torch",
    "model": "lenet",
    "nodes": 2,
    "ranks_per_node": 1,
    "batch": 64,
    "repeat": 0,
    "run_id": RUN_ID,
    "world_size": 2,
    "scaling": "weak",
    "global_batch": 128,
    "dataset": "mnist",
    "iterations": 3,
    "warmup": 1,
    "threads_per_rank": 1,
    "learning_rate": 0.01,
    "seed": 1234,
    "timeout_s": 60,
}


def iteration(rank: int, i: int, *, warmup: bool = False, at: float = 100.0) -> dict:
    event = {
        "event": "iteration",
        "rank": rank,
        "iteration": i,
        "samples": 64,
        "step_s": 0.5,
        "compute_s": 0.4,
        "comm_s": 0.1,
        "loss": 1.0,
        "time": at + i,
    }
    return {**event, "warmup": True} if warmup else event


def rank_events(rank: int, steps: int, **end) -> list[dict]:
    events = [{"event": "rank_start", "rank": rank, "host": f"cn{rank}", "versions": {"python": "3"}}]
    events += [iteration(rank, i, warmup=i == 0) for i in range(steps)]
    return [*events, {"event": "rank_end", **end}] if end else events


def merged(parts: dict, tmp_path: Path, **overrides) -> list[dict]:
    spec = RunSpec.from_dict(SPEC)
    kwargs = {
        "spec": spec,
        "spec_data": SPEC,
        "failure": None,
        "run_dir": tmp_path / "runs" / RUN_ID,
        "reporting_ranks": 2,
        "started": 99.0,
        "loadavg_start": [0.1, 0.1, 0.1],
        "config_sha256": "abc",
        "repo": tmp_path,  # not a git repository: git_sha says unknown
        "mode": "local",
        "network_info": {"name": "host", "isolation": "namespace"},
        "settings": {"env": {}},
        "exit_warnings": {},
        **overrides,
    }
    return records.merge(parts, **kwargs)


# --- failures: a reason a person understands ----------------------------------------------


def test_a_rank_that_dies_is_named_with_its_signal_and_the_iteration_it_was_in():
    assert (
        failures.describe_failure("rank 1", -9, rank_events(1, 3)) == "rank 1 died (SIGKILL) at iteration 3"
    )
    assert (
        failures.describe_failure("rank 0", 3, []) == "rank 0 exited with status 3 before its first iteration"
    )


def test_a_rank_that_said_why_it_failed_is_believed():
    events = rank_events(0, 2, status="failed", reason="loss is NaN at iteration 2")
    assert failures.describe_failure("rank 0", 1, events) == "loss is NaN at iteration 2"


def test_a_group_failure_names_the_rank_that_died_not_the_ones_torn_down():
    parts = {
        0: rank_events(0, 2, status="failed", reason="terminated by SIGTERM"),
        1: rank_events(1, 2),
    }
    assert (
        failures.describe_group_failure("mpirun", 1, parts)
        == "rank 1 died at iteration 2 (mpirun exited with 1)"
    )
    assert (
        failures.describe_group_failure("srun", -9, {}) == "srun exited with SIGKILL before any rank started"
    )


def test_srun_first_report_names_the_rank_when_every_rank_was_killed():
    parts = {0: rank_events(0, 2), 1: rank_events(1, 1)}
    first = SrunTaskError(1, "cn2", "Killed")
    assert (
        failures.describe_group_failure("srun", -9, parts, first)
        == "rank 1 died at iteration 1 (srun: cn2: task 1: Killed; srun exited with SIGKILL)"
    )


def test_an_exit_after_every_rank_ended_ok_is_a_warning_not_the_runs_failure():
    """srun exits 143 when one task aborts in teardown after every rank wrote its ok end
    (docs/teardown.md): the measurement stands; any rank without an ok end makes it a failure."""
    ok = {rank: rank_events(rank, 3, status="ok") for rank in (0, 1)}
    assert (
        failures.exit_after_end("srun (2 ranks)", None, 143, ok, reporting_ranks=2)
        == "srun (2 ranks) exited with 143 after every rank had recorded its end"
    )
    assert (
        failures.exit_after_end("rank 1", 1, -6, ok, reporting_ranks=2)
        == "rank 1 finished, then exited with -6"
    )
    one_failed = {**ok, 1: rank_events(1, 3, status="failed", reason="loss became nan at iteration 2")}
    no_end = {**ok, 1: rank_events(1, 2)}
    for parts in (one_failed, no_end, {0: ok[0]}, {}):  # {0: ...}: rank 1 never started
        assert failures.exit_after_end("srun (2 ranks)", None, 143, parts, reporting_ranks=2) is None
    assert failures.exit_after_end("rank 1", 1, -6, no_end, reporting_ranks=2) is None


# --- records: part files and the spec in, the run's events out ------------------------------


def test_a_part_file_cut_off_by_a_killed_rank_keeps_what_came_before(tmp_path):
    (tmp_path / "rank0.jsonl").write_text(json.dumps(iteration(0, 0)) + '\n{"event": "itera')
    (tmp_path / "rank1.jsonl").write_text("")
    assert records.read_parts(tmp_path) == {0: [iteration(0, 0)], 1: []}


def test_a_spec_that_is_not_a_run_says_why():
    assert records.read_spec("{")[2].startswith("bad run spec: not JSON")
    spec, raw, why = records.read_spec(json.dumps({"framework": "torch"}))
    assert spec is None and raw == {"framework": "torch"} and "'model'" in why
    assert records.read_spec(json.dumps(SPEC))[0] == RunSpec.from_dict(SPEC)


def test_a_bad_spec_is_recorded_under_the_run_its_folder_names(tmp_path):
    identity = records.identity_of_bad_spec(tmp_path / "runs" / RUN_ID, {})
    assert identity["run_id"] == RUN_ID and identity["world_size"] == 2 and identity["global_batch"] == 128
    assert records.identity_of_bad_spec(tmp_path / "elsewhere", {"world_size": 3}) == {"world_size": 3}
    assert records.identity_of_bad_spec(tmp_path / "elsewhere", {"world_size": True}) == {"world_size": 1}


def test_every_iteration_in_is_an_ok_run_with_its_start_up_time(tmp_path):
    parts = {r: rank_events(r, 4, status="ok", warnings=[f"rank {r} said so"]) for r in (0, 1)}
    events = merged(parts, tmp_path, exit_warnings={0: "rank 0 finished, then exited with 1"})
    start, *steps, end = events
    assert (
        start["run_id"] == RUN_ID
        and start["hosts"] == ["cn0", "cn1"]
        and start["versions"] == {"python": "3"}
    )
    assert start["git_sha"] == "unknown" and start["config_sha256"] == "abc" and start["launcher"] == "local"
    assert start["network"] == "host" and start["time"] == 99.0
    assert start["startup_s"] == pytest.approx(100.0 + 1 - 0.5 - 99.0)  # to the first timed step's start
    assert len(steps) == 8 and end["status"] == "ok" and end["reason"] is None
    assert end["warnings"] == ["rank 0 finished, then exited with 1", "rank 0 said so", "rank 1 said so"]


def test_a_missing_iteration_or_the_launchers_reason_fails_the_run(tmp_path):
    parts = {0: rank_events(0, 4), 1: rank_events(1, 3)}
    assert merged(parts, tmp_path)[-1]["reason"] == "expected 8 iteration events, found 7"
    end = merged(parts, tmp_path, failure="rank 1 died (SIGKILL) at iteration 3")[-1]
    assert end["status"] == "failed" and end["reason"] == "rank 1 died (SIGKILL) at iteration 3"


# --- attempts: what a failed or redone attempt leaves --------------------------------------


def test_an_ok_run_is_recorded_and_a_failed_one_kept_under_attempts(tmp_path):
    run_dir = tmp_path / "runs" / RUN_ID
    parts = {r: rank_events(r, 4) for r in (0, 1)}
    end, failed = attempts.record(run_dir / "events.jsonl", merged(parts, tmp_path))
    assert failed is None and end["status"] == "ok" and not (run_dir / "attempts").exists()
    end, failed = attempts.record(run_dir / "events.jsonl", merged(parts, tmp_path, failure="rank 1 died"))
    assert failed.startswith("failed-") and end["reason"] == f"rank 1 died (logs: attempts/{failed}/)"
    assert read_events(run_dir / "events.jsonl") == read_events(run_dir / "attempts" / f"{failed}.jsonl")


def test_a_rank_that_wrote_an_invalid_event_fails_the_run(tmp_path):
    run_dir = tmp_path / "runs" / RUN_ID
    parts = {0: rank_events(0, 4), 1: [*rank_events(1, 3), {**iteration(1, 3), "step_s": -1.0}]}
    end, failed = attempts.record(run_dir / "events.jsonl", merged(parts, tmp_path))
    assert failed and end["reason"].startswith("a rank wrote an invalid event: ")
    assert [e["event"] for e in read_events(run_dir / "events.jsonl")] == ["run_start", "run_end"]


def test_a_redone_attempt_is_kept_with_its_part_of_the_log(tmp_path):
    run_dir = tmp_path / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    run_log = run_dir / "run.log"
    run_log.write_text("[launch] before\n")
    offset = attempts.log_size(run_log)
    with open(run_log, "a") as log:
        log.write("[launch] this attempt\n")
    events = merged({r: rank_events(r, 4) for r in (0, 1)}, tmp_path)
    redone = attempts.keep_redone(run_dir, events, run_dir / ".work", run_log, offset)
    assert redone.startswith("contended-")
    kept = read_events(run_dir / "attempts" / f"{redone}.jsonl")
    assert kept[-1]["attempt_logs"] == f"attempts/{redone}/" and kept[-1]["reason"] is None
    assert (run_dir / "attempts" / redone / "run.log").read_text() == "[launch] this attempt\n"
    assert attempts.log_size(None) == 0 and attempts.log_size(tmp_path / "none") == 0


# --- network: where ranks meet, what they cross ---------------------------------------------


def test_launch_mode_is_slurm_only_inside_an_allocation_with_srun(monkeypatch):
    monkeypatch.setattr(network.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert network.launch_mode({"SLURM_JOB_ID": "7"}) == "slurm"
    assert network.launch_mode({"SLURM_JOB_ID": "7", "DLSCALE_LAUNCHER": "local"}) == "local"
    assert network.launch_mode({}) == "local"
    monkeypatch.setattr(network.shutil, "which", lambda name: None)
    assert network.launch_mode({"SLURM_JOB_ID": "7"}) == "local"


def test_the_progress_line_says_what_the_traffic_crosses():
    emulated = {"preset": "1gbe", "bandwidth_Bps": 125e6, "node_addresses": ["10.0.0.1", "10.0.0.2"]}
    assert network.describe_network(emulated) == (
        "emulated 1gbe (1 Gbit/s per node link, nodes at 10.0.0.1, 10.0.0.2)"
    )
    assert network.describe_network({"isolation": "namespace"}) == "loopback only (own network namespace)"
    assert network.describe_network({"isolation": "none (SLURM allocation: x)"}).startswith("the cluster's")
    assert network.describe_network({"isolation": "none (no root)"}) == "host loopback, none (no root)"


# --- process control -----------------------------------------------------------------------


def test_a_rank_runs_in_its_own_session_and_is_killed_when_it_ignores_sigterm():
    proc = process.spawn(["sh", "-c", 'trap "" TERM; echo ready; sleep 30'], os.environ, pipe_stderr=False)
    try:
        assert os.getsid(proc.pid) == proc.pid
        time.sleep(0.3)  # the trap is set
        began = time.time()
        process.stop([proc], grace_s=0.5)
        assert proc.returncode == -signal.SIGKILL and time.time() - began < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_relayed_stderr_reaches_ours_and_every_line_is_seen(capfd):
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stderr.write('one\\nsrun: error: cn2: task 1: Killed\\n')"],
        stderr=subprocess.PIPE,
    )
    seen: list[str] = []
    thread = process.relay_stderr(proc.stderr, "relay-test", seen.append)
    proc.wait()
    thread.join(timeout=10)
    assert seen == ["one\n", "srun: error: cn2: task 1: Killed\n"]
    assert "srun: error: cn2" in capfd.readouterr().err


# --- log lines -----------------------------------------------------------------------------


def test_log_lines_carry_the_prefix_progress_on_stdout_trouble_on_stderr(capsys):
    name = "dlscale.test_launch_units"
    logger = log_to_streams(name, "launch")
    try:
        logging.getLogger(f"{name}.child").info("ok: %s (%.1f s)", "events.jsonl", 1.25)
        logging.getLogger(f"{name}.child").error("FAILED: %s", "rank 1 died")
        out = capsys.readouterr()
        assert out.out == "[launch] ok: events.jsonl (1.2 s)\n"
        assert out.err == "[launch] FAILED: rank 1 died\n"
        log_to_streams(name, "launch")  # again: still one line each
        logger.warning("once")
        assert capsys.readouterr().err == "[launch] once\n"
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
