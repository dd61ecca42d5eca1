"""The workflow's job builders: paths, command-line arguments and resources of its jobs.

Plain functions of the validated study (a dict) and a run's fields, so that the rules only
orchestrate and what a job is asked to do can be unit-tested without Snakemake
(tests/unit/test_jobs.py). Standard library and the ground floor only: Snakemake imports this
module when it builds the DAG, for every job of a study of thousands of runs.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from dlscale import catalog, networks, quality, runid
from dlscale.runid import Run

F = TypeVar("F", bound=Callable[..., Any])


def inspected(func: F) -> F:
    """``func`` with its signature computed once and attached (``__signature__``).

    Snakemake calls inspect.signature on every input, params, threads and resources
    function of every job, each time it evaluates one (about 20 times a training job), and
    re-deriving the same signatures is a noticeable part of planning a large study
    (benchmarks/workflow_scale.py). inspect.signature returns an attached signature as is;
    the function itself is unchanged.
    """
    func.__signature__ = inspect.signature(func)  # type: ignore[attr-defined]
    return func


# --- runs and their cells -------------------------------------------------------------------


def run_dir(run: Run) -> str:
    """Where a run's events and log live: ``results/runs/<run id>``."""
    return runid.run_dir(run.run_id)


def events_file(run: Run) -> str:
    return f"{run_dir(run)}/events.jsonl"


def run_events(runs: Iterable[Run]) -> list[str]:
    """The events files of ``runs``, in their order."""
    return [events_file(run) for run in runs]


def cell_wildcards(cell: Run) -> dict[str, Any]:
    """The wildcards that name a run's cell (every field of its run id but the repeat)."""
    return cell.wildcards()


def repeat_events(cell: Run, count: int) -> list[str]:
    """The events files of a cell's first ``count`` repeats."""
    return [events_file(dataclasses.replace(cell, repeat=repeat)) for repeat in range(count)]


def failed_attempts(directory: str | os.PathLike[str]) -> int:
    """How many failed attempts a run's folder has on record (dlscale.launch writes
    ``attempts/failed-*.jsonl``); 0 before its first. An attempt that diverged (its loss
    became NaN or infinite: ``quality.says_diverged``) is not counted: it is the outcome of
    its rate and batch, recorded, and the same seed and rate would diverge again, so a new
    one does not redo the run (delete its folder to retry it)."""
    attempts = os.path.join(directory, "attempts")
    if not os.path.isdir(attempts):
        return 0
    return sum(
        1
        for name in os.listdir(attempts)
        if name.startswith("failed-")
        and name.endswith(".jsonl")
        and not _diverged(os.path.join(attempts, name))
    )


def _diverged(attempt: str) -> bool:
    """Whether a failed attempt's record (its events, run_end last) says it diverged."""
    try:
        with open(attempt, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 65536))
            last = handle.read().decode("utf-8", "replace").rstrip("\n").rsplit("\n", 1)[-1]
        return quality.says_diverged(json.loads(last).get("reason"))
    except (OSError, ValueError, AttributeError):
        return False


# --- data and environments ------------------------------------------------------------------


def dataset_dirs(study: Mapping[str, Any]) -> dict[str, str]:
    """Each dataset's shard folder. Synthetic and real ImageNet live apart, so switching
    source never reuses the other's shards."""
    imagenet = "imagenet" if study["data"]["imagenet"]["source"] == "synthetic" else "imagenet-real"
    return {
        "mnist": "results/data/mnist/shards",
        "fashion-mnist": "results/data/fashion-mnist/shards",
        "imagenet": f"results/data/{imagenet}/shards",
    }


def heldout_dirs(study: Mapping[str, Any]) -> dict[str, str]:
    """Each dataset's held-out shard folder beside its training shards
    (``dlscale.data.shards.heldout_dir``), for the datasets the workflow makes one of: MNIST's
    and Fashion-MNIST's test splits, the synthetic ImageNet's held-out part. Real ImageNet
    shards from a user's listing have none yet: their runs record that they evaluated nothing."""
    dirs = dataset_dirs(study)
    names = ["mnist", "fashion-mnist"] + (
        ["imagenet"] if study["data"]["imagenet"]["source"] == "synthetic" else []
    )
    return {name: os.path.join(os.path.dirname(dirs[name]), "heldout") for name in names}


def marker_variables(markers: Mapping[str, str], names: Iterable[str]) -> str:
    """``DLSCALE_<NAME>_MARKER=<absolute path>`` for each of ``names``: how the launcher
    finds the extra inputs (the Caffe build, Java) a framework's runs need."""
    return " ".join(
        f"DLSCALE_{name.upper()}_MARKER={shlex.quote(os.path.abspath(markers[name]))}" for name in names
    )


