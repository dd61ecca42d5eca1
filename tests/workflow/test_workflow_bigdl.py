"""The real workflow with BigDL beside PyTorch: a Spark cluster per job, tables, figures.

A tiny study (LeNet on real MNIST, 1 and 2 emulated nodes, a few iterations), run by
Snakemake on the local profile as a user runs it. BigDL's runs must land in the same
tables as torch's (with BigDL's compute/communication split), and no Spark daemon may
outlive the workflow.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.bigdl_runs import processes_mentioning
from helpers.paths import ENVS_DIR, REPO

from dlscale.envs import java_marker

pytestmark = pytest.mark.workflow


def snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--profile", str(REPO / "profiles" / "local"), "--configfile", str(workdir / "study.yaml"), *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)


def planned_jobs(output: str) -> dict[str, int]:
    """Job counts from Snakemake's 'Job stats' table of a dry run (empty: nothing to do)."""
    if "Job stats" not in output:
        return {}
    table = output.split("Job stats", 1)[1]
    found = (re.fullmatch(r"(\w+)\s+(\d+)", line.strip()) for line in table.splitlines())
    return {m[1]: int(m[2]) for m in found if m and m[1] != "total"}


TINY = {
    "frameworks": ["torch", "bigdl"],
    "models": ["lenet"],
    "nodes": [1, 2],
    "iterations": {"lenet": 8},
    "warmup": 2,
    "repeats": 1,
    "learning_rate": {"lenet": 0.02},
    "envs_dir": str(ENVS_DIR),
    "bigdl": {"driver_memory": "1g", "executor_memory": "1g"},
}


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory, torch_py) -> Path:
    from helpers.paths import framework_python

    framework_python("bigdl")  # built once per machine, as the other tests build theirs
    workdir = tmp_path_factory.mktemp("bigdl-study")
    (workdir / "study.yaml").write_text(yaml.safe_dump(TINY))
    try:
        proc = snakemake(workdir, timeout=1200)
    finally:
        leftovers = processes_mentioning(str(workdir))
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert not leftovers, f"Spark or runner processes outlived the workflow: {leftovers}"
    return workdir


def test_bigdl_runs_sit_beside_torch_in_the_tables(study_dir):
    runs = pd.read_csv(study_dir / "results" / "runs.csv").set_index("run_id")
    assert sorted(runs.index) == [
        "bigdl/lenet/n1x1/b64/r0",
        "bigdl/lenet/n2x1/b64/r0",
        "torch/lenet/n1x1/b64/r0",
        "torch/lenet/n2x1/b64/r0",
    ]
    assert (runs["status"] == "ok").all(), runs[["status", "reason"]]
    bigdl = runs[runs["framework"] == "bigdl"]
    assert (bigdl["timed_iterations"] == 8).all()
    assert (bigdl["throughput"] > 0).all()
    # BigDL's split: compute from its Metrics Summary, the rest of the step is communication.
    assert (bigdl["compute_s"] > 0).all() and (bigdl["comm_s"] > 0).all()
    assert (bigdl["compute_s"] + bigdl["comm_s"] - bigdl["step_s"]).abs().max() < 0.5 * bigdl["step_s"].max()
    assert (bigdl["startup_s"] > 0).all()  # JVM + Spark start-up, on record per job
    assert (bigdl["hosts"].str.split(";").str.len() == bigdl["world_size"]).all()
    assert runs.loc["bigdl/lenet/n2x1/b64/r0", "global_batch"] == 128
    assert runs.loc["bigdl/lenet/n2x1/b64/r0", "speedup"] > 0
    iterations = pd.read_parquet(study_dir / "results" / "iterations.parquet")
    per_run = iterations[iterations["framework"] == "bigdl"].groupby("run_id").size()
    assert (per_run == 8 + 2).all()  # one reporting driver per BigDL run


def test_bigdl_in_the_figures(study_dir):
    for name in ("throughput", "breakdown"):
        assert '"bigdl"' in (study_dir / "results" / "figures" / f"{name}.html").read_text()


def test_driver_log_kept_and_parsable(study_dir):
    from dlscale.parse.bigdl import parse

    run = study_dir / "results" / "runs" / "bigdl" / "lenet" / "n2x1" / "b64" / "r0"
    assert len(parse(run / "bigdl-driver.log")) == 10
    assert not (run / ".work").exists()


def test_java_checked_once_and_nothing_left_to_do(study_dir):
    assert "version" in java_marker(TINY["envs_dir"]).read_text()
    proc = snakemake(study_dir, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert planned_jobs(proc.stdout + proc.stderr) == {}
