"""BigDL runs of one SLURM allocation share one Spark cluster (``cluster: per_study`` with
the runs grouped into one allocation, as ``--groups`` does: dlscale.runners.bigdl.shared_cluster).

The job is what a job group's Snakemake is inside its allocation, without Snakemake: an
owner process (``OWNER``) takes the allocation's clusters as the Snakefile does
(``owner_env``) and launches two 2-node LeNet runs one after the other, as the training
rule launches them (``python -m dlscale.launch``, every ``SLURM_*`` variable but the job's
identity removed, as the workflow's job step removes them). The first run starts the
cluster (a supervisor, the master on the first node, a worker on each node by one ``srun
--overlap`` step); the second connects to the same master as its own application. The
cluster then outlives the runs inside the allocation, and the job's end (``scancel``:
SIGTERM from SLURM) takes everything down: no supervisor, daemon, executor or srun step
left, and no lease.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from helpers.bigdl_runs import kill_leftovers, processes_mentioning, spec
from helpers.paths import REPO, framework_python
from helpers.slurm_cluster import JOBSTEP_KEEPS

from dlscale.events import read_events
from dlscale.runners.bigdl.shared_cluster import LEASE, read_lease, start_time

pytestmark = pytest.mark.workflow

#: The job group's Snakemake, as far as the runs see it: it owns the allocation's clusters
#: (the Snakefile's owner_env), runs the runs one after another, says it is done, and
#: waits, as a group's Snakemake between runs, until the job ends.
OWNER = """
import json, os, subprocess, sys, time
from pathlib import Path
from dlscale.runners.bigdl.shared_cluster import owner_env
plan = json.loads(Path(sys.argv[1]).read_text())
os.environ.update(owner_env(os.environ, os.getpid(), plan["clusters"]))
codes = []
for run in plan["runs"]:
    codes.append(subprocess.run([
        sys.executable, "-m", "dlscale.launch", "--spec-json", json.dumps(run["spec"]),
        "--data", plan["data"], "--events", run["events"], "--python", sys.executable,
        "--contended-retries", "0",
    ]).returncode)
