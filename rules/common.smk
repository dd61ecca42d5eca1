"""Shared helpers: the validated study, the run matrix, paths and per-run resources.

Nothing here imports a deep-learning framework: the DAG of a 10,000-run study is built
from dlscale.study alone.
"""

import dataclasses
import functools
import inspect
import json
import os
import shlex
import sys

from snakemake.logging import logger

from dlscale import catalog
from dlscale import commbench as dlcommbench
from dlscale import networks as dlnetworks
from dlscale import envs as dlenvs
from dlscale import study as dlstudy
from dlscale import tuning as dltuning

# Validated once, here, by dlscale.study (jsonschema with the schema completed from the
# catalog, defaults filled, then the checks a schema cannot express); Snakemake's own
# validate() would read the schema file without the catalog's names.
try:
    STUDY = dlstudy.validate_config(
        config,
        dlstudy.load_schema(
            os.path.join(workflow.basedir, "schemas/config.schema.yaml")
        ),
    )
except dlstudy.ConfigError as err:
    raise WorkflowError(f"invalid study configuration: {err}") from None


onstart:
    # Every rank of a local run is a process on this host. Checked once the executor is
    # known (after the DAG, before any job; never in a dry run, so that a cluster study
    # can be planned anywhere).
    if workflow.executor_plugin.name == "local":
        try:
            dlstudy.check_local_capacity(STUDY, os.cpu_count() or 1)
        except dlstudy.ConfigError as err:
            raise WorkflowError(f"invalid study configuration: {err}") from None


from dlscale import preflight

try:
    preflight.check_writable("results")
except preflight.PreflightError as err:
    raise WorkflowError(str(err)) from None

RUNS = dlstudy.expand_runs(STUDY)
if not workflow.remote_exec:
    # Before anything is submitted (a dry run prints it too): what the study will ask of
    # the cluster.
    logger.info(dlstudy.describe_plan(STUDY, RUNS))
ENVS_DIR = STUDY["envs_dir"]
from dlscale.outputs import (
    FIGURE_CATEGORIES,
    FIGURE_FORMATS,
    FIGURES,
    PERFMODEL_CAPTIONS,
    PERFMODEL_FIGURES,
    PERFMODEL_TABLES,
    CATEGORY_CAFFE_LAYERS,
    CATEGORY_FINDINGS,
    CATEGORY_PERFMODEL,
    CATEGORY_RUNS,
    CATEGORY_TUNING,
)

DATASET_DIRS = {
    "mnist": "results/data/mnist/shards",
    "fashion-mnist": "results/data/fashion-mnist/shards",
    # Synthetic and real ImageNet live apart, so switching source never reuses the other's shards.
    "imagenet": (
        "results/data/imagenet/shards"
        if STUDY["data"]["imagenet"]["source"] == "synthetic"
        else "results/data/imagenet-real/shards"
    ),
}


wildcard_constraints:
    **dlstudy.WILDCARD_CONSTRAINTS,


USE_CONDA = "conda" in {
    str(method).lower() for method in workflow.deployment_settings.deployment_method
}


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


#: The workflow's own requirement files (envs/<framework>.txt beside this Snakefile).
ENVS_SPEC_DIR = os.path.join(workflow.basedir, "envs")
CAFFE_HOME = STUDY["caffe"]["home"]
#: Rule outputs a framework's runs may need besides venv and data (catalog extra_inputs).
EXTRA_INPUTS = {
    "caffe": str(dlenvs.caffe_build_marker(ENVS_DIR, CAFFE_HOME, ENVS_SPEC_DIR)),
    "java": str(dlenvs.java_marker(ENVS_DIR)),
}
#: One Caffe build per BLAS (caffe option ``blas``; rules caffe_build, caffe_build_mkl).
CAFFE_BUILD_MARKERS = {
    blas: str(dlenvs.caffe_build_marker(ENVS_DIR, CAFFE_HOME, ENVS_SPEC_DIR, blas))
    for blas in dlenvs.CAFFE_BLAS
}


def inspected(func):
    """``func`` with its signature computed once and attached (``__signature__``).

    Snakemake calls inspect.signature on every input, params, threads and resources
    function of every job, each time it evaluates one (about 20 times a training job):
    a tenth of the planning time of a 10,000-run study went into re-deriving the same
    signatures (benchmarks/workflow_scale.py). inspect.signature returns an attached
    signature as is; the function itself is unchanged.
    """
    func.__signature__ = inspect.signature(func)
    return func


def run_dir(run):
    return f"results/runs/{run.run_id}"


