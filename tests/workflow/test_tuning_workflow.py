"""The tuning stage through the real workflow (rules/tune.smk): torch LeNet, 2 ranks on 1
node, a grid of oneDNN on/off with 2 repeats each.

The default setting's runs are made to fail at start-up for real (its ranks are given a
master whose name never resolves, RFC 6761 ``.invalid``, in a first invocation that builds
only those runs): they are recorded as failed tuning runs with their reason, the choice
leaves them out and takes the setting that ran (oneDNN off), and the study goes on with it:
the study's run carries the choice in its spec and records it in run_start (a winning
setting reaching the study runs' spec and run_start). Racing (checkpoint tune_race) stops
after the first round: a default without an ok run cannot be raced. Budget: about
1-2 minutes on 2 cores (5 short runs of 2 ranks, the matmul peak, the tables).
"""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest
import yaml
from helpers.paths import ENVS_DIR, REPO
from helpers.workflow import RUNS_TABLE, SNAKEMAKE, planned_jobs, snakemake

from dlscale.catalog import CONFIG_SCHEMA
from dlscale.study import matrix, validation
from dlscale.tune import grid

pytestmark = pytest.mark.workflow

TUNING_TABLE = "results/tune/tuning.csv"  # the choice table (rule tune_report)
STUDY = {
    "frameworks": ["torch"],
    "models": ["lenet"],
    "nodes": [1],
    "ranks_per_node": 2,
    "iterations": {"lenet": 4},
    "warmup": 1,
    "repeats": 1,
    "envs_dir": str(ENVS_DIR),
    "commbench": {"enabled": False},
    "torch": {"channels_last": True},
    "tune": {"enabled": True, "repeats": 2, "options": {"torch": {"mkldnn": [True, False]}}},
}


def validated(config: dict) -> dict:
    return validation.validate_config(config, validation.load_schema(CONFIG_SCHEMA))


