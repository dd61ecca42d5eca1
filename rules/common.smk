"""What every stage needs: the validated study, the run matrix, the wildcard constraints,
the environments' paths and the helpers every stage's jobs use.

Each stage's own helpers live beside its rules (rules/helpers/<stage>.smk, included by the
stage's file: `snakemake --lint` asks that a file with rules define no functions); what a
job is asked to do (paths, arguments, resources) is built by dlscale.study.jobs and
dlscale.outputs, plain functions of the study. Nothing here imports a deep-learning
framework: the DAG of a 10,000-run study is built from dlscale.study.matrix alone.
"""

import os
import sys

from snakemake.logging import logger

from dlscale import catalog as dlcatalog
from dlscale import envs as dlenvs
from dlscale import runid
from dlscale.study import jobs
from dlscale.study import preflight
from dlscale.study import matrix as dlstudy
from dlscale.study import validation
from dlscale.study.jobs import inspected, run_dir
from dlscale.outputs import figure_files, perfmodel_files, replay_files

# Validated once, here, by dlscale.study.matrix (jsonschema with the schema completed from the
# catalog, defaults filled, then the checks a schema cannot express); Snakemake's own
# validate() would read the schema file without the catalog's names.
try:
    validation.check_config_files(workflow.configfiles)
    STUDY = validation.validate_config(
        config,
        validation.load_schema(dlcatalog.CONFIG_SCHEMA),
    )
except validation.ConfigError as err:
    raise WorkflowError(f"invalid study configuration: {err}") from None


onstart:
    # Every rank of a local run is a process on this host. Checked once the executor is
    # known (after the DAG, before any job; never in a dry run, so that a cluster study
    # can be planned anywhere).
    if workflow.executor_plugin.name == "local":
        try:
            validation.check_local_capacity(STUDY, os.cpu_count() or 1)
        except validation.ConfigError as err:
            raise WorkflowError(f"invalid study configuration: {err}") from None


try:
    preflight.check_writable("results")
except preflight.PreflightError as err:
    raise WorkflowError(str(err)) from None

RUNS = dlstudy.expand_runs(STUDY)
if not workflow.remote_exec:
    # Before anything is submitted (a dry run prints it too): what the study will ask of
    # the cluster.
    logger.info(dlstudy.describe_plan(STUDY, RUNS))

# A lock left by a killed invocation: Snakemake's own error (or, in a dry run, "another
# instance is running") does not say so, nor which command clears it. Said once, by the
# invocation the user typed (not its jobs, nor an --unlock or --nolock one).
UNLOCKING = {"--unlock", "--nolock"} & set(sys.argv)
if not (workflow.remote_exec or workflow.subprocess_exec or UNLOCKING):
    STALE_LOCK = preflight.stale_lock_advice(os.getcwd(), sys.argv)
    if STALE_LOCK:
        logger.warning(STALE_LOCK)


wildcard_constraints:
    **dlstudy.WILDCARD_CONSTRAINTS,


# --- environments: where each framework's python is (rules/envs.smk builds them) ---

ENVS_DIR = STUDY["envs_dir"]
#: The workflow's own requirement files (envs/<framework>.txt beside this Snakefile).
ENVS_SPEC_DIR = os.path.join(workflow.basedir, "envs")
USE_CONDA = "conda" in {
    str(method).lower() for method in workflow.deployment_settings.deployment_method
}

# The torch venv's CPU wheel comes only from a wheel source the user configures: said in
# the first seconds, not minutes later in the venv's build log (by the invocation the user
# typed, never its jobs; pip is asked only while that venv is still to be built).
if not (
    workflow.remote_exec
    or workflow.subprocess_exec
    or USE_CONDA
    or "--unlock" in sys.argv
):
    try:
        preflight.check_torch_wheel_source(
            {run.framework for run in RUNS},
            dlenvs.env_marker(ENVS_DIR, "torch", ENVS_SPEC_DIR).exists(),
            dlenvs.lock_path(os.path.join(ENVS_SPEC_DIR, "torch.txt")),
        )
    except preflight.PreflightError as err:
        raise WorkflowError(str(err)) from None


def env_python(framework):
    """The python that runs a framework: its own venv, or the rule's conda env's python."""
    if USE_CONDA:
        return "python"
    return os.path.abspath(os.path.join(ENVS_DIR, framework, "bin", "python"))


def env_marker(framework):
    """The venv a framework's jobs need, named by its requirements' hash (see
    dlscale.envs.env_marker: an ordinary input, never ``ancient``); none with --sdm conda.
    """
    if USE_CONDA:
        return []
    return str(dlenvs.env_marker(ENVS_DIR, framework, ENVS_SPEC_DIR))


def extra_inputs(framework):
    """What a framework's jobs need besides its venv, by name (catalog ``extra_inputs``:
    the Caffe build, which also installs Open MPI; Java for Spark), as rule outputs
    (EXTRA_INPUTS, rules/envs.smk)."""
    return {name: EXTRA_INPUTS[name] for name in framework.extra_inputs}


def workflow_python():
    """The python of the workflow's own jobs (its venv, or the rule's conda env)."""
    return "python" if USE_CONDA else sys.executable


# --- timed jobs and the runs of the matrix ---


def timed_threads(cpus):
    """``threads`` of a timed job: at least every core Snakemake may use here.

    Nothing else may run on the host while a run is timed (work on another core slows a
    run's steps and can crown a superlinear speedup), and every job needs at least one
    thread, so a job holding all of them runs alone; untimed jobs still run beside each
    other. On a cluster the allocation is the job's own (``cpus_per_task``); this only
    orders the jobs that run where snakemake runs.
    """
    return max(cpus, workflow.cores or 1)


def run_events():
    """The events files of the study's runs (under ``repeats: auto``, each cell's first
    ``repeats_auto.min``): known before anything runs, so all of them are planned at once.
    """
    return jobs.run_events(RUNS)


def run_of(wildcards):
    """The run a job's wildcards (or a mapping of them) name."""
    if isinstance(wildcards, dict):
        return runid.Run.from_fields(wildcards)
    return runid.Run.from_fields(
        {name: getattr(wildcards, name) for name in runid.FIELD_PATTERNS}
    )
