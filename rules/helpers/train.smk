"""The training runs' helpers (rules/train.smk; the tuning runs reuse most of them): a run's
inputs, its spec, and what its job asks of the batch system.

The spec of a run of a tuned framework carries the tuning stage's choice (TUNED,
tuned_options: rules/helpers/tune.smk).
"""

import functools
import json

from dlscale import catalog
from dlscale.tune import grid as dltuning


@inspected
def run_input(wildcards):
    """Inputs of a training or tuning run: its framework's environment, the model's
    shards, and what the catalog says the framework needs besides (the Caffe build, Java).

    All ordinary inputs (no ``ancient``): each is named by the hash of what it is built
    from (dlscale.envs), so it changes exactly when a rebuild must redo the runs.
    """
    framework = catalog.framework(wildcards.framework)
    extra = extra_inputs(framework)
    if "caffe" in extra:  # the one build, and the BLAS implementation(s) it loads
        extra["caffe"] = [
            extra["caffe"],
            *(CAFFE_BLAS_MARKERS[blas] for blas in caffe_blas_of(wildcards)),
        ]
    dataset = dlstudy.dataset_of(STUDY, wildcards.model)
    heldout = {"heldout": HELDOUT_DIRS[dataset]} if dataset in HELDOUT_DIRS else {}
    return {
        "env": env_marker(framework.name),
        "data": DATASET_DIRS[dataset],
        **heldout,
        **extra,
    }


def caffe_blas_of(wildcards):
    """The BLAS implementations a Caffe run may load: a tuning run's setting's; a study
    run's, the study's ``caffe.blas`` and, where the tuning stage chooses it, every candidate
    (all installed for the tuning runs anyway; the choice is known only after its checkpoint).
    """
    study_blas = STUDY["caffe"]["blas"]
    if "setting" in wildcards.keys():
        return [tune_run_of(wildcards).options.get("blas", study_blas)]
    grid = dltuning.grid(STUDY, "caffe")
    return sorted({study_blas, *(setting.get("blas", study_blas) for setting in grid)})


@inspected
def train_input(wildcards):
    """A study run's inputs: run_input's, and the tuning stage's choice for its framework
    and model where that framework is tuned (its spec is known only once the choice is:
    checkpoint tune_choice, rules/tune.smk)."""
    inputs = {**run_input(wildcards), **lr_choice_inputs(run_of(wildcards))}
    if TUNED.get(wildcards.framework):
        # The path itself, not checkpoints...get(): every input stays known (a dry run
        # prints the job whole); the spec parameters read the choice through the
        # checkpoint (to be determined until it has run; then the job is re-evaluated).
        # ancient: a choice redone with the same result redoes no run; one that changes
        # a run's settings changes its spec parameter, and that redoes it.
        inputs["tune_choice"] = ancient(
            dltuning.choice_path(wildcards.framework, wildcards.model)
        )
    return inputs


def run_spec(run):
    """A run's spec (dlscale.runspec.RunSpec), with the tuning stage's choice for its
    framework and model and, under ``rule: tuned``, its model and batch's swept rate; built once per run and choice (two params use it; a job
    re-evaluated after the choice is made gets the new one)."""
    return _run_spec(
        run,
        json.dumps(tuned_options(run), sort_keys=True),
        lr_rate_of(run.model, run.batch * run.world_size),
    )


@functools.cache
def _run_spec(run, tuned_json, lr_rate):
    return dlstudy.run_spec(STUDY, run, json.loads(tuned_json), lr_rate)


@inspected
def train_spec(wildcards):
    return run_spec(run_of(wildcards)).to_json()


@inspected
def train_spec_sha(wildcards):
    return run_spec(run_of(wildcards)).sha256


@inspected
def failed_attempts(wildcards):
    """How many failed attempts a run has on record (see dlscale.launch).

    A parameter of the training rule: a new failure changes it, so Snakemake's params
    trigger redoes the failed run on the next invocation, and nothing else.
    """
    return jobs.failed_attempts(run_dir(run_of(wildcards)))


@inspected
def train_requirements(wildcards):
    """The framework's requirements' hash: its runs are redone when its pins change."""
    return dlenvs.requirements_sha(wildcards.framework, ENVS_SPEC_DIR)


@inspected
def train_python(wildcards):
    return env_python(wildcards.framework)


@inspected
def train_markers(wildcards):
    """``DLSCALE_<NAME>_MARKER=<path>`` for each extra input: how the launcher finds them."""
    framework = catalog.framework(wildcards.framework)
    return jobs.marker_variables(EXTRA_INPUTS, framework.extra_inputs)


@inspected
def train_cpus(wildcards):
    """Cores a run occupies on this host: every rank's threads (at least all of them: a
    timed job runs alone, see timed_threads)."""
    world = int(wildcards.nodes) * int(wildcards.ranks_per_node)
    return timed_threads(world * STUDY["threads_per_rank"])