AUTO_REPEATS = STUDY["repeats"] == "auto"


def run_events():
    """The events files of the study's runs (under ``repeats: auto``, each cell's first
    ``repeats_auto.min``): known before anything runs, so all of them are planned at once.
    """
    return [f"{run_dir(run)}/events.jsonl" for run in RUNS]


@inspected
def all_run_events(wildcards):
    """Every run's events file: the study's runs and, under ``repeats: auto``, each cell's
    further repeats, as far as its repeat checks (checkpoint repeat_check) asked for."""
    if not AUTO_REPEATS:
        return run_events()
    return [
        f"{run_dir(run)}/events.jsonl"
        for cell in RUNS
        if cell.repeat == 0
        for run in cell_repeats(cell)
    ]


def cell_repeats(cell):
    """The runs of one cell under ``repeats: auto``: ``min`` repeats, then one more each
    time the check of the repeats so far says the interval is still too wide."""
    count = dlstudy.initial_repeats(STUDY)
    while True:
        check = checkpoints.repeat_check.get(**cell_wildcards(cell), done=count).output[
            0
        ]
        with open(check, encoding="utf-8") as handle:
            if not json.load(handle)["more"]:
                break
        count += 1
    return [dataclasses.replace(cell, repeat=repeat) for repeat in range(count)]


def cell_wildcards(cell):
    return {
        "framework": cell.framework,
        "model": cell.model,
        "nodes": cell.nodes,
        "ranks_per_node": cell.ranks_per_node,
        "net": cell.net_suffix,
        "batch": cell.batch,
    }


@inspected
def repeat_check_input(wildcards):
    """The events of a cell's first ``count`` repeats."""
    cell = run_of({**dict(wildcards.items()), "repeat": 0})
    return [
        f"{run_dir(dataclasses.replace(cell, repeat=r))}/events.jsonl"
        for r in range(int(wildcards.done))
    ]


def figure_files():
    return [
        f"results/figures/{name}.{fmt}" for name in FIGURES for fmt in FIGURE_FORMATS
    ]


def run_of(wildcards):
    """The run a job's wildcards (or a mapping of them) name."""
    get = (
        wildcards.get
        if isinstance(wildcards, dict)
        else lambda name: getattr(wildcards, name)
    )
    return dlstudy.Run(
        framework=get("framework"),
        model=get("model"),
        nodes=int(get("nodes")),
        ranks_per_node=int(get("ranks_per_node")),
        batch=int(get("batch")),
        repeat=int(get("repeat")),
        network=dlstudy.network_of_suffix(get("net")),
    )


#: The study's frameworks that have a tuning grid (tune.enabled, more than one setting).
TUNED = {fw: dltuning.is_tuned(STUDY, fw) for fw in STUDY["frameworks"]}


@inspected
def run_input(wildcards):
    """Inputs of a training or tuning run: its framework's environment, the model's
    shards, and what the catalog says the framework needs besides (the Caffe build, Java).

    All ordinary inputs (no ``ancient``): each is named by the hash of what it is built
    from (dlscale.envs), so it changes exactly when a rebuild must redo the runs.
    """
    framework = catalog.framework(wildcards.framework)
    extra = {name: EXTRA_INPUTS[name] for name in framework.extra_inputs}
    if "caffe" in extra:
        extra["caffe"] = [
            CAFFE_BUILD_MARKERS[blas] for blas in caffe_blas_of(wildcards)
        ]
    return {
        "env": env_marker(framework.name),
        "data": DATASET_DIRS[dlstudy.dataset_of(STUDY, wildcards.model)],
        **extra,
    }


def caffe_blas_of(wildcards):
    """The BLAS builds a Caffe run may need: a tuning run's setting's; a study run's, the
    study's ``caffe.blas`` and, where the tuning stage chooses it, every candidate (all built
    for the tuning runs anyway; the choice is known only after its checkpoint)."""
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
    inputs = run_input(wildcards)
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


def tune_choice_file(framework, model):
    """The choice file of a tuned (framework, model): read as is once it exists; before,
    Snakemake's incomplete-checkpoint signal (the spec parameters are to be determined,
    and the job is re-evaluated when the checkpoint has run). Not checkpoints...get()
    when the file exists: in a parameter, get() is incomplete in the first pass of every
    invocation's DAG, and that marked the tables to be redone each time."""
    path = dltuning.choice_path(framework, model)
    if os.path.exists(path):
        return path
    return checkpoints.tune_choice.get(framework=framework, model=model).output[0]


