"""The tuning stage's runs: each framework at its best documented CPU settings, chosen by measurement.

A comparison is only as fair as its weakest configuration. Before the study's runs, every
framework trains every model of the study at 1 node (the study's batch, threads, ranks
per node and data) under each combination of its tunable settings (``dlscale.options``:
the grid, less the settings its runner would compute exactly as an earlier one or refuses:
``grid``); the best setting per (framework, model) is chosen from those measurements
(``dlscale.tune.choice``) and is what the study's runs use. This module names the grid's
runs, their folders and specs, and reads a choice back. Standard library only: Snakemake
calls it when it builds the DAG; it asks each runner's light launcher (no framework import)
what a setting computes with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from dlscale import options as dloptions
from dlscale.launch.runner import runner_launcher
from dlscale.options import (
    SETTING_PATTERN,
    SETTING_PREFIX,
    TuneError,
    check,
    pin_explicit_options,
    setting_id,
    tunable,
    tuned_options,
)
from dlscale.runspec import RunSpec
from dlscale.study import matrix
from dlscale.tune import rates

# --- the grid: settings that compute differently ------------------------------------------------


def _one_node_spec(
    study: Mapping[str, Any], framework: str, model: str, repeat: int, setting: Mapping[str, Any]
) -> RunSpec:
    run = matrix.Run(
        framework, model, 1, study["ranks_per_node"], matrix.batch_per_rank(study, model, 1), repeat
    )
    # A tuning run measures throughput, not steps to a target: under ``rule: tuned`` it
    # trains at the linear rule's rate (the sweep's centre), known before any sweep ran.
    rate = (
        rates.linear_rate(study, model, run.batch * run.world_size)
        if matrix.is_tuned_rate(dict(study), model)
        else None
    )
    return matrix.run_spec(study, run, dict(setting), lr_rate=rate)


def grid_report(study: Mapping[str, Any], framework: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The grid's settings (id -> setting, the default first) and those left out (id -> why).

    ``dlscale.options.grid`` is the product of the options' candidates; some of its settings
    are one run under two names (BigDL's ``batch_split: null`` is the engine's own split,
    so it repeats the explicit one) or a run the runner refuses (per_executor with
    mklblas on more than one core). The runner's launcher says what a setting computes with
    (``settings(spec)``, the record a run's run_start keeps): a setting whose record equals
    an earlier one's on every model of the framework is left out as that one, a setting
    whose record is an error is left out with it. The default is always kept.
    """
    models = tuple(matrix.models_of(dict(study), framework))
    return _distinct(study, framework, dloptions.grid(study, framework), models, "")


