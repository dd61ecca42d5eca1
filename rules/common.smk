"""Shared helpers: the validated study, the run matrix, paths and per-run resources.

Nothing here imports a deep-learning framework: the DAG of a 10,000-run study is built
from dlscale.study alone.
"""

import functools
import hashlib
import inspect
import json
import os
import sys

sys.path.insert(0, workflow.basedir)

from dlscale import study as dlstudy
from snakemake.utils import validate

try:
    STUDY = dlstudy.validate_config(
        config,
        dlstudy.load_schema(
            os.path.join(workflow.basedir, "schemas/config.schema.yaml")
        ),
    )
except dlstudy.ConfigError as err:
    raise WorkflowError(f"invalid study configuration: {err}") from None
validate(config, "../schemas/config.schema.yaml")

from dlscale import preflight

try:
    preflight.check_writable("results")
except preflight.PreflightError as err:
    raise WorkflowError(str(err)) from None

RUNS = dlstudy.expand_runs(STUDY)
ENVS_DIR = STUDY["envs_dir"]
FIGURES = ("throughput", "speedup", "breakdown", "loss")
FIGURE_FORMATS = ("html", "svg", "png")
FIGURE_CATEGORIES = {
    "throughput": "2. Computing speed and scaling",
    "speedup": "2. Computing speed and scaling",
    "breakdown": "3. Communication",
    "loss": "4. Training",
}
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
    """The venv a framework's jobs need (none with --sdm conda: the conda env is it)."""
    if USE_CONDA:
        return []
    return os.path.join(ENVS_DIR, framework, "dlscale-env.json")


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


def run_events():
    return [f"{run_dir(run)}/events.jsonl" for run in RUNS]


def figure_files():
    return [
        f"results/figures/{name}.{fmt}" for name in FIGURES for fmt in FIGURE_FORMATS
    ]


def run_of(wildcards, framework):
    return dlstudy.Run(
        framework=framework,
        model=wildcards.model,
        nodes=int(wildcards.nodes),
        ranks_per_node=int(wildcards.ranks_per_node),
        batch=int(wildcards.batch),
        repeat=int(wildcards.repeat),
        network=dlstudy.network_of_suffix(wildcards.net),
    )


def requirement_files(framework):
    """envs/<framework>.txt and, where there is one, the envs/<framework>.nodeps.txt that
    dlscale.envs.build_venv installs after it with --no-deps (BigDL's wheels)."""
    base = os.path.join(workflow.basedir, "envs", framework)
    nodeps = f"{base}.nodeps.txt"
    return [f"{base}.txt", *([nodeps] if os.path.exists(nodeps) else [])]


def requirements_sha(framework):
    """Hash of a framework's requirements: a training rule's parameter, so that runs are
    redone when the framework's pinned versions change, not when its venv is rebuilt.
    The files are hashed as one stream: with a single file (no nodeps list) the hash is
    that file's, as it always was, so adding this did not redo those frameworks' runs.
    """
    digest = hashlib.sha256()
    for path in requirement_files(framework):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()[:16]


def train_input(framework):
    """Inputs of a training rule: the framework's environment and the model's shards.

    The environment only has to exist (``ancient``): rebuilding it must not invalidate
    every run; its requirements' hash is a parameter instead (requirements_sha).
    """
    marker = env_marker(framework)
    return {
        "env": ancient(marker) if marker else [],
        "data": inspected(lambda wc: DATASET_DIRS[dlstudy.dataset_of(STUDY, wc.model)]),
    }


@functools.cache
def spec_json(run):
    """A run's spec as canonical JSON, computed once per run (two params use it)."""
    return json.dumps(dlstudy.run_spec(STUDY, run), sort_keys=True)


def train_spec(framework):
    return inspected(lambda wc: spec_json(run_of(wc, framework)))


def train_spec_sha(framework):
    # spec_sha256 hashes the same canonical JSON (sort_keys), so hash it directly.
    return inspected(
        lambda wc: hashlib.sha256(spec_json(run_of(wc, framework)).encode()).hexdigest()
    )


def failed_attempts(framework):
    """How many failed attempts a run has on record (see dlscale.launch).

    Used as a parameter of the training rules: a new failure changes it, so Snakemake's
    params trigger redoes the failed run on the next invocation, and nothing else.
    """

    def count(wc):
        attempts = os.path.join(run_dir(run_of(wc, framework)), "attempts")
        if not os.path.isdir(attempts):
            return 0
        return sum(1 for name in os.listdir(attempts) if name.startswith("failed-"))

    return inspected(count)


@inspected
def train_cpus(wildcards):
    """Cores a run occupies on this host: every rank's threads."""
    world = int(wildcards.nodes) * int(wildcards.ranks_per_node)
    return world * STUDY["threads_per_rank"]


def train_runtime():
    """Batch time limit: the run's own limit (enforced and recorded by the launcher) + slack.

    The same for every run, so a number, not a function of the wildcards: a function
    would be inspected and called per job (see ``inspected``).
    """
    return STUDY["run_timeout_min"] + 5


def train_resources():
    """What a run asks of the batch system: n nodes, one task per rank, threads per task.

    ``mpi`` makes the SLURM plugin run the job's shell in the allocation itself (not in
    ``srun -n1``), so that the launcher's own srun starts the ranks on every node.
    """
    return {
        "bench": 1,
        "runtime": train_runtime(),
        "nodes": inspected(lambda wc: int(wc.nodes)),
        "tasks": inspected(lambda wc: int(wc.nodes) * int(wc.ranks_per_node)),
        "cpus_per_task": STUDY["threads_per_rank"],
        "mem_mb": inspected(
            lambda wc: int(wc.ranks_per_node) * STUDY["mem_per_rank_mb"]
        ),
        "mpi": inspected(
            lambda wc: "srun" if int(wc.nodes) * int(wc.ranks_per_node) > 1 else ""
        ),
    }


PERFMODEL_TABLES = ("calibration", "validation", "validation_summary", "projection")
PERFMODEL_FIGURES = ("projection", "validation")
PERFMODEL_CAPTIONS = {
    "calibration": "../report/calibration.rst",
    "validation": "../report/validation.rst",
    "validation_summary": "../report/validation.rst",
    "projection": "../report/projection.rst",
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
