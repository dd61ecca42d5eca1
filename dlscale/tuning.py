"""The tuning stage's runs: each framework at its best documented CPU settings, chosen by measurement.

A comparison is only as fair as its weakest configuration. Before the study's runs, every
framework trains every model of the study at 1 node (the study's batch, threads, ranks
per node and data) under each combination of its tunable settings (``dlscale.options``:
the grid); the best setting per (framework, model) is chosen from those measurements
(``dlscale.tunechoice``) and is what the study's runs use. This module names the grid's
runs, their folders and specs, and reads a choice back. Standard library only: Snakemake
calls it when it builds the DAG.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from dlscale import study as dlstudy
from dlscale.options import (
    SETTING_PATTERN,
    SETTING_PREFIX,
    TuneError,
    check,
    grid,
    grid_ids,
    is_tuned,
    pin_explicit_options,
    setting_id,
    tunable,
    tuned_options,
)
from dlscale.runspec import RunSpec

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
    ids = list(grid_ids(study, framework))
    return [run_path(framework, model, sid, r) for r in range(study["tune"]["repeats"]) for sid in ids]


def tune_spec(study: Mapping[str, Any], framework: str, model: str, setting: str, repeat: int) -> RunSpec:
    """The spec of one tuning run: the study's 1-node run of (framework, model) with the
    setting's options and the tune section's iterations, without the study's quality target
    (tuning measures throughput over a fixed number of iterations). Its run id is that 1-node run's
    (``<fw>/<model>/n1x<p>/b<batch>/r<k>``); its folder says which setting it was."""
    settings = grid_ids(study, framework)
    if setting not in settings:
        raise TuneError(f"{framework} has no setting {setting!r} in this study's grid")
    run = dlstudy.Run(
        framework, model, 1, study["ranks_per_node"], dlstudy.batch_per_rank(study, model, 1), repeat
    )
    spec = dlstudy.run_spec(study, run, settings[setting])
    data = spec.to_dict()
    # Tuning compares throughput at a fixed amount of work: no quality target (a setting
    # would otherwise buy fewer iterations), one evaluation after the last iteration.
    for name in ("quality_target", "max_iterations", "eval_every"):
        data.pop(name, None)
    iterations = study["tune"].get("iterations")
    if iterations:
        data["iterations"] = iterations
    return RunSpec.from_dict(data)


def race_path(framework: str, model: str, done: int) -> str:
    """The racing check after ``done`` rounds (dlscale.tunechoice.race)."""
    return f"{tune_dir(framework, model)}/race/after{done}.json"


def race_budget(study: Mapping[str, Any], framework: str) -> int:
    """The most runs of one (framework, model)'s race: its first round (every setting,
    ``tune.repeats`` times) and ``tune.budget``'s further runs for the framework."""
    tune = study["tune"]
    budget = tune.get("budget") or {}
    extra = int(budget.get(framework, budget.get("default", 0)))
    return len(grid(study, framework)) * int(tune["repeats"]) + extra


def race_round(
    study: Mapping[str, Any], framework: str, model: str, settings: list[str], done: int
) -> list[str]:
    """The events files of one further round of the race: ``settings`` (the check's
    ``next``, the default first), each with repeat ``done``."""
    known = grid_ids(study, framework)
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
    "is_tuned",
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
