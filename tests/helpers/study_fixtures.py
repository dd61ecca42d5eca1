"""The session's shared tiny study of all four frameworks (LeNet on real MNIST, 1 and 2
emulated nodes), run once per session by Snakemake on the local profile as a user runs it,
and its report. Read by the tests of each framework's place in it
(tests/workflow/test_workflow_{tensorflow,bigdl,caffe,quality}.py) and by the SLURM study's
comparison with it (tests/slurm/test_slurm_workflow.py). One study instead of several: each
would run torch beside its framework again, and the aggregation, scaling model, figures and
report again. tests/conftest.py loads these fixtures for the whole session."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers.bigdl_runs import kill_leftovers
from helpers.paths import framework_python
from helpers.workflow import FOUR_FRAMEWORKS, snakemake


@pytest.fixture(scope="session")
def four_framework_study(tmp_path_factory, torch_py, caffe_py) -> Path:
    """The study's working directory once Snakemake has finished it (no process of it left)."""
    for framework in ("tensorflow", "bigdl"):
        framework_python(framework)  # built once per machine, as the workflow builds them
    workdir = tmp_path_factory.mktemp("four-frameworks")
    (workdir / "study.yaml").write_text(yaml.safe_dump(FOUR_FRAMEWORKS))
    try:
        proc = snakemake(workdir, timeout=2400)
    finally:
        leftovers = kill_leftovers(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert not leftovers, f"Spark, MPI or runner processes outlived the workflow: {leftovers}"
    return workdir


@pytest.fixture(scope="session")
def four_framework_report(four_framework_study) -> Path:
    """The study's Snakemake report (``--report``), built once for the tests that read it."""
    report = four_framework_study / "results" / "report.html"
    proc = snakemake(four_framework_study, "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return report
