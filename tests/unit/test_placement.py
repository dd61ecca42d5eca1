"""Placement from SLURM, the local launcher, or a lone process (dlscale.host.placement)."""

from __future__ import annotations

import pytest

from dlscale.host.placement import detect, expand_hostlist, local_rank_env


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("n1", ["n1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("cn[001-003,007],gpu1", ["cn001", "cn002", "cn003", "cn007", "gpu1"]),
        ("a[9-11]", ["a9", "a10", "a11"]),
        ("x[1,3]y", ["x1y", "x3y"]),
        ("n1,n2", ["n1", "n2"]),
    ],
)
def test_expand_hostlist(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize(
    ("value", "counts"), [("1", [1]), ("2(x3)", [2, 2, 2]), ("2(x3),1", [2, 2, 2, 1]), ("4,2(x2)", [4, 2, 2])]
)
def test_expand_tasks_per_node(value, counts):
    from dlscale.host.placement import expand_tasks_per_node

    assert expand_tasks_per_node(value) == counts


def test_slurm_placement():
    env = {
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2",
        "SLURM_JOB_NUM_NODES": "4",
        "SLURM_JOB_NODELIST": "n[1-4]",
        "SLURMD_NODENAME": "n3",
        "SLURM_JOB_ID": "42",
        "SLURM_TASKS_PER_NODE": "2(x4)",
    }
    where = detect(env)
    assert (where.rank, where.world_size, where.local_rank, where.node_rank, where.nodes) == (5, 8, 1, 2, 4)
    assert where.host == "n3"
    assert where.master_addr == "n1"
    assert where.launcher == "slurm"
    assert where.rank_hosts == ("n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4")
    assert where.rank_hosts[where.rank] == where.host
    assert detect(env).master_port == where.master_port  # every rank agrees on the port


def test_local_launcher_placement_packs_ranks_by_node():
    envs = [local_rank_env(rank, nodes=2, ranks_per_node=3, master_port=1234) for rank in range(6)]
    places = [detect(env) for env in envs]
    assert [p.rank for p in places] == list(range(6))
    assert [p.node_rank for p in places] == [0, 0, 0, 1, 1, 1]
    assert [p.local_rank for p in places] == [0, 1, 2, 0, 1, 2]
    assert {p.world_size for p in places} == {6}
    assert len({p.host for p in places}) == 2
    assert {p.master_port for p in places} == {1234}


def test_local_variables_win_inside_a_slurm_allocation():
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", **local_rank_env(1, 1, 2, 999)}
    assert detect(env).launcher == "local"
    assert detect(env).rank == 1


def test_lone_process():
    where = detect({})
    assert (where.rank, where.world_size, where.launcher) == (0, 1, "single")


def test_bad_variable_is_named():
    with pytest.raises(ValueError, match="SLURM_NTASKS"):
        detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "many"})


SHOW_JOB = (
    "JobId=7 JobName=train UserId=u(1) NodeList=cn[03-04] BatchHost=cn03 NumNodes=2 NumCPUs=48"
    " NumTasks=2 CPUs/Task=24 ReqB:S:C:T=0:0:*:* TRES=cpu=48,mem=120G,node=2 MinCPUsNode=24"
    " MinMemoryNode=60G MinTmpDiskNode=0 Features=(null)"
)


def test_allocation_env_restores_what_the_job_step_took_away():
    """Snakemake's job step leaves SLURM_JOB_ID only: the rest comes from scontrol, once."""
    from dlscale.host.placement import allocation_env

    asked = []

    def show_job(job):
        asked.append(job)
        return SHOW_JOB

    assert allocation_env({"SLURM_JOB_ID": "7"}, show_job) == {
        "SLURM_JOB_NODELIST": "cn[03-04]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_ON_NODE": "24",
        "SLURM_MEM_PER_NODE": str(60 * 1024),
    }
    assert asked == ["7"]
    # What the environment has is kept; nothing is asked outside a job or when all is there.
    partial = allocation_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "x[1-2]"}, show_job)
    assert "SLURM_JOB_NODELIST" not in partial and partial["SLURM_CPUS_ON_NODE"] == "24"
    full = {"SLURM_JOB_ID": "7", **dict.fromkeys(
        ("SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_CPUS_ON_NODE", "SLURM_MEM_PER_NODE"), "1"
    )}  # fmt: skip
    assert allocation_env(full, show_job) == {} and allocation_env({}, show_job) == {}
    assert asked == ["7", "7"]


def test_allocation_env_is_empty_when_slurm_cannot_say():
    import subprocess

    from dlscale.host.placement import allocation_env, allocation_from_show_job

    def failing(job):
        raise subprocess.CalledProcessError(1, ["scontrol"])

    assert allocation_env({"SLURM_JOB_ID": "7"}, failing) == {}
    per_cpu = allocation_from_show_job("NodeList=n1 NumNodes=1 NumCPUs=4 MinMemoryCPU=500M")
    assert per_cpu == {
        "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_NUM_NODES": "1", "SLURM_CPUS_ON_NODE": "4",
        "SLURM_MEM_PER_NODE": "2000",
    }  # fmt: skip
    assert allocation_from_show_job("NodeList=(null) NumNodes=0") == {}