def _distinct(
    study: Mapping[str, Any],
    framework: str,
    settings: list[dict[str, Any]],
    models: tuple[str, ...],
    scope: str,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """``settings`` (the default first) less those whose runner's settings records on
    ``models`` are an error or equal an earlier setting's (``grid_report``); ``scope`` ends
    the reason ("" for the framework's models, " for <model>"). Cached per study."""
    key = (json.dumps(study, sort_keys=True, default=str), framework, models, scope)
    cached = _GRID_CACHE.get(key)
    if cached is not None:
        return dict(cached[0]), dict(cached[1])
    kept: dict[str, dict[str, Any]] = {}
    left_out: dict[str, str] = {}
    seen: dict[str, str] = {}
    launcher = runner_launcher(framework) if settings else None
    for index, setting in enumerate(settings):
        sid = setting_id(setting)
        records = [launcher.settings(_one_node_spec(study, framework, model, 0, setting)) for model in models]
        errors = sorted({str(r["error"]) for r in records if "error" in r})
        if errors and index:
            left_out[sid] = f"refused by the {framework} runner: {'; '.join(errors)}"
            continue
        fingerprint = json.dumps(records, sort_keys=True, default=str)
        if fingerprint in seen and index:
            left_out[sid] = f"the same run as {seen[fingerprint]}{scope} (its settings record is identical)"
            continue
        seen.setdefault(fingerprint, sid)
        kept[sid] = dict(setting)
    _GRID_CACHE[key] = (kept, left_out)
    return dict(kept), dict(left_out)


#: _distinct's answers by (study, framework, models, scope): Snakemake asks for a grid once per job.
_GRID_CACHE: dict[
    tuple[str, str, tuple[str, ...], str], tuple[dict[str, dict[str, Any]], dict[str, str]]
] = {}


def grid_ids(study: Mapping[str, Any], framework: str) -> dict[str, dict[str, Any]]:
    """setting id -> setting of the framework's grid, the default first (grid_report)."""
    return grid_report(study, framework)[0]


def grid(study: Mapping[str, Any], framework: str) -> list[dict[str, Any]]:
    """Every setting of the framework's grid, the default first; [] when nothing is tuned."""
    return list(grid_ids(study, framework).values())


def is_tuned(study: Mapping[str, Any], framework: str) -> bool:
    """Does this framework have a grid (tuning on, and more than one setting to try)?"""
    return len(grid_ids(study, framework)) > 1


def model_grid_report(
    study: Mapping[str, Any], framework: str, model: str
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The framework's grid as one model runs it: its settings (id -> setting, the default
    first), less those whose settings record for this model equals an earlier one's (id ->
    why). A setting that changes nothing this model computes with (a memory format for a
    model without convolutions: ``catalog.Model.convolutional``) would only race the default
    against itself, so it is not run for that model; the default is always kept."""
    return _distinct(study, framework, list(grid_ids(study, framework).values()), (model,), f" for {model}")


def model_grid_ids(study: Mapping[str, Any], framework: str, model: str) -> dict[str, dict[str, Any]]:
    """setting id -> setting of the grid one model runs (model_grid_report), the default first."""
    return model_grid_report(study, framework, model)[0]


def is_tuned_model(study: Mapping[str, Any], framework: str, model: str) -> bool:
    """Does this model race settings (more than the default computes differently for it)?"""
    return len(model_grid_ids(study, framework, model)) > 1


# --- paths and specs ------------------------------------------------------------------------


def tune_dir(framework: str, model: str) -> str:
    return f"results/tune/{framework}/{model}"


def choice_path(framework: str, model: str) -> str:
    return f"{tune_dir(framework, model)}/choice.json"


def run_path(framework: str, model: str, setting: str, repeat: int) -> str:
    return f"{tune_dir(framework, model)}/{setting}/r{repeat}/events.jsonl"


def tune_runs(study: Mapping[str, Any], framework: str, model: str) -> list[str]:
    """The events files of one (framework, model)'s grid, every setting and repeat.

    Ordered repeat-major (every setting's r0, then every r1, ...): Snakemake schedules
    ready jobs in about that order, so the settings are measured interleaved, side by
    side, rather than one setting's repeats in a row.
    """
    if not is_tuned_model(study, framework, model):
        return []  # nothing to race: the default is the choice (dlscale.tune.choice.untuned)
    ids = list(model_grid_ids(study, framework, model))
    return [run_path(framework, model, sid, r) for r in range(study["tune"]["repeats"]) for sid in ids]


def tune_spec(study: Mapping[str, Any], framework: str, model: str, setting: str, repeat: int) -> RunSpec:
    """The spec of one tuning run: the study's 1-node run of (framework, model) with the
    setting's options and the tune section's iterations, without the study's quality target
    (tuning measures throughput over a fixed number of iterations). Its run id is that 1-node run's
    (``<fw>/<model>/n1x<p>/b<batch>/r<k>``); its folder says which setting it was."""
    settings = grid_ids(study, framework)
    if setting not in settings:
        raise TuneError(f"{framework} has no setting {setting!r} in this study's grid")
    data = _one_node_spec(study, framework, model, repeat, settings[setting]).to_dict()
    # Tuning compares throughput at a fixed amount of work: no quality target (a setting
    # would otherwise buy fewer iterations), one evaluation after the last iteration.
    for name in ("quality_target", "max_iterations", "eval_every"):
        data.pop(name, None)
    iterations = study["tune"].get("iterations")
    if iterations:
        data["iterations"] = iterations
    return RunSpec.from_dict(data)


def race_path(framework: str, model: str, done: int) -> str:
    """The racing check after ``done`` rounds (dlscale.tune.choice.race)."""
    return f"{tune_dir(framework, model)}/race/after{done}.json"


def race_budget(study: Mapping[str, Any], framework: str, model: str) -> int:
    """The most runs of one (framework, model)'s race: its first round (every setting of the
    model's grid, ``tune.repeats`` times) and ``tune.budget``'s further runs for the framework."""
    tune = study["tune"]
    budget = tune.get("budget") or {}
    extra = int(budget.get(framework, budget.get("default", 0)))
    return len(model_grid_ids(study, framework, model)) * int(tune["repeats"]) + extra


def race_round(
    study: Mapping[str, Any], framework: str, model: str, settings: list[str], done: int
) -> list[str]:
    """The events files of one further round of the race: ``settings`` (the check's
    ``next``, the default first), each with repeat ``done``."""
    known = model_grid_ids(study, framework, model)
    unknown = [sid for sid in settings if sid not in known]
    if unknown:
        raise TuneError(f"the race of {framework}/{model} names settings not in its grid: {unknown}")
    return [run_path(framework, model, sid, done) for sid in settings]


def read_choice(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings a choice file chose (option -> value)."""
    with open(path, encoding="utf-8") as handle:
        choice = json.load(handle)
    return dict(choice["chosen_settings"])


__all__ = [
    "SETTING_PATTERN",
    "SETTING_PREFIX",
    "TuneError",
    "check",
    "choice_path",
    "grid",
    "grid_ids",
    "grid_report",
    "is_tuned",
    "is_tuned_model",
    "model_grid_ids",
    "model_grid_report",
    "pin_explicit_options",
    "race_budget",
    "race_path",
    "race_round",
    "read_choice",
    "run_path",
    "setting_id",
    "tunable",
    "tune_dir",
    "tune_runs",
    "tune_spec",
    "tuned_options",
]
