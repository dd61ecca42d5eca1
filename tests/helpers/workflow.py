"""The workflow run as a user runs it (Snakemake in a subprocess, a working directory of its
own, the local profile), and the job counts of a dry run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers.paths import ENVS_DIR, REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake"]

#: The aggregation's target: a test whose subject is the runs and their tables (a rerun, a
#: repeat, a fault) asks for this, not for the figures and the scaling model as well, whose
#: jobs cost ~15 s of a small study's invocation (tests/workflow/test_workflow.py and the
#: shared four-framework study make and check those).
RUNS_TABLE = "results/runs.csv"

#: The session's tiny study of all four frameworks (tests/workflow/conftest.py). LeNet: 20
#: iterations, enough for every framework's to have learned at this learning rate. The
#: AutoEncoder: torch only, at learning rate 0, so that a model that learned nothing is in
#: the tables, the figures and the report (at chance, never in a finding).
FOUR_FRAMEWORKS = {
    "frameworks": ["torch", "tensorflow", "bigdl", "caffe"],
    "models": ["lenet", "autoencoder"],
    "models_per_framework": {"tensorflow": ["lenet"], "bigdl": ["lenet"], "caffe": ["lenet"]},
    "nodes": [1, 2],
    "iterations": {"lenet": 20, "autoencoder": 20},
    "warmup": 2,
    "repeats": 1,
    "learning_rate": {"lenet": 0.02, "autoencoder": 0.0},
    "envs_dir": str(ENVS_DIR),
    "tensorflow": {"strategy": "mwms"},
    "caffe": {"time_iterations": 2},
    # The demo's shared Spark cluster (one per node count here), so that the study's "nothing
    # left running" check covers its supervisor and daemons too.
    "bigdl": {"driver_memory": "1g", "executor_memory": "1g", "cluster": "per_study"},
}


def snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """Snakemake in ``workdir`` with ``args`` (targets and flags) first: ``--configfile``,
    last, takes several values."""
    cmd = [
        *SNAKEMAKE,
        *args,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--profile",
        str(REPO / "profiles" / "local"),
        "--configfile",
        str(workdir / "study.yaml"),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)


def planned_jobs(output: str) -> dict[str, int]:
    """Job counts from Snakemake's 'Job stats' table of a dry run."""
    counts: dict[str, int] = {}
    if "Job stats" not in output:
        return counts
    table = output.split("Job stats", 1)[1]
    for line in table.splitlines():
        match = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if match and match[1] != "total":
            counts[match[1]] = int(match[2])
    return counts
