"""What each framework learned, through the workflow: the session's four-framework study
(tests/workflow/conftest.py), whose LeNet runs learn in every framework and whose torch
AutoEncoder trains at learning rate 0. Every ok run evaluated on MNIST's test split and has
a final quality; the model that learned nothing sits at chance in the runs table, the cells,
the quality figure and the report, and is in no finding."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.wall_split import assert_adds_up
from helpers.workflow import FOUR_FRAMEWORKS

from dlscale import quality
from dlscale.analysis.wallsplit import ALL

pytestmark = pytest.mark.workflow

TIMED = FOUR_FRAMEWORKS["iterations"]["lenet"]
CHANCE_MSE = quality.chance_level("mse", "mnist")


def test_every_ok_run_of_every_framework_has_a_final_quality(four_framework_study):
    runs = pd.read_csv(four_framework_study / "results" / "runs.csv").set_index("run_id")
    assert (runs["status"] == "ok").all(), runs[["status", "reason"]]
    assert set(runs["framework"]) == set(FOUR_FRAMEWORKS["frameworks"])
    assert runs["final_quality"].notna().all() and (runs["evals"] >= 1).all()
    evals = pd.read_csv(four_framework_study / "results" / "evals.csv")
    assert set(evals["run_id"]) == set(runs.index)
    assert (evals["samples"] == 10000).all() and (evals["heldout"] == "mnist").all()
    last = evals.groupby("run_id")["iteration"].max().reindex(runs.index)
    assert (last == TIMED + FOUR_FRAMEWORKS["warmup"]).all()  # after the last iteration, warm-up counted
    lenet = runs[runs["model"] == "lenet"]
    assert lenet["learned"].astype(bool).all(), lenet[["final_quality", "learned"]]
    assert (lenet["final_quality"] > 2 * quality.chance_level("top1", "mnist")).all()


def test_a_model_at_learning_rate_zero_is_at_chance_and_in_no_finding(
    four_framework_study, four_framework_report
):
    results = four_framework_study / "results"
    runs = pd.read_csv(results / "runs.csv")
    autoencoder = runs[runs["model"] == "autoencoder"]
    assert len(autoencoder) == 2 and set(autoencoder["framework"]) == {"torch"}
    # Weights that never move: the untrained reconstruction's error, to a few per cent.
    assert (autoencoder["final_quality"] > quality.LEARNED_MSE.value * CHANCE_MSE).all(), autoencoder
    assert autoencoder["final_quality"].tolist() == pytest.approx([CHANCE_MSE] * 2, rel=0.05), autoencoder
    assert not autoencoder["learned"].astype(bool).any()
    cells = pd.read_csv(results / "cells.csv")
    assert not cells.loc[cells["model"] == "autoencoder", "learned"].astype(bool).any()
    findings = pd.read_csv(results / "findings.csv")
    autoencoder_findings = findings[findings["model"] == "autoencoder"]
    for question in ("fastest_compute", "best_communication", "best_scaling"):
        assert "torch" not in set(autoencoder_findings[question].astype(str)), autoencoder_findings
    # The quality figure draws it beside the others; the report carries the figure.
    figure = (results / "figures" / "quality.html").read_text()
    assert "autoencoder" in figure and "torch/autoencoder/n1x1/b64/r0" in figure
    assert "quality.svg" in four_framework_report.read_text()


def test_where_the_time_goes(four_framework_study, four_framework_report):
    """wall_split.csv: a row per framework and the study's, each run counted once, the parts
    adding up to the wall, BigDL's Spark daemons and TensorFlow's set-up measured apart."""
    results = four_framework_study / "results"
    runs = pd.read_csv(results / "runs.csv")
    split = pd.read_csv(results / "wall_split.csv").set_index("framework")
    assert list(split.index) == [*sorted(FOUR_FRAMEWORKS["frameworks"]), ALL]
    assert split["runs"].drop(ALL).to_dict() == runs["framework"].value_counts().to_dict()
    assert split.loc[ALL, "runs"] == len(runs)
    assert split.loc[ALL, "wall_s"] == pytest.approx(runs["wall_s"].sum(), abs=0.05)
    assert_adds_up(split)
    assert (split[["timed_s", "warmup_s", "eval_s"]] > 0).all().all(), split
    assert split.loc["bigdl", "startup_daemons_s"] > 0 and split.loc["bigdl", "startup_data_s"] > 0
    assert split.loc["tensorflow", "startup_framework_s"] > 0
    assert "wall_split.csv" in four_framework_report.read_text()