Path(plan["done"]).write_text(json.dumps(codes))
time.sleep(600)
"""
GONE_WITHIN_S = 40.0


def shared_job(tmp_path: Path, python: Path, data: Path) -> tuple[Path, dict]:
    """The batch script and its plan: two 2-node per_study runs in one allocation."""
    run = spec(nodes=2, iterations=4, warmup=1, timeout_s=420, cluster="per_study")
    plan = {
        "clusters": str(tmp_path / "spark"),
        "data": str(data),
        "done": str(tmp_path / "runs-done.json"),
        "runs": [
            {"spec": run, "events": str(tmp_path / name / "events.jsonl")} for name in ("first", "second")
        ],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "owner.py").write_text(OWNER)
    keep = "|".join(JOBSTEP_KEEPS)
    job = tmp_path / "job.sh"
    job.write_text(
        "#!/bin/bash\n"
        "for var in $(compgen -e); do\n"
        f'  case "$var" in {keep}) ;; SLURM_*|SRUN_*|SBATCH_*) unset "$var" ;; esac\n'
        "done\n"
        f"cd {REPO} && PYTHONPATH={REPO} exec {python} {tmp_path / 'owner.py'} {tmp_path / 'plan.json'}\n"
    )
    job.chmod(0o755)
    return job, plan


def wait_for(path: Path, proc: subprocess.Popen, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    return path.exists()


def test_bigdl_runs_of_one_allocation_share_one_spark_cluster_until_the_job_ends(
    slurm, tmp_path, mnist_shards
):
    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    job, plan = shared_job(tmp_path, framework_python("bigdl"), mnist_shards)
    log = tmp_path / "job.log"
    proc = subprocess.Popen(
        slurm.sbatch_wait(job, log, nodes=2, mem_mb=3000, minutes=8),
        env=slurm.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        done = wait_for(Path(plan["done"]), proc, 420)
        text = log.read_text(errors="replace") if log.exists() else ""
        assert done, (proc.poll(), text[-4000:])
        assert json.loads(Path(plan["done"]).read_text()) == [0, 0], text[-4000:]
        used = [
            json.loads((tmp_path / name / "bigdl-settings.json").read_text())["cluster"]
            for name in ("first", "second")
        ]
        assert [u["how"] for u in used] == ["started", "reused"], used
        assert used[0]["master_pid"] == used[1]["master_pid"], used
        assert used[0]["supervisor_pid"] == used[1]["supervisor_pid"], used
        for name in ("first", "second"):
            events = read_events(tmp_path / name / "events.jsonl")
            assert events[-1]["status"] == "ok", events[-1]
            assert sorted(events[0]["hosts"]) == ["n1", "n2"], events[0]["hosts"]
        # The allocation's own folder, with the cluster still up between runs: the master
        # and the workers' srun step, held by the supervisor until the job ends.
        (lease_path,) = (tmp_path / "spark").glob(f"slurm-*/*/{LEASE}")
        job_id = lease_path.parent.parent.name.removeprefix("slurm-")
        assert slurm.jobs() == [job_id]
        lease = read_lease(lease_path)
        assert lease is not None and {"supervisor", "master", "workers"} <= set(lease.processes), lease
        assert all(start_time(pid) == start for pid, start in lease.processes.values()), lease
        assert "--overlap" in Path(f"/proc/{lease.processes['workers'][0]}/cmdline").read_text()

        slurm._run(["scancel", job_id])  # the job's end: SLURM's SIGTERM to the owner
        proc.communicate(timeout=120)
        deadline = time.monotonic() + GONE_WITHIN_S
        while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not processes_mentioning(str(tmp_path)), "a Spark process outlived the allocation"
        assert not lease_path.exists()
        assert not slurm.jobs()
    finally:
        if proc.poll() is None:
            for queued in slurm.jobs():
                slurm._run(["scancel", queued])
            proc.kill()
            proc.wait()
        left = kill_leftovers(tmp_path)
    assert not left, f"killed leftovers {left}"


def test_a_job_groups_snakemake_owns_its_allocations_clusters_and_runs_share_them_there():
    """The Snakefile's owner variables at each level (owner_env), and where per_study then
    applies under SLURM (choose): only in an allocation whose owner runs in it."""
    from dlscale.runners.bigdl.shared_cluster import (
        ENV_CLUSTERS,
        ENV_OWNER_JOB,
        ENV_OWNER_PID,
        choose,
        owner_env,
    )

    submitting = owner_env({}, 100, "/study/results/spark")  # the study's Snakemake, on a login node
    assert submitting == {ENV_CLUSTERS: "/study/results/spark", ENV_OWNER_PID: "100"}
    group = owner_env({**submitting, "SLURM_JOB_ID": "42"}, 200, "/study/results/spark")
    assert group == {ENV_CLUSTERS: "/study/results/spark/slurm-42", ENV_OWNER_PID: "200", ENV_OWNER_JOB: "42"}
    job = owner_env({**submitting, **group, "SLURM_JOB_ID": "42"}, 300, "/study/results/spark")
    assert job == {k: v for k, v in group.items() if k != ENV_OWNER_JOB}  # a job's own: the group's stand
    nested = owner_env({**group, "SLURM_JOB_ID": "43"}, 400, "/study/results/spark")  # a study run in salloc
    assert nested[ENV_OWNER_JOB] == "43" and nested[ENV_CLUSTERS] == "/study/results/spark/slurm-43"

    me = {ENV_CLUSTERS: "/x", ENV_OWNER_PID: str(os.getpid()), "DLSCALE_SPARK_MODE": "slurm"}
    assert choose("per_study", {**me, "SLURM_JOB_ID": "42", ENV_OWNER_JOB: "42"}) == ("per_study", "asked")
    for alone in ({**me, "SLURM_JOB_ID": "42"}, {**me, "SLURM_JOB_ID": "42", ENV_OWNER_JOB: "41"}, me):
        chosen, why = choose("per_study", alone)
        assert chosen == "per_run" and "--groups" in why, (alone, why)
