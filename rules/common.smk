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
        if PREFLIGHT:
            try:
                preflight.check_needs(
                    preflight.local_missing(
                        STUDY_FRAMEWORKS,
                        STUDY["caffe"].get("mpirun", "mpirun"),
                        CAFFE_BUILT,
                        preflight.Host(),
                        local_namespaces_missing,
                    )
                )
            except preflight.PreflightError as err:
                raise WorkflowError(str(err)) from None


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

#: The frameworks the study runs: the preflight checks what these need, and nothing else.
STUDY_FRAMEWORKS = sorted({run.framework for run in RUNS})
#: The Caffe build's marker exists (no build, nor its packages, still to come).
CAFFE_BUILT = dlenvs.caffe_build_marker(
    ENVS_DIR, STUDY["caffe"]["home"], ENVS_SPEC_DIR
).exists()
#: Whether this is the invocation the user typed (not a job, an --unlock, a conda run).
PREFLIGHT = not (
    workflow.remote_exec
    or workflow.subprocess_exec
    or USE_CONDA
    or "--unlock" in sys.argv
)

# What the study's frameworks need that is not here, each piece named with the way to
# provide it without root, in the first seconds rather than minutes later in a build log:
# the torch venv's CPU wheel source (pip is asked only while that venv is still to be
# built), Java for BigDL, Caffe's build libraries (dlscale.study.preflight). The local
# profile's own needs (mpirun, namespaces) are checked at onstart, once the executor is known.
if PREFLIGHT:
    try:
        preflight.check_needs(
            [
                preflight.torch_wheel_missing(
                    STUDY_FRAMEWORKS,
                    dlenvs.env_marker(ENVS_DIR, "torch", ENVS_SPEC_DIR).exists(),
                    dlenvs.lock_path(os.path.join(ENVS_SPEC_DIR, "torch.txt")),
                ),
                *preflight.study_missing(
                    STUDY_FRAMEWORKS, STUDY["caffe"], CAFFE_BUILT, preflight.Host()
                ),
            ]
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


def local_namespaces_missing():
    """What the study's local runs need of network namespaces that this host cannot make
    (preflight.namespaces_missing; None: nothing): probed once (``unshare``, a few ms), and
    each run's launcher asked whether it listens on every interface only when no private
    namespace of any kind can be made."""
    from dlscale import networks as dlnetworks
    from dlscale.host import netns as dlnetns
    from dlscale.launch import network as dlnetwork

    options = dlnetwork.isolation_options()
    listening = []
    if all(reason is not None for reason in options.values()):
        listening = sorted(
            {
                run.framework
                for run in RUNS
                if dlnetwork.listens_on_every_interface(dlstudy.run_spec(STUDY, run))
            }
        )
    emulated = sorted({run.network for run in RUNS if run.network != dlnetworks.HOST})
    shaping = dlnetns.unavailable(shaping=True) if emulated else None
    return preflight.namespaces_missing(options, listening, emulated, shaping)


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


def made_or_checkpoint(path, checkpoint, **wildcards):
    """A checkpoint's output read as is once it exists; before, Snakemake's
    incomplete-checkpoint signal (the parameters that read it are to be determined and the
    job is re-evaluated when the checkpoint has run). Not checkpoint.get() when the file
    exists: in a parameter, get() is incomplete in the first pass of every invocation's
    DAG, and that marked the tables to be redone each time."""
    if os.path.exists(path):
        return path
    return checkpoint.get(**wildcards).output[0]