# --- training and tuning runs ---------------------------------------------------------------

#: The ``mpi`` resource of every training and tuning run (see train_resources).
MPI_RESOURCE = ""


def train_runtime(study: Mapping[str, Any]) -> int:
    """Batch time limit of a run, in minutes: the run's own limit (enforced and recorded by
    the launcher) and slack. The same for every run, so a number, not a function of the
    wildcards (a function would be inspected and called per job)."""
    return study["run_timeout_min"] + 5


def train_resources(study: Mapping[str, Any]) -> dict[str, Any]:
    """What a run asks of the batch system: n nodes, one task per rank, threads per task.

    ``mpi`` makes the SLURM plugin run the job's shell in the allocation itself (not in
    ``srun -n1``), so that the launcher's own srun starts the ranks on every node. The
    plugin acts on the key's presence; its value is the same empty string for every run
    (``--ntasks`` is then set from ``tasks`` alone: a non-empty value refuses one-task
    jobs), so that runs of any size can share a job group (``--groups train=runs``), whose
    jobs must agree on every string resource.
    """
    mem_per_rank = study["mem_per_rank_mb"]
    return {
        "runtime": train_runtime(study),
        "nodes": inspected(lambda wc: int(wc.nodes)),
        "tasks": inspected(lambda wc: int(wc.nodes) * int(wc.ranks_per_node)),
        "cpus_per_task": study["threads_per_rank"],
        "mem_mb": inspected(lambda wc: int(wc.ranks_per_node) * mem_per_rank),
        "mpi": MPI_RESOURCE,
    }


def tune_resources(study: Mapping[str, Any]) -> dict[str, Any]:
    """A tuning run asks the batch system for one node (see train_resources)."""
    tasks = study["ranks_per_node"]
    return {
        "runtime": train_runtime(study),
        "nodes": 1,
        "tasks": tasks,
        "cpus_per_task": study["threads_per_rank"],
        "mem_mb": tasks * study["mem_per_rank_mb"],
        "mpi": MPI_RESOURCE,
    }


# --- communication micro-benchmarks ---------------------------------------------------------


def commbench_names(study: Mapping[str, Any], reference: str) -> list[str]:
    """The study's frameworks in the catalog's order, then the raw-transport ``reference``."""
    return [name for name in catalog.FRAMEWORK_NAMES if name in study["frameworks"]] + [reference]


def commbench_files(study: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """Every micro-benchmark table of the study (none unless ``commbench.enabled``)."""
    settings = study["commbench"]
    if not settings["enabled"]:
        return []
    return [
        f"results/perfmodel/commbench/{name}-{network}.csv"
        for name in names
        for network in settings["networks"]
    ]


def commbench_args(settings: Mapping[str, Any]) -> str:
    """The sweep's command-line arguments, quoted (the same for every framework; each uses
    those it has)."""
    args = [
        "--sizes", *map(str, settings["sizes"]),
        "--worlds", *map(str, settings["worlds"]),
        "--tf-worlds", *map(str, settings["tensorflow_worlds"]),
        "--executors", *map(str, settings["executors"]),
        "--repeats", str(settings["repeats"]),
        "--max-op-s", str(settings["max_op_s"]),
        "--timeout-s", str(settings["timeout_s"]),
    ]  # fmt: skip
    if settings["models"]:
        args += ["--models", *settings["models"]]
    args += ["--algorithms", "default", *map(str, settings["algorithms"])]
    return " ".join(shlex.quote(a) for a in args)


def commbench_runtime(settings: Mapping[str, Any]) -> int:
    """Batch time limit of a micro-benchmark job, in minutes: its own timeout and slack."""
    return int(settings["timeout_s"]) // 60 + 5


# --- the scaling model ----------------------------------------------------------------------


def pooled_study_files(study: Mapping[str, Any], name: str) -> list[str]:
    """``results/<name>.parquet`` of every study in ``projection.pool_studies``."""
    return [f"{other.rstrip('/')}/results/{name}.parquet" for other in study["projection"]["pool_studies"]]


def projection_preset(study: Mapping[str, Any], field: str) -> str:
    """A field of the projection's network preset, for the captions; "" for the loopback,
    whose figures the scaling model fits itself."""
    preset = networks.PRESETS.get(study["projection"]["network"])
    if preset is None:
        return ""
    return {
        "latency_us": f"{preset.latency_s * 1e6:g}",
        "bandwidth_gbit": f"{preset.bandwidth_gbit:g}",
        "source": preset.source,
    }[field]
