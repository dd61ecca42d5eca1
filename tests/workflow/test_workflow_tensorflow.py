"""The real workflow with TensorFlow beside the other frameworks: one study, all compared.

The session's tiny four-framework study (tests/workflow/conftest.py: LeNet on real MNIST,
1 and 2 emulated nodes) run by Snakemake as a user would: TensorFlow's runs join the matrix
through its own training rule and come out in the same tables and figures as torch's, with
no change to the analysis.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from helpers.workflow import FOUR_FRAMEWORKS, snakemake

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def study_dir(four_framework_study) -> Path:
    return four_framework_study


def test_both_frameworks_ok_side_by_side(study_dir):
    runs = pd.read_csv(study_dir / "results" / "runs.csv")
    runs = runs[runs["model"] == "lenet"]
    assert sorted(runs["run_id"]) == [
        f"{framework}/lenet/n{nodes}x1/b64/r0"
        for framework in ("bigdl", "caffe", "tensorflow", "torch")
        for nodes in (1, 2)
    ]
    assert (runs["status"] == "ok").all(), runs[["run_id", "reason"]]
    assert (runs["throughput"] > 0).all() and (
        runs["timed_iterations"] == FOUR_FRAMEWORKS["iterations"]["lenet"]
    ).all()
    tf_runs = runs[runs["framework"] == "tensorflow"].set_index("nodes")
    assert tf_runs.loc[1, "comm_s"] == 0 and tf_runs.loc[2, "comm_s"] > 0
    assert tf_runs.loc[1, "speedup"] == 1.0
    assert (tf_runs["loss_last"] < 0.8 * tf_runs["loss_first"]).all()
    assert (tf_runs["startup_s"] > 0).all()
    assert all('"tensorflow": "2.21.0"' in v for v in tf_runs["versions"])
    findings = pd.read_csv(study_dir / "results" / "findings.csv")
    assert findings.set_index("model").loc["lenet", "frameworks"] == "bigdl;caffe;tensorflow;torch"


def test_figures_colour_both_frameworks(study_dir):
    html = (study_dir / "results" / "figures" / "throughput.html").read_text()
    assert "tensorflow" in html and "torch" in html
    assert (study_dir / "results" / "figures" / "breakdown.png").stat().st_size > 0


def test_second_invocation_does_nothing(study_dir):
    proc = snakemake(study_dir, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Nothing to be done" in proc.stdout + proc.stderr
