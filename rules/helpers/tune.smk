"""The tuning stage's helpers (rules/tune.smk, dlscale.tune.grid): each tuning run's spec, the
choice a (framework, model) reads, and the stage's targets."""

import functools
import json
import os

from dlscale.tune import grid as dltuning
from dlscale.outputs import CATEGORY_TUNING, TUNING_TABLE

#: The study's frameworks that have a tuning grid (tune.enabled, more than one setting).
TUNED = {fw: dltuning.is_tuned(STUDY, fw) for fw in STUDY["frameworks"]}


def tune_choice_file(framework, model):
    """The choice file of a tuned (framework, model) (made_or_checkpoint: rules/common.smk)."""
    return made_or_checkpoint(
        dltuning.choice_path(framework, model),
        checkpoints.tune_choice,
        framework=framework,
        model=model,
    )


def tuned_options(run):
    """The options the tuning stage chose for a run's framework and model ({} untuned)."""
    if not TUNED.get(run.framework):
        return {}
    return dltuning.read_choice(tune_choice_file(run.framework, run.model))


def tune_run_of(wildcards):
    """The RunSpec of one tuning run (a setting of the grid, one repeat)."""
    return _tune_spec(
        wildcards.framework, wildcards.model, wildcards.setting, int(wildcards.repeat)
    )


@functools.cache
def _tune_spec(framework, model, setting, repeat):
    try:
        return dltuning.tune_spec(STUDY, framework, model, setting, repeat)
    except dltuning.TuneError as err:
        raise WorkflowError(str(err)) from None


@inspected
def tune_run_spec(wildcards):
    return tune_run_of(wildcards).to_json()


@inspected
def tune_run_spec_sha(wildcards):
    return tune_run_of(wildcards).sha256


@inspected
def tune_cpus(wildcards):
    """Cores of a tuning run: one node's ranks x threads (at least all: it is timed)."""
    return timed_threads(STUDY["ranks_per_node"] * STUDY["threads_per_rank"])


def race_history(framework, model, upto=None):
    """(events files, last check) of one (framework, model)'s race: the first round (every
    setting, ``tune.repeats`` times, interleaved: dlscale.tune.grid.tune_runs), then one round
    per check that asked for more (its ``next`` settings), up to the check after ``upto``
    rounds (None: until a check says stop). The checks are checkpoints (tune_race): a
    round is planned once the check before it has run, as under ``repeats: auto``. A model
    whose grid is the default alone (dlscale.tune.grid.model_grid_report) has no run and no
    check: ([], None)."""
    runs = dltuning.tune_runs(STUDY, framework, model)
    if not runs:
        return [], None
    done = STUDY["tune"]["repeats"]
    last = None
    while upto is None or done < upto:
        last = checkpoints.tune_race.get(
            framework=framework, model=model, done=done
        ).output[0]
        with open(last, encoding="utf-8") as handle:
            check = json.load(handle)
        if not check["more"]:
            if upto is not None:
                raise WorkflowError(
                    f"{last} ends the race of {framework}/{model}: there is no check after {upto} rounds"
                )
            break
        runs += dltuning.race_round(STUDY, framework, model, check["next"], done)
        done += 1
    return runs, last


@inspected
def tune_race_input(wildcards):
    """The events of every run of the race before the check after {done} rounds."""
    return race_history(wildcards.framework, wildcards.model, int(wildcards.done))[0]


@inspected
def tune_race_previous(wildcards):
    """The check before this one (its dropped settings stay dropped); none after the first round."""
    return (
        race_history(wildcards.framework, wildcards.model, int(wildcards.done))[1] or []
    )


@inspected
def tune_race_budget(wildcards):
    return dltuning.race_budget(STUDY, wildcards.framework, wildcards.model)


@inspected
def tune_choice_input(wildcards):
    """Every tuning run of one (framework, model)'s race, as far as its checks asked."""
    return race_history(wildcards.framework, wildcards.model)[0]


@inspected
def tune_choice_race(wildcards):
    """The race's last check (why each setting stopped); none for a model with no race."""
    return race_history(wildcards.framework, wildcards.model)[1] or []


@inspected
def tune_choice_settings(wildcards):
    """setting id -> setting of the model's grid, the default first (JSON: a params change
    redoes the choice)."""
    return json.dumps(
        dltuning.model_grid_ids(STUDY, wildcards.framework, wildcards.model)
    )


@inspected
def tune_choice_left_out(wildcards):
    """setting id -> [setting, why] of the framework's grid settings this model does not
    run (the same run as an earlier one for it), for its choice record."""
    settings = dltuning.grid_ids(STUDY, wildcards.framework)
    _, left_out = dltuning.model_grid_report(
        STUDY, wildcards.framework, wildcards.model
    )
    return json.dumps({sid: [settings[sid], why] for sid, why in left_out.items()})


def tune_choice_files():
    """The choice file of every tuned (framework, model) of the study."""
    return [
        dltuning.choice_path(fw, model)
        for fw in STUDY["frameworks"]
        if TUNED.get(fw)
        for model in dlstudy.models_of(STUDY, fw)
    ]


def tune_files():
    """The tuning stage's targets: its table, when anything is tuned."""
    return [TUNING_TABLE] if tune_choice_files() else []
