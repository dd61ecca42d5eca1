"""The learning-rate sweep's helpers (rules/lr_tuning.smk, dlscale.tune.rates): each sweep
run's spec, the rate a run of a tuned model borrows, and the stage's targets."""

import json
import os

from dlscale.outputs import CATEGORY_NODES
from dlscale.tune import rates as dlrates


def lr_choice_file(model, global_batch):
    """The choice file of a tuned (model, global batch) (made_or_checkpoint: rules/common.smk)."""
    return made_or_checkpoint(
        dlrates.choice_path(model, global_batch),
        checkpoints.lr_choice,
        model=model,
        global_batch=global_batch,
    )


def lr_rate_of(model, global_batch):
    """The swept rate of a tuned model at a global batch (None when its rate is computed)."""
    if not dlstudy.is_tuned_rate(STUDY, model):
        return None
    try:
        return dlrates.read_choice(lr_choice_file(model, global_batch))
    except dlrates.RateError as err:
        raise WorkflowError(str(err)) from None


def lr_choice_inputs(run):
    """The choice a run of a tuned model waits for (ancient: a choice redone with the same
    rate redoes no run; one that changes the rate changes the run's spec, and that redoes it).
    """
    if not dlstudy.is_tuned_rate(STUDY, run.model):
        return {}
    return {
        "lr_choice": ancient(dlrates.choice_path(run.model, run.batch * run.world_size))
    }


def _sweep_spec(wildcards):
    try:
        spec = dlrates.sweep_spec(
            STUDY,
            wildcards.model,
            int(wildcards.batch),
            wildcards.rate,
            int(wildcards.repeat),
        )
    except dlrates.RateError as err:
        raise WorkflowError(str(err)) from None
    if spec.run_id != run_of(wildcards).run_id:
        raise WorkflowError(
            f"{run_of(wildcards).run_id} is no learning-rate sweep run (they are {spec.run_id})"
        )
    return spec


@inspected
def lr_sweep_spec(wildcards):
    return _sweep_spec(wildcards).to_json()


@inspected
def lr_sweep_spec_sha(wildcards):
    return _sweep_spec(wildcards).sha256


@inspected
def lr_choice_input(wildcards):
    return dlrates.sweep_runs(STUDY, wildcards.model, int(wildcards.global_batch))


@inspected
def lr_choice_factors(wildcards):
    """rate -> factor of the linear rule's rate (JSON: a params change redoes the choice)."""
    model, batch = wildcards.model, int(wildcards.global_batch)
    linear = dlrates.linear_rate(STUDY, model, batch)
    return json.dumps(
        {repr(f * linear): f for f in dlrates.sweep_factors(STUDY, model)}
    )


def lr_tuning_files():
    """The stage's targets: its table, when any model's rate is tuned."""
    return [dlrates.SWEEP_TABLE] if dlrates.choice_files(STUDY) else []
