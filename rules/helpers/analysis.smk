"""The analysis stage's helpers (rules/analysis.smk): which runs' events the tables read,
and under ``repeats: auto`` how many repeats each cell has."""

import dataclasses
import glob
import json

from dlscale import networks
from dlscale.outputs import nodes_files
from dlscale.outputs import (
    AGGREGATE_FILES,
    AGGREGATE_REPORTED,
    CATEGORY_COMPARE,
    CATEGORY_FINDINGS,
    CATEGORY_NODES,
    CATEGORY_PERFMODEL,
    CATEGORY_RUNS,
    COMPARE_DIR,
    COMPARE_FILES,
    FIGURE_CATEGORIES,
    FIGURE_FORMATS,
    FIGURES,
    NODES_FIGURE_CAPTIONS,
    NODES_TABLES,
    PERFMODEL_ALL_FIGURES,
    PERFMODEL_CAPTIONS,
    PERFMODEL_DATA_TABLES,
    PERFMODEL_FIGURE_CAPTIONS,
    PERFMODEL_REPORTED_TABLES,
    PUBLISHED_DIR,
    REPLAY_CAPTION,
    REPLAY_FIGURE,
    REPLAY_TABLES,
    SUBCATEGORY_REPLAY,
)

AUTO_REPEATS = STUDY["repeats"] == "auto"
#: The published record's system files, the replay's input: the workflow's own, wherever
#: the study runs; none where a copy of the workflow lacks the folder.
PUBLISHED_SYSTEMS = sorted(
    glob.glob(os.path.join(workflow.basedir, PUBLISHED_DIR, "*.yaml"))
)
#: The TH Express-2 preset's basis and band, for the replay's caption and figure.
TH_EXPRESS2 = networks.PRESETS["th-express2"]
#: The parity check's table, where the study runs the shared initialisation (rule parity).
PARITY_FILES = ["results/parity.csv"] if STUDY["init"] == "shared" else []
#: How many nodes to a trained model, projected and drawn, where the study sets a target.
NODES_FILES = nodes_files() if STUDY.get("quality_target") else []
#: The reference runs the parity check needs beside the study's (rule parity_reference).
PARITY_REFERENCE_DIR = "results/parity/reference"
PARITY_REFERENCES = {run.run_id: run for run in dlstudy.parity_reference_runs(STUDY)}
PARITY_REFERENCE_EVENTS = [
    f"{PARITY_REFERENCE_DIR}/{run_id}/events.jsonl" for run_id in PARITY_REFERENCES
]


def parity_reference_of(wildcards):
    run_id = run_of(wildcards).run_id
    if run_id not in PARITY_REFERENCES:
        raise WorkflowError(f"{run_id} is no parity reference of this study")
    run = PARITY_REFERENCES[run_id]
    return dlstudy.parity_reference_spec(STUDY, run, lr_rate_of(run.model, run.batch))


@inspected
def parity_reference_input(wildcards):
    """A reference's inputs: a run's, and the swept rate it trains at (rule: tuned)."""
    return {**run_input(wildcards), **lr_choice_inputs(run_of(wildcards))}


@inspected
def parity_reference_spec(wildcards):
    return parity_reference_of(wildcards).to_json()


@inspected
def parity_reference_sha(wildcards):
    return parity_reference_of(wildcards).sha256


#: The comparison with the study of config key compare_with (rule compare), if any; the
#: files of COMPARE_REPORTED go into the report.
COMPARE_TARGETS = (
    [f"{COMPARE_DIR}/{name}" for name in COMPARE_FILES.values()]
    if STUDY["compare_with"]
    else []
)
COMPARE_REPORTED = (
    "page",
    "comparison",
    "verdict_changes",
    "differences",
    "figure_svg",
)


@inspected
def all_run_events(wildcards):
    """Every run's events file: the study's runs and, under ``repeats: auto``, each cell's
    further repeats, as far as its repeat checks (checkpoint repeat_check) asked for."""
    if not AUTO_REPEATS:
        return run_events()
    return jobs.run_events(
        run for cell in RUNS if cell.repeat == 0 for run in cell_repeats(cell)
    )


def cell_repeats(cell):
    """The runs of one cell under ``repeats: auto``: ``min`` repeats, then one more each
    time the check of the repeats so far says the interval is still too wide."""
    count = dlstudy.initial_repeats(STUDY)
    while True:
        check = checkpoints.repeat_check.get(
            **jobs.cell_wildcards(cell), done=count
        ).output[0]
        with open(check, encoding="utf-8") as handle:
            if not json.load(handle)["more"]:
                break
        count += 1
    return [dataclasses.replace(cell, repeat=repeat) for repeat in range(count)]


@inspected
def repeat_check_input(wildcards):
    """The events of a cell's first ``count`` repeats."""
    cell = run_of({**dict(wildcards.items()), "repeat": 0})
    return jobs.repeat_events(cell, int(wildcards.done))
