"""The real workflow with TensorFlow beside PyTorch: one study, both frameworks compared.

A tiny study (LeNet on real MNIST, 1 and 2 emulated nodes) run by Snakemake as a user
would: TensorFlow's runs join the matrix through its own training rule and come out in
the same tables and figures as torch's, with no change to the analysis.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.paths import ENVS_DIR, REPO, framework_python

pytestmark = pytest.mark.workflow

STUDY = {
    "frameworks": ["torch", "tensorflow"],
    "models": ["lenet"],
    "nodes": [1, 2],
    "iterations": {"lenet": 30},
    "warmup": 2,
    "repeats": 1,
    "envs_dir": str(ENVS_DIR),
    "tensorflow": {"strategy": "mwms"},
}


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(workdir), "--profile", str(REPO / "profiles" / "local"),
        "--configfile", str(workdir / "study.yaml"), *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=workdir)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    framework_python("torch")  # built once per machine, as the workflow builds them
    framework_python("tensorflow")
    workdir = tmp_path_factory.mktemp("study-tf")
    (workdir / "study.yaml").write_text(yaml.safe_dump(STUDY))
    proc = snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return workdir


def test_both_frameworks_ok_side_by_side(study_dir):
    runs = pd.read_csv(study_dir / "results" / "runs.csv")
    assert sorted(runs["run_id"]) == [
        "tensorflow/lenet/n1x1/b64/r0",
        "tensorflow/lenet/n2x1/b64/r0",
        "torch/lenet/n1x1/b64/r0",
        "torch/lenet/n2x1/b64/r0",
    ]
    assert (runs["status"] == "ok").all(), runs[["run_id", "reason"]]
    assert (runs["throughput"] > 0).all() and (runs["timed_iterations"] == 30).all()
    tf_runs = runs[runs["framework"] == "tensorflow"].set_index("nodes")
    assert tf_runs.loc[1, "comm_s"] == 0 and tf_runs.loc[2, "comm_s"] > 0
    assert tf_runs.loc[1, "speedup"] == 1.0
    assert (tf_runs["loss_last"] < 0.8 * tf_runs["loss_first"]).all()
    assert (tf_runs["startup_s"] > 0).all()
    assert all('"tensorflow": "2.21.0"' in v for v in tf_runs["versions"])
    findings = pd.read_csv(study_dir / "results" / "findings.csv")
    assert findings.set_index("model").loc["lenet", "frameworks"] == "tensorflow;torch"


def test_figures_colour_both_frameworks(study_dir):
    html = (study_dir / "results" / "figures" / "throughput.html").read_text()
    assert "tensorflow" in html and "torch" in html
    assert (study_dir / "results" / "figures" / "breakdown.png").stat().st_size > 0


def test_second_invocation_does_nothing(study_dir):
    proc = snakemake(study_dir, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Nothing to be done" in proc.stdout + proc.stderr
