"""The workflow's job builders (dlscale.study.jobs) and its list of outputs (dlscale.outputs): what
the rules ask of each job, checked without Snakemake."""

from __future__ import annotations

import ast
import inspect
import json
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.paths import REPO

from dlscale import catalog, outputs
from dlscale.study import jobs
from dlscale.study.matrix import WILDCARD_CONSTRAINTS, Run
from dlscale.study.validation import validate_config

#: The training rule's output (rules/train.smk): run_dir and cell_wildcards must agree with it.
TRAIN_EVENTS = (
    "results/runs/{framework}/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/events.jsonl"
)


@pytest.fixture(scope="module")
def study(schema):
    return validate_config({}, schema)


def test_run_paths_follow_the_run_id():
    run = Run("torch", "lenet", 2, 1, 64, 3, "emulated-1gbe")
    assert jobs.run_dir(run) == "results/runs/torch/lenet/n2x1-1gbe/b64/r3"
    assert jobs.events_file(run) == f"{jobs.run_dir(run)}/events.jsonl"
    host = Run("caffe", "alexnet", 1, 2, 16, 0)
    assert jobs.run_events([run, host]) == [jobs.events_file(run), jobs.events_file(host)]


@pytest.mark.parametrize("network", ["host", "emulated-100mbe"])
def test_cell_wildcards_name_the_training_rules_output(network):
    run = Run("bigdl", "autoencoder", 4, 2, 32, 1, network)
    wildcards = jobs.cell_wildcards(run)
    assert set(wildcards) == set(re.findall(r"{(\w+)}", TRAIN_EVENTS)) - {"repeat"}
    assert TRAIN_EVENTS.format(**wildcards, repeat=run.repeat) == jobs.events_file(run)
    for name, value in wildcards.items():
        assert re.fullmatch(WILDCARD_CONSTRAINTS[name], str(value)), name


def test_repeat_events_are_a_cells_first_repeats():
    cell = Run("tensorflow", "lenet", 1, 1, 64, 0)
    assert jobs.repeat_events(cell, 3) == [
        "results/runs/tensorflow/lenet/n1x1/b64/r0/events.jsonl",
        "results/runs/tensorflow/lenet/n1x1/b64/r1/events.jsonl",
        "results/runs/tensorflow/lenet/n1x1/b64/r2/events.jsonl",
    ]
    assert jobs.repeat_events(cell, 0) == []


def test_failed_attempts_count_only_failed_records(tmp_path):
    assert jobs.failed_attempts(tmp_path) == 0
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    for name in ("failed-1.jsonl", "failed-2.jsonl", "ok-3.jsonl", "failed-4.log"):
        (attempts / name).write_text("")
    assert jobs.failed_attempts(tmp_path) == 2


def test_a_diverged_attempt_does_not_redo_the_run(tmp_path):
    """A run whose loss became NaN is an outcome of its rate (the same seed diverges again):
    a new diverged attempt leaves the count, and so the rule's parameter, as it was."""
    attempts = tmp_path / "attempts"
    attempts.mkdir()

    def attempt(name: str, reason: str) -> None:
        end = {"event": "run_end", "status": "failed", "reason": reason, "time": 1.0}
        (attempts / name).write_text('{"event": "run_start"}\n' + json.dumps(end) + "\n")

    attempt("failed-1.jsonl", "rank 1 died (SIGKILL) at iteration 3 (logs: attempts/failed-1/)")
    attempt("failed-2.jsonl", "loss became nan at iteration 57 on rank 0 (logs: attempts/failed-2/)")
    attempt("failed-3.jsonl", "loss became -inf at iteration 9 on rank 1")
    assert jobs.failed_attempts(tmp_path) == 1


def test_dataset_dirs_keep_real_and_synthetic_imagenet_apart(study):
    dirs = jobs.dataset_dirs(study)
    assert dirs["imagenet"] == "results/data/imagenet/shards"
    assert dirs["mnist"] == "results/data/mnist/shards"
    real = {**study, "data": {**study["data"], "imagenet": {**study["data"]["imagenet"], "source": "/data"}}}
    assert jobs.dataset_dirs(real)["imagenet"] == "results/data/imagenet-real/shards"
    # every model's dataset has a folder
    assert set(catalog.DATASETS) <= set(dirs)


def test_marker_variables_are_absolute_and_quoted(tmp_path):
    markers = {"caffe": str(tmp_path / "a b" / "caffe.json"), "java": "java.txt"}
    line = jobs.marker_variables(markers, ["caffe"])
    assert shlex.split(line) == [f"DLSCALE_CAFFE_MARKER={tmp_path / 'a b' / 'caffe.json'}"]
    assert jobs.marker_variables(markers, []) == ""
    assert shlex.split(jobs.marker_variables(markers, ["java"]))[0].endswith("/java.txt")


def test_train_resources_scale_with_the_run(study):
    resources = jobs.train_resources(study)
    wildcards = SimpleNamespace(nodes="4", ranks_per_node="2")
    assert resources["runtime"] == study["run_timeout_min"] + 5
    assert resources["nodes"](wildcards) == 4
    assert resources["tasks"](wildcards) == 8
    assert resources["mem_mb"](wildcards) == 2 * study["mem_per_rank_mb"]
    assert resources["cpus_per_task"] == study["threads_per_rank"]
    # the same empty string for every run: runs of any size share a job group
    assert resources["mpi"] == jobs.MPI_RESOURCE == ""
    for name in ("nodes", "tasks", "mem_mb"):
        assert "__signature__" in vars(resources[name])