def tuned_options(run):
    """The options the tuning stage chose for a run's framework and model ({} untuned)."""
    if not TUNED.get(run.framework):
        return {}
    return dltuning.read_choice(tune_choice_file(run.framework, run.model))


def run_spec(run):
    """A run's spec (dlscale.runspec.RunSpec), with the tuning stage's choice for its
    framework and model; built once per run and choice (two params use it; a job
    re-evaluated after the choice is made gets the new one)."""
    return _run_spec(run, json.dumps(tuned_options(run), sort_keys=True))


@functools.cache
def _run_spec(run, tuned_json):
    return dlstudy.run_spec(STUDY, run, json.loads(tuned_json))


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
    attempts = os.path.join(run_dir(run_of(wildcards)), "attempts")
    if not os.path.isdir(attempts):
        return 0
    return sum(
        1
        for name in os.listdir(attempts)
        if name.startswith("failed-") and name.endswith(".jsonl")
    )


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
    markers = dict(EXTRA_INPUTS)
    if "caffe" in framework.extra_inputs:  # the build of the run's own BLAS
        spec = (
            tune_run_of(wildcards)
            if "setting" in wildcards.keys()
            else run_spec(run_of(wildcards))
        )
        markers["caffe"] = CAFFE_BUILD_MARKERS[spec.options.get("blas", "openblas")]
    return " ".join(
        f"DLSCALE_{name.upper()}_MARKER={shlex.quote(os.path.abspath(markers[name]))}"
        for name in framework.extra_inputs
    )


def timed_threads(cpus):
    """``threads`` of a timed job: at least every core Snakemake may use here.

    Nothing else may run on the host while a run is timed (a Caffe compile on the other
    core made a 1-node ResNet-50 step 38% slower and crowned a superlinear speedup), and
    every job needs at least one thread, so a job holding all of them runs alone; untimed
    jobs still run beside each other. On a cluster the allocation is the job's own
    (``cpus_per_task``); this only orders the jobs that run where snakemake runs.
    """
    return max(cpus, workflow.cores or 1)


@inspected
def train_cpus(wildcards):
    """Cores a run occupies on this host: every rank's threads (at least all of them: a
    timed job runs alone, see timed_threads)."""
    world = int(wildcards.nodes) * int(wildcards.ranks_per_node)
    return timed_threads(world * STUDY["threads_per_rank"])


def train_runtime():
    """Batch time limit: the run's own limit (enforced and recorded by the launcher) + slack.

    The same for every run, so a number, not a function of the wildcards: a function
    would be inspected and called per job (see ``inspected``).
    """
    return STUDY["run_timeout_min"] + 5


#: The ``mpi`` resource of every training and tuning run (see train_resources).
MPI_RESOURCE = ""


def train_resources():
    """What a run asks of the batch system: n nodes, one task per rank, threads per task.

    ``mpi`` makes the SLURM plugin run the job's shell in the allocation itself (not in
    ``srun -n1``), so that the launcher's own srun starts the ranks on every node. The
    plugin acts on the key's presence; its value is the same empty string for every run
    (``--ntasks`` is then set from ``tasks`` alone: a non-empty value refuses one-task
    jobs), so that runs of any size can share a job group (``--groups train=runs``), whose
    jobs must agree on every string resource.
    """
    return {
        "runtime": train_runtime(),
        "nodes": inspected(lambda wc: int(wc.nodes)),
        "tasks": inspected(lambda wc: int(wc.nodes) * int(wc.ranks_per_node)),
        "cpus_per_task": STUDY["threads_per_rank"],
        "mem_mb": inspected(
            lambda wc: int(wc.ranks_per_node) * STUDY["mem_per_rank_mb"]
        ),
        "mpi": MPI_RESOURCE,
    }


def perfmodel_files():
    """The scaling model's tables and figures (targets of rule all)."""
    return [f"results/perfmodel/{name}.csv" for name in PERFMODEL_TABLES] + [
        f"results/figures/{name}.{fmt}"
        for name in PERFMODEL_FIGURES
        for fmt in FIGURE_FORMATS
    ]


def projection_preset(field):
    """A field of the projection's network preset, for the captions (the loopback's is fitted)."""
    from dlscale import networks as dlnetworks

    preset = dlnetworks.PRESETS.get(STUDY["projection"]["network"])
    if preset is None:  # loopback: fitted by the rule itself
        return ""
    return {
        "latency_us": f"{preset.latency_s * 1e6:g}",
        "bandwidth_gbit": f"{preset.bandwidth_gbit:g}",
        "source": preset.source,
    }[field]


