"""Start-up bound (issue 22): peer names checked before any server starts, and the
launcher's reason when no rank completes a first step in time. Pure: no framework."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.faults import fault_spec

from dlscale.host.placement import Placement
from dlscale.launch.failures import startup_failure
from dlscale.runners.common import RunFailure, check_peers_resolve, placement_peers, unresolved
from dlscale.runners.plan import LaunchContext, Plan, Process


def test_resolvable_names_pass():
    assert unresolved("127.0.0.1") is None
    assert unresolved("localhost") is None
    check_peers_resolve([("rank 0 (master)", "127.0.0.1:29500"), ("rank 1", "localhost")], rank=1)


def test_unresolvable_name_fails_at_once_naming_it():
    assert unresolved("n2.invalid")
    with pytest.raises(RunFailure) as err:
        check_peers_resolve([("rank 0", "127.0.0.1:1"), ("rank 1", "n2.invalid:39157")], rank=0)
    message = str(err.value)
    assert message.startswith(
        "rank 1 (n2.invalid:39157) unreachable from rank 0: name n2.invalid does not resolve"
    )
    assert "rank 0 (" not in message


def test_placement_peers():
    where = Placement(
        rank=1, world_size=2, local_rank=0, node_rank=1, nodes=2, host="n2",
        master_addr="n1", master_port=29500, launcher="slurm", rank_hosts=("n1", "n2"),
    )  # fmt: skip
    assert placement_peers(where) == [("rank 0 (master)", "n1:29500")]  # gloo and MPI exchange addresses


def test_startup_failure_says_what_each_rank_last_logged():
    plan = Plan([Process("rank 0", ["x"], rank=0), Process("rank 1", ["x"], rank=1)], reporting_ranks=2)
    parts = {0: [{"event": "rank_start"}]}
    assert startup_failure(20, parts, plan) == (
        "no rank completed a first step within 20 s (start-up timeout; peers unreachable?):"
        " last logged rank 0: rank_start, rank 1: nothing"
    )


@pytest.mark.parametrize("framework", ["torch", "tensorflow", "caffe", "bigdl"])
def test_every_framework_has_a_startup_timeout(framework):
    assert fault_spec(framework).options["startup_timeout_s"] == 180


def test_master_address_names_node_0():
    ctx = LaunchContext(
        spec=fault_spec("torch"), python="python", data=Path("d"), work_dir=Path("w"), master_port=1,
        master_addr="n1.invalid", node_addresses=("10.0.0.1", "10.0.0.2"),
    )  # fmt: skip
    assert [ctx.address_of(rank) for rank in range(2)] == ["n1.invalid", "10.0.0.2"]


def test_slurm_master_address_is_the_one_the_second_node_reaches(monkeypatch):
    """Not the host name's address (Debian maps it to 127.0.1.1): the route towards node 2."""
    from dlscale.host import placement
    from dlscale.launch.network import master_address

    asked = []

    def towards(peer):
        asked.append(peer)
        return "10.9.0.1"

    monkeypatch.setattr(placement, "address_towards", towards)
    assert master_address("slurm", {"SLURM_JOB_NODELIST": "cn[07-08]"}) == "10.9.0.1"
    assert asked == ["cn08"]
    assert master_address("slurm", {"SLURM_JOB_NODELIST": "cn07", "DLSCALE_MASTER_ADDR": "a"}) == "a"
    assert master_address("local", {"SLURM_JOB_NODELIST": "cn[07-08]"}) == "127.0.0.1"

    def unroutable(peer):
        raise OSError("no route")

    monkeypatch.setattr(placement, "address_towards", unroutable)
    import socket

    assert master_address("slurm", {"SLURM_JOB_NODELIST": "cn[07-08]"}) == socket.gethostbyname(
        socket.gethostname()
    )


def test_a_rank_turns_only_the_first_sigterm_into_its_end(monkeypatch):
    """SLURM signals every process of a step and a node agent forwards the signal too: the
    second SIGTERM must not interrupt the rank while it writes its end."""
    import signal

    from dlscale.runners import common

    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, common._on_sigterm)
        with pytest.raises(common.Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # ignored: no exception, the process lives on
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_srun_names_the_task_that_failed_first_when_every_rank_was_killed():
    """srun --kill-on-bad-exit SIGKILLs the whole step: no rank writes its end, so the part
    files cannot tell the killed rank from its peers; srun's first task report can."""
    from dlscale.launch.failures import describe_group_failure
    from dlscale.runners.plan import SrunTaskError, first_srun_task_error, srun_task_error

    killed = srun_task_error("srun: error: n3: task 2: Killed\n")
    assert killed == SrunTaskError(2, "n3", "Killed") and str(killed) == "n3: task 2: Killed"
    assert str(srun_task_error("srun: error: cn07: tasks 0-2: Exited with exit code 1")) == (
        "cn07: task 0: Exited with exit code 1"
    )
    assert srun_task_error("srun: launch/slurm: _step_signal: Terminating StepId=14.0") is None
    log = "srun: Job step aborted\nsrun: error: n2: task 1: Killed\nsrun: error: n1: task 0: Terminated\n"
    assert first_srun_task_error(log) == SrunTaskError(1, "n2", "Killed")

    def step(rank: int, n: int) -> list[dict]:
        return [{"event": "rank_start"}, *({"event": "iteration", "iteration": i} for i in range(n))]

    parts = {0: step(0, 5), 1: step(1, 5), 2: step(2, 5), 3: step(3, 4)}
    # Without srun's word the first silent rank is blamed (the old, wrong, answer here).
    assert describe_group_failure("srun (4 ranks)", -9, parts).startswith("rank 0 died")
    reason = describe_group_failure("srun (4 ranks)", -9, parts, killed)
    assert (
        reason == "rank 2 died at iteration 5 (srun: n3: task 2: Killed; srun (4 ranks) exited with SIGKILL)"
    )
    # A rank that failed on its own (it wrote why) is named by its own reason.
    parts[1] = [
        *step(1, 3),
        {"event": "rank_end", "status": "failed", "reason": "loss became nan at iteration 3"},
    ]
    assert describe_group_failure("srun", 1, parts, SrunTaskError(1, "n2", "Exited with exit code 1")) == (
        "loss became nan at iteration 3"
    )