def test_tune_resources_ask_for_one_node(study):
    resources = jobs.tune_resources(study)
    assert resources == {
        "runtime": jobs.train_runtime(study),
        "nodes": 1,
        "tasks": study["ranks_per_node"],
        "cpus_per_task": study["threads_per_rank"],
        "mem_mb": study["ranks_per_node"] * study["mem_per_rank_mb"],
        "mpi": "",
    }


def test_inspected_attaches_the_signature():
    def f(wildcards, attempt=1):
        return attempt

    assert jobs.inspected(f) is f
    assert vars(f)["__signature__"] == inspect.signature(f)


def test_commbench_names_and_files(study):
    names = jobs.commbench_names({"frameworks": ["caffe", "torch"]}, "tcp")
    assert names == [n for n in catalog.FRAMEWORK_NAMES if n in ("caffe", "torch")] + ["tcp"]
    settings = {**study["commbench"], "enabled": False}
    assert jobs.commbench_files({**study, "commbench": settings}, names) == []
    settings = {**settings, "enabled": True, "networks": ["host", "emulated-1gbe"]}
    assert jobs.commbench_files({**study, "commbench": settings}, ["torch", "tcp"]) == [
        "results/perfmodel/commbench/torch-host.csv",
        "results/perfmodel/commbench/torch-emulated-1gbe.csv",
        "results/perfmodel/commbench/tcp-host.csv",
        "results/perfmodel/commbench/tcp-emulated-1gbe.csv",
    ]


def test_commbench_args(study):
    settings = {**study["commbench"], "sizes": [1024, 4096], "models": [], "algorithms": ["ring"]}
    args = shlex.split(jobs.commbench_args(settings))
    assert args[:3] == ["--sizes", "1024", "4096"]
    assert "--models" not in args
    assert args[-3:] == ["--algorithms", "default", "ring"]
    assert args[args.index("--timeout-s") + 1] == str(settings["timeout_s"])
    with_models = shlex.split(jobs.commbench_args({**settings, "models": ["lenet", "alexnet"]}))
    assert with_models[with_models.index("--models") + 1 : with_models.index("--algorithms")] == [
        "lenet",
        "alexnet",
    ]
    assert jobs.commbench_runtime({"timeout_s": 900}) == 20


def test_pooled_study_files(study):
    pooled = {**study, "projection": {**study["projection"], "pool_studies": ["quiet/", "small"]}}
    assert jobs.pooled_study_files(pooled, "runs") == [
        "quiet/results/runs.parquet",
        "small/results/runs.parquet",
    ]
    assert jobs.pooled_study_files(study, "runs") == []


def test_projection_preset(study):
    gbe = {**study, "projection": {**study["projection"], "network": "1gbe"}}
    assert jobs.projection_preset(gbe, "latency_us") == "50"
    assert jobs.projection_preset(gbe, "bandwidth_gbit") == "1"
    assert jobs.projection_preset(gbe, "source").startswith("Gigabit Ethernet")
    loopback = {**study, "projection": {**study["projection"], "network": "loopback"}}
    assert jobs.projection_preset(loopback, "source") == ""


def test_one_list_of_outputs():
    assert outputs.figure_files() == [
        f"results/figures/{name}.{fmt}" for name in outputs.FIGURES for fmt in outputs.FIGURE_FORMATS
    ]
    assert outputs.perfmodel_files()[: len(outputs.PERFMODEL_REPORTED_TABLES)] == [
        f"results/perfmodel/{name}.csv" for name in outputs.PERFMODEL_REPORTED_TABLES
    ]
    assert outputs.caffe_layer_files(["lenet"]) == [
        f"results/figures/caffe_layers_lenet.{fmt}" for fmt in outputs.FIGURE_FORMATS
    ]
    # every reported table and figure has a caption; rule all's figures are drawn by the rule
    assert set(outputs.PERFMODEL_CAPTIONS) == set(outputs.PERFMODEL_REPORTED_TABLES)
    assert not set(outputs.PERFMODEL_DATA_TABLES) & set(outputs.PERFMODEL_REPORTED_TABLES)
    assert (
        outputs.PERFMODEL_ALL_FIGURES[: len(outputs.PERFMODEL_TARGET_FIGURES)]
        == outputs.PERFMODEL_TARGET_FIGURES
    )
    assert set(outputs.PERFMODEL_FIGURE_CAPTIONS) == set(outputs.PERFMODEL_ALL_FIGURES)
    report = REPO / "report"
    captions = {*outputs.PERFMODEL_CAPTIONS.values(), *outputs.PERFMODEL_FIGURE_CAPTIONS.values()}
    assert all((report / caption).is_file() for caption in captions)


@pytest.mark.parametrize("module", [jobs, outputs])
def test_dag_time_modules_import_only_the_ground_floor(module):
    """Snakemake imports these when it builds the DAG: no pandas, no framework, no layer
    above (quality: the standard library and catalog and thresholds, which are)."""
    ground_floor = {
        "dlscale.catalog",
        "dlscale.networks",
        "dlscale.outputs",
        "dlscale.runid",
        "dlscale.quality",
    }
    imported = set()
    for node in ast.walk(ast.parse(Path(module.__file__).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = {f"{node.module}.{alias.name}" for alias in node.names}
            imported |= names if node.module == "dlscale" else {node.module}
    for name in imported:
        top = name.split(".")[0]
        assert name in ground_floor or (top != "dlscale" and top in sys.stdlib_module_names), name