# --- communication micro-benchmarks (rules/commbench.smk, dlscale.commbench) ---


#: The study's micro-benchmark settings (defaults in the schema's ``commbench``).
COMMBENCH = STUDY["commbench"]
#: The scaling model's tables beyond dlscale.outputs' list, and its figures (its own
#: module's list) with the report caption of each.
PERFMODEL_EXTRA_TABLES = (
    "efficiency50",
    "commbench",
    "commbench_fits",
    "commbench_checks",
    "latency_sensitivity",
)
PERFMODEL_ALL_FIGURES = tuple(
    dict.fromkeys([*PERFMODEL_FIGURES, "latency_sensitivity", "commbench"])
)
PERFMODEL_FIGURE_CAPTIONS = {
    "projection": "projection.rst",
    "validation": "validation.rst",
    "latency_sensitivity": "projection.rst",
    "commbench": "calibration.rst",
}
#: The study's frameworks in the catalog's order, and the raw TCP reference.
COMMBENCH_NAMES = [
    name for name in catalog.FRAMEWORK_NAMES if name in STUDY["frameworks"]
] + [dlcommbench.TCP]


def pooled_study_files(name):
    """``results/<name>.parquet`` of every study in ``projection.pool_studies``."""
    return [
        f"{study.rstrip('/')}/results/{name}.parquet"
        for study in STUDY["projection"]["pool_studies"]
    ]


def commbench_files():
    """Every micro-benchmark table of the study (none unless ``commbench.enabled``)."""
    if not COMMBENCH["enabled"]:
        return []
    return [
        f"results/perfmodel/commbench/{name}-{network}.csv"
        for name in COMMBENCH_NAMES
        for network in COMMBENCH["networks"]
    ]


def commbench_input(wildcards):
    """A framework's venv (and Java for Spark); the TCP reference needs only this python."""
    if wildcards.name not in catalog.FRAMEWORK_NAMES:
        return {}
    framework = catalog.framework(wildcards.name)
    extra = {
        name: EXTRA_INPUTS[name] for name in framework.extra_inputs if name == "java"
    }
    return {"env": env_marker(framework.name), **extra}


def commbench_conda_env(wildcards):
    """A framework's conda env; the TCP reference runs in the workflow's."""
    name = wildcards.name if wildcards.name in catalog.FRAMEWORK_NAMES else "workflow"
    return os.path.join(workflow.basedir, "envs", f"{name}.yaml")


def commbench_python(wildcards):
    if wildcards.name in catalog.FRAMEWORK_NAMES:
        return env_python(wildcards.name)
    return "python" if USE_CONDA else sys.executable


def commbench_args(wildcards):
    """The sweep's command-line arguments (the same for every framework; each uses its own)."""
    settings = COMMBENCH
    args = [
        "--sizes",
        *map(str, settings["sizes"]),
        "--worlds",
        *map(str, settings["worlds"]),
        "--tf-worlds",
        *map(str, settings["tensorflow_worlds"]),
        "--executors",
        *map(str, settings["executors"]),
        "--repeats",
        str(settings["repeats"]),
        "--max-op-s",
        str(settings["max_op_s"]),
        "--timeout-s",
        str(settings["timeout_s"]),
    ]
    if settings["models"]:
        args += ["--models", *settings["models"]]
    args += ["--algorithms", "default", *map(str, settings["algorithms"])]
    return " ".join(shlex.quote(a) for a in args)


# --- the tuning stage (rules/tune.smk, dlscale.tuning) ---


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


def tune_resources():
    """A tuning run asks the batch system for one node (see train_resources)."""
    tasks = STUDY["ranks_per_node"]
    return {
        "runtime": train_runtime(),
        "nodes": 1,
        "tasks": tasks,
        "cpus_per_task": STUDY["threads_per_rank"],
        "mem_mb": tasks * STUDY["mem_per_rank_mb"],
        "mpi": MPI_RESOURCE,
    }


@inspected
def tune_choice_input(wildcards):
    """Every tuning run of one (framework, model), interleaved (dlscale.tuning.tune_runs)."""
    return dltuning.tune_runs(STUDY, wildcards.framework, wildcards.model)


@inspected
def tune_choice_settings(wildcards):
    """setting id -> setting, the default first (JSON: a params change redoes the choice)."""
    return json.dumps(dltuning.grid_ids(STUDY, wildcards.framework))


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
    return ["results/tune/tuning.csv"] if tune_choice_files() else []


def workflow_python():
    """The python of the workflow's own jobs (its venv, or the rule's conda env)."""
    return "python" if USE_CONDA else sys.executable
