"""The benchmarks plan their runs through the study's own config reading and checks: every
cell ``make bench`` measures gets a spec the study would build (planned here, nothing run),
so a setting the study refuses, like a shared initialisation for a model that has none,
cannot break the benchmark silently again."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import startup
from benchmarks.common import (
    bench_init,
    bench_iterations,
    bench_spec,
    bench_studies,
    default_config,
    worker_command,
)
from benchmarks.registry import FRAMEWORKS
from dlscale import catalog
from dlscale.data import initweights
from dlscale.launch.runner import runner_launcher
from dlscale.runners.bigdl import settings as bigdl_settings
from dlscale.runspec import RunSpec
from dlscale.study import matrix, validation


def test_every_cell_of_make_bench_is_planned() -> None:
    """What ``python -m benchmarks`` asks by default: every framework with benchmarks on
    every catalog model (training), and the start-up models."""
    models = [*catalog.MODEL_NAMES, *startup.STARTUP_MODELS]
    studies = bench_studies(models)
    assert set(studies) == set(models)
    config_init = default_config().get("init", "framework")
    planned = []
    trained = [name for name, entry in FRAMEWORKS.items() if entry.training is not None]
    for framework in FRAMEWORKS:
        for model in catalog.MODEL_NAMES if framework in trained else ():
            spec = bench_spec(studies, framework, model)
            assert RunSpec.from_json(spec.to_json()) == spec
            assert (spec.framework, spec.model, spec.world_size) == (framework, model, 1)
            # It trains the benchmark's steps, not the study's time-to-target run of them.
            assert spec.total_iterations == sum(bench_iterations(model)), (framework, model)
            shared = config_init == "shared" and model in initweights.LAYOUTS
            assert spec.init == ("shared" if shared else "framework"), (framework, model)
            if spec.init == "shared":
                initweights.LAYOUTS[model]  # the initialisation the runners will ask for exists
            planned.append(spec.run_id)
        for model in startup.STARTUP_MODELS:
            spec = bench_spec(studies, framework, model, iterations=(int(studies[model]["warmup"]), 5))
            assert spec.iterations == 5 and spec.total_iterations == spec.warmup + 5
    assert len(planned) == len(trained) * len(catalog.MODEL_NAMES)
    # Every framework the default study runs has its benchmarks, and they cover every model.
    assert set(default_config()["frameworks"]) <= set(FRAMEWORKS)


def test_all_sixteen_harness_cells_plan_a_run_their_runner_accepts() -> None:
    """Every framework x model cell of the harness table (4 x 4 for the study's
    frameworks): a spec the study builds,
    whose runner's settings accept it (a run the runner would refuse, like BigDL's mkldnn
    engine with the AutoEncoder, is a failed cell: the error is in ``settings``), and whose
    BigDL engine is the study's wherever the runner can run the model with it."""
    models = list(catalog.MODEL_NAMES)
    studies = bench_studies(models)
    trained = [name for name, entry in FRAMEWORKS.items() if entry.training is not None]
    cells = {}
    for framework in trained:
        for model in models:
            spec = bench_spec(studies, framework, model)
            settings = runner_launcher(framework).settings(spec)
            assert "error" not in settings, (framework, model, settings)
            cells[framework, model] = spec
    # The 16 of the study's four frameworks at least (a framework's bench module adds its own).
    assert (
        set(default_config()["frameworks"]) <= set(trained) and len(cells) == len(trained) * len(models) >= 16
    )
    study_engine = bench_spec(studies, "bigdl", "lenet").options["engine"]
    for model in models:
        engine = cells["bigdl", model].options["engine"]
        refused = study_engine == "mkldnn" and model in bigdl_settings.MKLDNN_REFUSES
        assert engine == ("mklblas" if refused else study_engine), model
    assert "autoencoder" in bigdl_settings.MKLDNN_REFUSES  # the cell that failed in both arms
    # The bare arms are given the same spec (and so the same engine) as the runner arm.
    argv = worker_command("python", "bigdl", "bare", spec=cells["bigdl", "autoencoder"], data=Path("d"))
    given = RunSpec.from_json(argv[argv.index("--spec-json") + 1])
    assert given == cells["bigdl", "autoencoder"]


def test_the_benchmarks_take_the_studys_settings() -> None:
    """A benchmarked model's spec is the study's run of it (batch, threads, learning rate,
    options): the benchmark changes only its iterations."""
    studies = bench_studies(["lenet"])
    study = studies["lenet"]
    spec = bench_spec(studies, "torch", "lenet", iterations=(1, 4))
    own = matrix.run_spec(study, matrix.Run("torch", "lenet", 1, 1, study["batch_per_rank"]["lenet"], 0))
    assert (spec.warmup, spec.iterations) == (1, 4)
    assert spec.batch == own.batch and spec.learning_rate == own.learning_rate
    assert spec.threads_per_rank == own.threads_per_rank and spec.options == own.options


def test_init_is_chosen_per_model_as_the_study_allows() -> None:
    shared = {"init": "shared"}
    assert bench_init(shared, "lenet") == "shared"
    assert bench_init(shared, "alexnet") == "framework"
    assert bench_init({"init": "framework"}, "lenet") == "framework"
    assert bench_init({}, "resnet50") == "framework"
    # The study itself refuses what bench_init avoids: shared init for a model without one.
    config = {**default_config(), "models": ["alexnet"], "init": "shared"}
    config.pop("models_per_framework", None)
    with pytest.raises(validation.ConfigError, match="init"):
        validation.validate_config(config, validation.load_schema(catalog.CONFIG_SCHEMA), catalog.REPO_DIR)


def test_a_setting_the_study_refuses_is_refused_by_the_benchmarks(tmp_path: Path) -> None:
    with pytest.raises(validation.ConfigError, match="nodes"):
        bench_studies(["lenet"], {**default_config(), "nodes": [0]})
    twice = tmp_path / "config.yaml"
    twice.write_text("nodes: [1]\nnodes: [2]\n", encoding="utf-8")
    with pytest.raises(validation.ConfigError, match="nodes"):
        default_config(twice)
