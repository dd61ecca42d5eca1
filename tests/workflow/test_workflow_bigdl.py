"""The real workflow with BigDL beside the other frameworks: a Spark cluster per job, tables, figures.

The session's tiny four-framework study (tests/workflow/conftest.py: LeNet on real MNIST,
1 and 2 emulated nodes, a few iterations), run by Snakemake on the local profile as a user
runs it. BigDL's runs must land in the same tables as torch's (with BigDL's
compute/communication split), and no Spark daemon may outlive the workflow (the fixture
checks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers.workflow import FOUR_FRAMEWORKS, planned_jobs, snakemake

from dlscale.envs import java_marker

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def study_dir(four_framework_study) -> Path:
    return four_framework_study


ITERATIONS = FOUR_FRAMEWORKS["iterations"]["lenet"] + FOUR_FRAMEWORKS["warmup"]


def test_bigdl_runs_sit_beside_torch_in_the_tables(study_dir):
    runs = pd.read_csv(study_dir / "results" / "runs.csv").set_index("run_id")
    assert {"bigdl/lenet/n1x1/b64/r0", "bigdl/lenet/n2x1/b64/r0", "torch/lenet/n1x1/b64/r0"} <= set(
        runs.index
    )
    assert (runs["status"] == "ok").all(), runs[["status", "reason"]]
    bigdl = runs[runs["framework"] == "bigdl"]
    assert (bigdl["timed_iterations"] == FOUR_FRAMEWORKS["iterations"]["lenet"]).all()
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
    assert (per_run == ITERATIONS).all()  # one reporting driver per BigDL run


def test_bigdl_in_the_figures(study_dir):
    for name in ("throughput", "breakdown"):
        assert '"bigdl"' in (study_dir / "results" / "figures" / f"{name}.html").read_text()


def test_driver_log_kept_and_parsable(study_dir):
    from dlscale.parse.bigdl import parse

    run = study_dir / "results" / "runs" / "bigdl" / "lenet" / "n2x1" / "b64" / "r0"
    assert len(parse(run / "bigdl-driver.log")) == ITERATIONS
    assert not (run / ".work").exists()


def test_java_checked_once_and_nothing_left_to_do(study_dir):
    assert "version" in java_marker(FOUR_FRAMEWORKS["envs_dir"]).read_text()
    proc = snakemake(study_dir, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert planned_jobs(proc.stdout + proc.stderr) == {}


def test_bigdl_runs_shared_the_studys_spark_cluster_and_it_stopped(study_dir):
    """``cluster: per_study``: every BigDL run connected to its node count's shared cluster
    (none fell back to its own), and the workflow's end stopped each (no lease left; the
    fixture checks that no daemon or supervisor process is left)."""
    settings = sorted((study_dir / "results" / "runs" / "bigdl").rglob("bigdl-settings.json"))
    assert len(settings) == len(FOUR_FRAMEWORKS["nodes"]), settings
    used = [json.loads(path.read_text())["cluster"] for path in settings]
    assert all(u["cluster"] == "per_study" for u in used), used
    assert len({u["key"] for u in used}) == len(FOUR_FRAMEWORKS["nodes"])  # one shape each
    assert not list((study_dir / "results" / "spark").glob("*/lease.json"))
