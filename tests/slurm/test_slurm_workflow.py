"""The workflow through the SLURM profile, on a real 4-node SLURM cluster on this host.

One study of all four frameworks (torch, TensorFlow MWMS, Caffe with ``srun --mpi=pmix``,
BigDL on a Spark cluster started inside the allocation), LeNet, at 1 and 2 nodes, runs
through ``profiles/slurm`` as a user types it (no test-only variable: the cluster's nodes
have their own names, addresses and links; one test-only flag, FAST_STATUS_CHECKS, makes
the plugin poll sooner). 2 nodes, not the cluster's 4: every rank on a node of its own is
checked as well, two 2-node runs fit the cluster at once, and a BigDL run is 6 JVMs on
this 2-core host instead of 10 (at 1 and 4 nodes the study took 231 s, its BigDL runs
~95 s each, 2026-12-03). The torch 2-node run's rank 1 is killed mid-run, so the first
invocation records it as failed and completes the rest; the second, plain invocation
submits exactly that one training job again and finishes the tables and figures with 2
distinct hosts in every framework's 2-node run. A second study groups runs of 1 and 2
nodes into one allocation (``--groups``), as the README offers for busy queues.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.bigdl_runs import processes_mentioning
from helpers.paths import ENVS_DIR, REPO
from helpers.slurm_cluster import FAST_STATUS_CHECKS, SlurmCluster, alive
from helpers.slurm_jobs import kill_rank_when_running
from helpers.workflow import RUNS_TABLE, planned_jobs

from dlscale.events import read_events

pytestmark = pytest.mark.workflow

STUDY = {
    "frameworks": ["torch", "tensorflow", "caffe", "bigdl"],
    "models": ["lenet"],
    "nodes": [1, 2],
    # The kill comes after 5 iterations (warm-up included), polled every 20 ms: 17 quiet torch
    # steps of ~16 ms are left to catch it in. BigDL's steps are the study's cost (a Spark job
    # each): 60 iterations made its three runs most of the test.
    "iterations": {"lenet": 20},
    "warmup": 2,
    "mem_per_rank_mb": 1500,  # BigDL: a 1 GB executor per node, the driver on node 1
    "run_timeout_min": 10,
    "envs_dir": str(ENVS_DIR),
    "tensorflow": {"strategy": "mwms"},
    "caffe": {"time_iterations": 2},  # the layer times' job, as the local shared study's
    "bigdl": {"driver_memory": "1g", "executor_memory": "1g", "startup_timeout_s": 300},
    "projection": {"bootstrap": 20},  # the band from 20 refits, not 200: the rule runs as it does
}
TWO_NODES = Path("results/runs/torch/lenet/n2x1/b64/r0")


def test_cluster_is_wired_like_a_cluster_and_sealed(slurm):
    """Each node its own namespace, name and address on the bridge; no link to the host's.

    SLURM binds every interface, so the cluster's namespaces hold only loopbacks, the
    bridge and the veth pairs between them: nothing reaches (or is reached from) outside.
    """
    ports = {f"p{i}": "veth" for i in range(slurm.nodes)}
    assert slurm.interfaces() == {"lo": "loopback", "br0": "bridge", **ports}
    for node in slurm.node_names:
        assert slurm.interfaces(node) == {"lo": "loopback", "eth0": "veth"}
    host_links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert slurm.netns not in host_links
    # Every node is named after itself, and every name resolves to its node's address.
    probe = subprocess.run(
        [*slurm.netns_prefix("n2"), "sh", "-c", "hostname; getent hosts n1 n4 ctl"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    lines = probe.stdout.split()
    assert lines[0] == "n2", probe
    assert dict(zip(lines[2::2], lines[1::2], strict=True)) == {
        "n1": slurm.address("n1"), "n4": slurm.address("n4"), "ctl": slurm.address("ctl"),
    }  # fmt: skip
    assert (slurm.base / "munge" / "munge.key").stat().st_mode & 0o077 == 0  # owner only


def snakemake(cluster: SlurmCluster, workdir: Path, *args: str, wait: bool = True):
    # Targets and flags first: --configfile takes several values.
    cmd = [
        *cluster.netns_prefix(), sys.executable, "-m", "snakemake", *args, "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(workdir), "--profile", str(REPO / "profiles" / "slurm"), *FAST_STATUS_CHECKS,
        "--configfile", str(workdir / "study.yaml"),
    ]  # fmt: skip
    env = cluster.env()  # what a user's shell has: nothing test-only for the jobs
    if not wait:
        return subprocess.Popen(
            cmd, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(cmd, env=env, cwd=workdir, capture_output=True, text=True, timeout=900)


def run_ids(study: dict) -> list[str]:
    return [
        f"{fw}/{model}/n{nodes}x1/b64/r0"
        for fw in study["frameworks"]
        for model in study["models"]
        for nodes in study["nodes"]
    ]


def test_study_through_slurm_with_a_failure_and_a_rerun(
    slurm, tmp_path, torch_py, caffe_py, mnist_idx, four_framework_study
):
    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    # The namespace has no route to PyPI: MNIST comes from a local copy of the idx files.
    study = {**STUDY, "data": {"mnist": {"source": str(mnist_idx)}}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    before = len(slurm.sbatch_calls())  # the session's cluster: other tests' calls come first
    first = snakemake(slurm, tmp_path, wait=False)
    try:
        killed = kill_rank_when_running(tmp_path / TWO_NODES, rank=1, min_iterations=5, timeout=900)
        output, _ = first.communicate(timeout=1500)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, output[-4000:]
    assert not alive(killed)

    runs = pd.read_csv(tmp_path / "results" / "runs.csv").set_index("run_id")
    failed = runs.loc["torch/lenet/n2x1/b64/r0"]
    assert failed["status"] == "failed"
    assert failed["reason"].startswith("rank 1 died at iteration"), failed["reason"]
    others = [run for run in run_ids(study) if run != "torch/lenet/n2x1/b64/r0"]
    assert sorted(runs.index) == sorted(run_ids(study))
    not_ok = runs.loc[others].query("status != 'ok'")["reason"].to_dict()
    assert not not_ok, not_ok
    assert not slurm.jobs(), "a job outlived the run"

    dry = snakemake(slurm, tmp_path, "--dry-run")
    assert planned_jobs(dry.stdout + dry.stderr) == {
        "train": 1,
        "aggregate": 1,
        "figures": 1,
        "perfmodel": 1,
        "all": 1,
    }
    one_node_before = (tmp_path / "results/runs/torch/lenet/n1x1/b64/r0/events.jsonl").stat().st_mtime_ns

    second = snakemake(slurm, tmp_path)
    assert second.returncode == 0, second.stderr[-4000:]
    submitted = (second.stdout + second.stderr).count("has been submitted with SLURM jobid")
    assert submitted == 1, second.stderr[-4000:]  # exactly one training job ran on the rerun
    assert (
        tmp_path / "results/runs/torch/lenet/n1x1/b64/r0/events.jsonl"
    ).stat().st_mtime_ns == one_node_before

    two_node_calls = [
        call for call in slurm.sbatch_calls()[before:] if "--nodes=2" in call and "torch" in call
    ]
    assert len(two_node_calls) == 2  # the failed attempt and its rerun
    for option in ("--ntasks=2", "--cpus-per-task=1", "--mem 1500", "-t 15"):
        assert option in two_node_calls[-1], two_node_calls[-1]
    print("sbatch line of the 2-node run:", two_node_calls[-1])

    runs = pd.read_csv(tmp_path / "results" / "runs.csv").set_index("run_id")
    assert (runs["status"] == "ok").all(), runs["reason"]
    print(runs[["status", "samples_per_s"]].to_string() if "samples_per_s" in runs else runs["status"])
    for framework in study["frameworks"]:
        events = read_events(tmp_path / "results/runs" / framework / "lenet/n2x1/b64/r0/events.jsonl")
        start = events[0]
        assert start["launcher"] == "slurm", framework
        # Every rank on a node of its own (BigDL: a rank is the executor on its node).
        hosts = sorted(start["hosts"])
        assert len(set(hosts)) == 2 and set(hosts) <= set(slurm.node_names), (framework, hosts)
    events = read_events(tmp_path / TWO_NODES / "events.jsonl")
    assert {e["rank"] for e in events if e["event"] == "iteration"} == {0, 1}
    # Caffe's ranks found each other by srun --mpi=pmix, with no Open MPI variable set.
    caffe = read_events(tmp_path / "results/runs/caffe/lenet/n2x1/b64/r0/events.jsonl")
    caffe_steps = [e for e in caffe if e["event"] == "iteration"]
    assert {e["rank"] for e in caffe_steps} == {0, 1} and all(e["comm_s"] > 0 for e in caffe_steps)
    assert "srun --mpi" in (tmp_path / "results/runs/caffe/lenet/n2x1/b64/r0/run.log").read_text()
    # BigDL trained on one executor per node, each bound to its node's address, and
    # every rank's host is its node (the executors' mapped from where they registered).
    bigdl = tmp_path / "results/runs/bigdl/lenet/n2x1/b64/r0"
    executors = next(
        line
        for line in (bigdl / "run.log").read_text().splitlines()
        if line.startswith("[bigdl] executors: ")
    )
    for host in read_events(bigdl / "events.jsonl")[0]["hosts"]:
        assert f"on {host} at {slurm.address(host)}" in executors, executors
    driver_log = (bigdl / "bigdl-driver.log").read_text(errors="replace")
    assert "Executor number is 2 and executor cores number is 1" in driver_log
    assert not processes_mentioning(str(tmp_path)), "a Spark daemon, executor or rank outlived the study"

    # Compared with the session's study of the same four frameworks on the local profile
    # (issue 30): the LeNet cells match, and the page states that the two ran on other hosts
    # under another launcher.
    compared = tmp_path / "compared"
    proc = subprocess.run(
        [sys.executable, "-m", "dlscale.compare.comparison", str(four_framework_study / "results"),
         str(tmp_path / "results"), "--out", str(compared)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = pd.read_csv(compared / "comparison.csv")
    assert set(rows["framework"]) == set(study["frameworks"])
    assert set(rows["change"]) <= {"improved", "regressed", "no change"}
    # Every cell of the SLURM study is compared or listed with why: a cell whose repeats the
    # busy host contended in either study has no sample to compare.
    unmatched = pd.read_csv(compared / "unmatched.csv")
    cells = {(fw, "lenet", nodes) for fw in study["frameworks"] for nodes in study["nodes"]}
    listed = set(zip(unmatched["framework"], unmatched["model"], unmatched["nodes"], strict=True))
    assert cells <= set(zip(rows["framework"], rows["model"], rows["nodes"], strict=True)) | listed
    assert unmatched["why"].str.match(r"(no ok, uncontended repeat|not run) in ").all(), unmatched
    diffs = pd.read_csv(compared / "differences.csv", keep_default_na=False).set_index("fact")
    launcher = diffs.loc["launcher (profile)"]
    assert "local" in launcher.iloc[-2] and "slurm" in launcher.iloc[-1], launcher
    assert diffs.loc["hosts", "hardware"] in (True, "True"), diffs.loc["hosts"]
    assert "n1" in diffs.loc["hosts"].iloc[-1]
    page = (compared / "comparison.html").read_text()
    assert "slurm" in page and "launcher" in page
    for name in ("throughput", "speedup", "breakdown", "loss"):
        assert (tmp_path / "results" / "figures" / f"{name}.png").stat().st_size > 0


def test_runs_of_any_size_share_one_allocation_when_grouped(slurm, tmp_path, torch_py, mnist_idx):
    """``--groups train=runs``: a 1-node and a 2-node run in one sbatch, one after the other.

    Every training run has the same ``mpi`` resource, so runs of one rank (no srun step of
    their own) and of many can share a group; the group asks for the larger run's nodes.
    """
    study = {
        **STUDY, "frameworks": ["torch"], "nodes": [1, 2], "iterations": {"lenet": 20},
        "data": {"mnist": {"source": str(mnist_idx)}},
    }  # fmt: skip
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    before = len(slurm.sbatch_calls())
    grouped = snakemake(slurm, tmp_path, RUNS_TABLE, "--groups", "train=runs", "--group-components", "runs=2")
    assert grouped.returncode == 0, grouped.stderr[-4000:]
    calls = slurm.sbatch_calls()[before:]
    train_calls = [call for call in calls if "train" in call]
    assert len(train_calls) == 1, calls  # both runs in one allocation
    assert "--nodes=2" in train_calls[0] and "-t 30" in train_calls[0], train_calls[0]
    runs = pd.read_csv(tmp_path / "results" / "runs.csv").set_index("run_id")
    assert sorted(runs.index) == ["torch/lenet/n1x1/b64/r0", "torch/lenet/n2x1/b64/r0"]
    assert (runs["status"] == "ok").all(), runs["reason"]
    one, two = (
        read_events(tmp_path / f"results/runs/torch/lenet/n{n}x1/b64/r0/events.jsonl")[0] for n in (1, 2)
    )
    assert one["launcher"] == two["launcher"] == "slurm"
    assert sorted(two["hosts"]) == ["n1", "n2"]