def test_a_failing_setting_is_recorded_and_the_choice_reaches_the_study(tmp_path, torch_py, mnist_idx):
    config = {**STUDY, "data": {"mnist": {"source": str(mnist_idx)}}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(config))
    study = validated(config)
    (default_id, default), (off_id, off) = grid.grid_ids(study, "torch").items()
    assert default == {"mkldnn": True} and off == {"mkldnn": False}

    dry = snakemake(tmp_path, "--dry-run")  # plans before any tuning: the choice is a checkpoint
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = planned_jobs(dry.stdout + dry.stderr)
    assert jobs["tune_run"] == 4 and jobs["tune_choice"] == 1 and jobs["train"] == 1
    assert jobs["tune_race"] == 1  # the check after the first round; later rounds follow it

    broken = [grid.run_path("torch", "lenet", default_id, r) for r in range(2)]
    first = subprocess.run(
        [*SNAKEMAKE, *broken, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
         "--profile", str(REPO / "profiles" / "local"), "--configfile", str(tmp_path / "study.yaml")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "DLSCALE_MASTER_ADDR": "no-such-master.invalid"},
    )  # fmt: skip
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]

    # The study goes on: the rest of the grid, the choice, the run, the tables.
    proc = snakemake(tmp_path, RUNS_TABLE, TUNING_TABLE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    choice = json.loads((tmp_path / grid.choice_path("torch", "lenet")).read_text())
    rows = {row["id"]: row for row in choice["settings"]}
    assert rows[default_id]["ok_runs"] == 0 and rows[default_id]["runs"] == 2
    assert any("does not resolve" in reason for reason in rows[default_id]["failed"]), rows[default_id]
    assert rows[off_id]["runs"] == 2 and not rows[off_id]["failed"]
    if rows[off_id]["contended_runs"] < 2:
        assert choice["chosen"] == off_id and choice["chosen_settings"] == off
        assert "default has no ok run" in choice["reason"]
    else:  # a host busy with other work in every attempt: no sample, the default stays
        assert choice["chosen"] == default_id and "no setting has an ok" in choice["reason"]
    chosen = choice["chosen_settings"]
    # The race stopped after its first round: a default without an ok run cannot be raced.
    race = json.loads((tmp_path / grid.race_path("torch", "lenet", 2)).read_text())
    assert race["more"] is False and race["runs"] == 4 and race["budget"] == 4 + 8
    assert rows[default_id]["verdict"].startswith("default: ")
    assert rows[off_id]["n"] == 2 - rows[off_id]["contended_runs"]

    # The study's run: the chosen setting in its spec (and hash) and in run_start.
    events = tmp_path / "results" / "runs" / "torch" / "lenet" / "n1x2" / "b64" / "r0" / "events.jsonl"
    start = json.loads(events.read_text().splitlines()[0])
    assert start["spec"]["options"].get("mkldnn", True) == chosen["mkldnn"]
    run = matrix.Run("torch", "lenet", 1, 2, 64, 0)
    assert start["config_sha256"] == matrix.run_spec(study, run, chosen).sha256
    assert start["settings"]["mkldnn"] == chosen["mkldnn"]
    assert start["settings"]["engine"] == ("onednn" if chosen["mkldnn"] else "native")
    assert start["settings"]["env"]["OMP_NUM_THREADS"] == "1"

    table = pd.read_csv(tmp_path / TUNING_TABLE)
    assert sorted(table["setting"]) == sorted([default_id, off_id])
    assert table["chosen"].sum() == 1
    assert table["verdict"].notna().all()  # why each setting won or lost
    runs = pd.read_csv(tmp_path / "results" / "runs.csv")
    assert "roofline_fraction" in runs and "settings" in runs
    peak = json.loads((tmp_path / "results" / "host" / "matmul_peak.json").read_text())
    ok = runs[runs["status"] == "ok"]
    if "1" in peak.get("refused", {}):  # a busy host: the peak refused, recorded, said per run
        assert "1" not in peak["peak_flops"]
        assert ok["roofline_fraction"].isna().all()
        assert ok["flag"].str.contains("roofline: no fraction", regex=False).all()
    else:
        assert float(peak["peak_flops"]["1"]) > 0
        assert (ok["roofline_fraction"] > 0).all()

    # Cached like runs: nothing to do, the failed tuning runs included.
    assert "Nothing to be done" in snakemake(tmp_path, RUNS_TABLE, TUNING_TABLE, "--dry-run").stdout


def test_pinned_settings_skip_the_grid(tmp_path):
    config = {**STUDY, "torch": {"channels_last": True, "mkldnn": False}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(config))
    dry = snakemake(tmp_path, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = planned_jobs(dry.stdout + dry.stderr)
    assert "tune_run" not in jobs and "tune_choice" not in jobs and jobs["train"] == 1
    assert '"mkldnn": false' in dry.stdout  # the pinned value is the run's option


def test_a_model_the_setting_does_not_change_gets_its_choice_without_a_race(tmp_path, mnist_idx):
    """channels_last on LeNet and the fully connected AutoEncoder: LeNet's race is planned
    (2 settings x 2 repeats), the AutoEncoder's is not (the setting computes as the default
    for it, dlscale.tune.grid.model_grid_report). Its choice is made for real, with no
    tuning run and no race check: the default, unraced, and the setting named with why."""
    config = {
        **STUDY,
        "models": ["lenet", "autoencoder"],
        "iterations": {"lenet": 4, "autoencoder": 4},
        "ranks_per_node": 1,
        "data": {"mnist": {"source": str(mnist_idx)}},
        "tune": {"enabled": True, "repeats": 2, "settings": {"torch": [{"channels_last_all_models": True}]}},
    }
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(config))
    (default_id, _), (channels_last_id, _) = grid.grid_ids(validated(config), "torch").items()
    dry = snakemake(tmp_path, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert planned_jobs(dry.stdout + dry.stderr)["tune_run"] == 4  # LeNet's alone
    assert "results/tune/torch/autoencoder/s" not in dry.stdout

    choice_file = "results/tune/torch/autoencoder/choice.json"
    made = snakemake(tmp_path, choice_file)
    assert made.returncode == 0, made.stderr[-3000:]
    ran = planned_jobs(made.stdout + made.stderr)
    assert "tune_run" not in ran and "tune_race" not in ran and ran["tune_choice"] == 1, ran
    choice = json.loads((tmp_path / choice_file).read_text())
    assert choice["chosen"] == default_id and choice["race"] == {"runs": 0, "budget": 0}
    rows = {row["id"]: row for row in choice["settings"]}
    assert rows[default_id]["runs"] == 0 and rows[default_id]["chosen"]
    assert rows[channels_last_id]["verdict"] == (
        f"not run: the same run as {default_id} for autoencoder (its settings record is identical)"
    )
    assert not (tmp_path / "results/tune/torch/autoencoder" / channels_last_id).exists()
