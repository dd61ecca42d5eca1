"""The real workflow, end to end, on the local profile: tables, figures, report, caching.

Runs Snakemake as a user would (a subprocess, a working directory of its own) on a tiny
study: LeNet and the AutoEncoder on real MNIST, 1 and 2 emulated nodes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.paths import ENVS_DIR, REPO
from helpers.workflow import RUNS_TABLE, planned_jobs, snakemake

pytestmark = pytest.mark.workflow

TINY = {
    "frameworks": ["torch"],
    "models": ["lenet", "autoencoder"],
    "nodes": [1, 2],
    # 40 iterations: enough for the AutoEncoder to have learned (a model that did not is left
    # out of every finding; torch's is at MSE ~0.16 after 40, chance 0.23).
    "iterations": {"lenet": 40, "autoencoder": 40},
    "warmup": 2,
    "repeats": 1,
    "envs_dir": str(ENVS_DIR),
}


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory, torch_py) -> Path:
    workdir = tmp_path_factory.mktemp("study")
    (workdir / "study.yaml").write_text(yaml.safe_dump(TINY))
    proc = snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return workdir


def test_tables(study_dir):
    runs = pd.read_csv(study_dir / "results" / "runs.csv")
    assert sorted(runs["run_id"]) == [
        "torch/autoencoder/n1x1/b64/r0",
        "torch/autoencoder/n2x1/b64/r0",
        "torch/lenet/n1x1/b64/r0",
        "torch/lenet/n2x1/b64/r0",
    ]
    assert (runs["status"] == "ok").all(), runs[["run_id", "reason"]]
    assert (runs["throughput"] > 0).all()
    assert sorted(runs["timed_iterations"]) == [40, 40, 40, 40]
    one_node = runs[runs["nodes"] == 1]
    assert (one_node["speedup"] == 1.0).all() and (one_node["comm_s"] == 0).all()
    two_nodes = runs[runs["nodes"] == 2]
    assert (two_nodes["comm_s"] > 0).all()
    assert (two_nodes["efficiency"] == two_nodes["speedup"] / 2).all()
    assert (runs["hosts"].str.split(";").str.len() == runs["world_size"]).all()
    parquet = pd.read_parquet(study_dir / "results" / "runs.parquet")
    assert list(parquet["run_id"]) == list(runs["run_id"])
    iterations = pd.read_parquet(study_dir / "results" / "iterations.parquet")
    assert len(iterations) == (1 + 2) * ((40 + 2) + (40 + 2))  # ranks x iterations
    findings = pd.read_csv(study_dir / "results" / "findings.csv")
    assert sorted(findings["model"]) == ["autoencoder", "lenet"]
    assert (findings["fastest_compute"] == "torch").all()
    assert (findings["best_scaling_nodes"] == 2).all()
    assert (runs["network"] == "host").all()


def test_scaling_model(study_dir):
    """The perfmodel rule calibrates on the 2-node runs and projects to 1024 nodes."""
    out = study_dir / "results" / "perfmodel"
    calibration = pd.read_csv(out / "calibration.csv", dtype={"world_sizes": str})
    assert calibration[["setup", "pattern", "runs"]].values.tolist() == [["torch", "ring", 2]]
    assert calibration.loc[0, "world_sizes"] == "2"
    assert (calibration["beta_Bps"] > 0).all() and (calibration["overhead_s"] >= 0).all()
    projection = pd.read_csv(out / "projection.csv")
    assert sorted(projection["model"].unique()) == ["autoencoder", "lenet"]
    assert (projection["network"] == "th-express2").all()
    assert sorted(projection["nodes"].unique()) == [2**k for k in range(11)]
    one_node = projection[projection["nodes"] == 1]
    assert (one_node["efficiency"] == 1.0).all() and (one_node["comm_s"] == 0.0).all()
    assert projection["efficiency"].between(0, 1).all()
    validation = pd.read_csv(out / "validation.csv")  # no emulated network in this study
    assert validation.empty and "predicted_s" in validation.columns
    figures = study_dir / "results" / "figures"
    for name in ("projection", "validation"):
        assert (figures / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "no runs on an emulated network" in (figures / "validation.svg").read_text()


def test_lenet_loss_falls(study_dir):
    runs = pd.read_csv(study_dir / "results" / "runs.csv").set_index("run_id")
    lenet = runs.loc["torch/lenet/n1x1/b64/r0"]
    assert lenet["loss_last"] < 0.8 * lenet["loss_first"]


def test_every_ok_run_says_what_its_model_learned(study_dir):
    """Held-out quality through the workflow: every ok run evaluated on MNIST's test split,
    after its last iteration, and both models learned."""
    runs = pd.read_csv(study_dir / "results" / "runs.csv").set_index("run_id")
    ok = runs[runs["status"] == "ok"]
    assert ok["final_quality"].notna().all() and (ok["evals"] >= 1).all()
    assert set(ok["quality_metric"]) == {"top1", "mse"}
    assert ok["learned"].all(), ok[["final_quality", "learned"]]
    evals = pd.read_csv(study_dir / "results" / "evals.csv")
    assert set(evals["run_id"]) == set(ok.index)
    assert (evals.loc[evals["metric"] == "top1", "samples"] == 10000).all()
    last = evals.groupby("run_id")["iteration"].max().reindex(ok.index)
    assert (last == ok["timed_iterations"] + 2).all()  # + warm-up


def test_figures_in_three_formats(study_dir):
    figures = study_dir / "results" / "figures"
    for name in ("throughput", "speedup", "breakdown", "loss", "quality", "efficiencies"):
        assert (figures / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"<svg" in (figures / f"{name}.svg").read_bytes()[:2000]
        html = (figures / f"{name}.html").read_text()
        assert "vega" in html and not re.search(r"<script[^>]+src=\"https?://", html)


def test_second_invocation_does_nothing(study_dir):
    proc = snakemake(study_dir, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_deleted_run_is_redone_alone(study_dir):
    run = study_dir / "results" / "runs" / "torch" / "lenet" / "n2x1" / "b64" / "r0"
    for path in sorted(run.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    run.rmdir()
    proc = snakemake(study_dir, "--dry-run")
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs == {"train": 1, "aggregate": 1, "figures": 1, "perfmodel": 1, "all": 1}, jobs
    # The run and the tables (the figures are redone by the next test's last step). The run
    # is named: an aggregate whose tables exist is not redone for a missing input alone.
    events = str((run / "events.jsonl").relative_to(study_dir))
    proc = snakemake(study_dir, events, RUNS_TABLE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run / "events.jsonl").exists()
    assert "torch/lenet/n2x1/b64/r0" in pd.read_csv(study_dir / RUNS_TABLE)["run_id"].tolist()


def test_failed_run_is_recorded_and_redone_alone(study_dir):
    """A run that fails is a failed row; the next invocation redoes it and nothing else."""
    run = study_dir / "results" / "runs" / "torch" / "lenet" / "n2x1" / "b64" / "r0"
    target = str(run.relative_to(study_dir) / "events.jsonl")
    study = yaml.safe_load((study_dir / "study.yaml").read_text())
    bad = {**study, "learning_rate": {"lenet": 1e9}}  # the loss becomes NaN within a few steps
    (study_dir / "study.yaml").write_text(yaml.safe_dump(bad))
    # Only mtime triggers, so that the changed learning rate reaches this one run alone.
    proc = snakemake(study_dir, RUNS_TABLE, "--forcerun", target, "--rerun-triggers", "mtime")
    (study_dir / "study.yaml").write_text(yaml.safe_dump(study))
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_csv(study_dir / "results" / "runs.csv").set_index("run_id")
    row = runs.loc["torch/lenet/n2x1/b64/r0"]
    assert row["status"] == "failed"
    assert "loss became nan at iteration" in row["reason"].lower()
    assert pd.isna(row["throughput"])
    assert (runs.drop(index="torch/lenet/n2x1/b64/r0")["status"] == "ok").all()
    assert len(list((run / "attempts").glob("failed-*.jsonl"))) == 1
    jobs = planned_jobs(snakemake(study_dir, "--dry-run").stdout)
    assert jobs == {"train": 1, "aggregate": 1, "figures": 1, "perfmodel": 1, "all": 1}, jobs
    proc = snakemake(study_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_csv(study_dir / "results" / "runs.csv").set_index("run_id")
    assert runs.loc["torch/lenet/n2x1/b64/r0", "status"] == "ok"
    assert "Nothing to be done" in snakemake(study_dir, "--dry-run").stdout


def test_report(study_dir):
    proc = snakemake(study_dir, "--report", "results/report.html")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (study_dir / "results" / "report.html").read_text()
    assert "findings.csv" in report and "speedup.svg" in report
    assert "projection.svg" in report and "validation_summary.csv" in report


def test_bad_config_fails_before_any_job(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**TINY, "nodes": [1, 0]}))
    proc = snakemake(tmp_path, "--dry-run")
    assert proc.returncode != 0
    assert "config key 'nodes[1]': 0 is less than the minimum of 1" in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()
    # a key given twice: Snakemake's load keeps the last, the study's files are read again
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(TINY) + "nodes: [1, 2]\n")
    proc = snakemake(tmp_path, "--dry-run")
    assert proc.returncode != 0
    assert "study.yaml: key 'nodes' is given twice in one mapping" in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()


def test_large_study_dag_builds_without_importing_torch(tmp_path):
    """4 models x 6 node counts x 3 repeats: the DAG is built from dlscale.study.matrix alone."""
    study = {"nodes": [1, 2, 4, 8, 16, 32], "repeats": 3, "envs_dir": str(tmp_path / "envs")}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['snakemake', '--snakefile', {str(REPO / 'Snakefile')!r}, '--directory',"
        f" {str(tmp_path)!r}, '--configfile', {str(tmp_path / 'study.yaml')!r}, '--dry-run', '--cores', '2']\n"
        "try:\n    runpy.run_module('snakemake', run_name='__main__')\n"
        "except SystemExit as exit:\n    code = exit.code\n"
        "heavy = sorted(m for m in ('torch', 'tensorflow') if m in sys.modules)\n"
        "print('HEAVY', heavy, 'EXIT', code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert "HEAVY [] EXIT 0" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert planned_jobs(proc.stdout + proc.stderr)["train"] == 4 * 6 * 3


def test_envs_are_git_ignored():
    ignored = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", ".venvs/torch/bin/python", "results/runs.csv"],
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == [".venvs/torch/bin/python", "results/runs.csv"]
    assert os.path.isdir(ENVS_DIR)
