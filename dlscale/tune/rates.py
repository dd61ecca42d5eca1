"""The learning-rate sweep of ``lr_scaling: {rule: tuned}``: which rate each global batch trains at.

A computed rule (linear, sqrt) guesses the rate at a larger batch; ``tuned`` measures it,
as MLPerf Training's reference implementations do before submitters borrow their
hyperparameters. For every global batch a tuned model trains at in the study, the
reference framework (``catalog.PARITY_REFERENCE``) trains it at 1 rank (steps to target
depend on the global batch and the rate, not on how the batch is split over ranks: the
parity check proves that arithmetic) at the linear rule's rate times each factor of
``sweep``, ``sweep_repeats`` times each, to the model's quality target; the rate with the
fewest median steps wins (``dlscale.tune.rate_choice``), and every framework's runs at that
batch carry it in their spec (``lr_rule.rate``), with the rule's warm-up.

This module names the sweep's runs, folders and specs and reads a choice back. Standard
library only: Snakemake calls it when it builds the DAG.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from dlscale import catalog, networks
from dlscale.runid import Run
from dlscale.runspec import RunSpec
from dlscale.study import matrix

#: The factors around the linear rule's rate a sweep tries when the study names none: a
#: factor of two either side brackets the rates Goyal et al. and Shallue et al. found best
#: at a doubled batch (linear up to the critical batch, less beyond it).
SWEEP_FACTORS: tuple[float, ...] = (0.5, 1.0, 2.0)
#: Repeats per swept rate when the study names none: three give the median a min-max
#: interval (75 % coverage for the median from 3 samples), the fewest that carry one.
SWEEP_REPEATS = 3
#: Where the sweep's runs and choices live (``run_path``, ``choice_path``).
SWEEP_DIR = "results/lr_tuning"
#: Every choice of the study in one table (rule lr_tuning_table).
SWEEP_TABLE = "results/lr_tuning.csv"


class RateError(ValueError):
    """A sweep that cannot be planned or a choice that cannot be read: the message says which."""


def tuned_models(study: Mapping[str, Any]) -> list[str]:
    """The study's models whose rate per global batch is swept, in the study's order."""
    return [m for m in study["models"] if matrix.is_tuned_rate(dict(study), m)]


def sweep_batches(study: Mapping[str, Any], model: str) -> list[int]:
    """Every global batch ``model`` trains at in the study (any framework, node count or
    network): each needs its rate."""
    return sorted(
        {run.batch * run.world_size for run in matrix.expand_runs(dict(study)) if run.model == model}
    )


def _rule(study: Mapping[str, Any], model: str) -> Mapping[str, Any]:
    rule = (study.get("lr_scaling") or {}).get(model)
    if rule is None or not matrix.is_tuned_rate(dict(study), model):
        raise RateError(f"{model}'s learning rate is not tuned in this study")
    return rule


def sweep_factors(study: Mapping[str, Any], model: str) -> tuple[float, ...]:
    """The factors of the linear rule's rate the sweep tries for ``model``, in rising order."""
    return tuple(sorted(float(f) for f in _rule(study, model).get("sweep", SWEEP_FACTORS)))


def sweep_repeats(study: Mapping[str, Any], model: str) -> int:
    return int(_rule(study, model).get("sweep_repeats", SWEEP_REPEATS))


def linear_rate(study: Mapping[str, Any], model: str, global_batch: int) -> float:
    """The linear rule's rate at ``global_batch`` (the sweep's centre)."""
    base = matrix.lr_rule_of(dict(study), model)
    assert base is not None  # _rule checked it
    return float(study["learning_rate"][model]) * global_batch / base["base_batch"]


def rate_id(factor: float) -> str:
    """A swept rate's folder name: its factor of the linear rule's rate (``x0.5``)."""
    return f"x{factor:g}"


def factor_of(study: Mapping[str, Any], model: str, rid: str) -> float:
    for factor in sweep_factors(study, model):
        if rate_id(factor) == rid:
            return factor
    raise RateError(
        f"{model}'s sweep has no rate {rid!r} (factors: {', '.join(map(rate_id, sweep_factors(study, model)))})"
    )


def choice_path(model: str, global_batch: int) -> str:
    return f"{SWEEP_DIR}/choices/{model}/b{global_batch}.json"


def sweep_run(model: str, global_batch: int, repeat: int) -> Run:
    """The run a sweep trains (at every rate; its folder says which): the reference
    framework at 1 node and 1 rank, the whole global batch on that rank."""
    return Run(catalog.PARITY_REFERENCE, model, 1, 1, global_batch, repeat, networks.HOST)


def run_path(model: str, global_batch: int, rid: str, repeat: int) -> str:
    """``results/lr_tuning/<rate id>/<run id>/events.jsonl``: the training rule's own
    pattern under the rate's folder, so the sweep's jobs are training jobs."""
    return f"{SWEEP_DIR}/{rid}/{sweep_run(model, global_batch, repeat).run_id}/events.jsonl"


def sweep_runs(study: Mapping[str, Any], model: str, global_batch: int) -> list[str]:
    """The events files of one (model, global batch)'s sweep, repeat-major (every rate's
    r0, then every r1, ...), so the rates are measured interleaved, side by side."""
    ids = [rate_id(f) for f in sweep_factors(study, model)]
    return [run_path(model, global_batch, rid, r) for r in range(sweep_repeats(study, model)) for rid in ids]


def sweep_spec(study: Mapping[str, Any], model: str, global_batch: int, rid: str, repeat: int) -> RunSpec:
    """One sweep run (``sweep_run``) with the study's quality target, evaluation and
    warm-up, at the swept rate."""
    if global_batch not in sweep_batches(study, model):
        raise RateError(f"the study trains {model} at no global batch {global_batch}")
    rate = factor_of(study, model, rid) * linear_rate(study, model, global_batch)
    return matrix.run_spec(dict(study), sweep_run(model, global_batch, repeat), lr_rate=rate)


def choice_files(study: Mapping[str, Any]) -> list[str]:
    """The choice file of every (tuned model, global batch) of the study."""
    return [choice_path(m, b) for m in tuned_models(study) for b in sweep_batches(study, m)]


def read_choice(path: str | os.PathLike[str]) -> float:
    """The chosen rate of a choice file (``dlscale.tune.rate_choice.write_choice``)."""
    try:
        with open(path, encoding="utf-8") as handle:
            rate = json.load(handle)["chosen_rate"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise RateError(f"{path}: no chosen learning rate ({err})") from None
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not math.isfinite(rate) or rate <= 0:
        raise RateError(f"{path}: chosen_rate {rate!r} is not a positive number")
    return float(rate)
