"""One invocation brings the study up to date after a framework's requirements change.

The regression (snakemake#4166, with the venv marker as an ``ancient`` input): a changed
lock file planned the environment rebuild alone, printed "100% done" and left
every run of the study missing until a second invocation. The markers are now named by
what they are built from (dlscale.envs.env_marker), so the plan is complete at once.

Runs a copy of the workflow (its own envs/ folder, so the test edits a copy of a
lock file, never the checkout's) on a tiny torch + TensorFlow study.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import ENVS_DIR, REPO, framework_python
from helpers.workflow import RUNS_TABLE, planned_jobs

from dlscale.envs import env_marker

pytestmark = pytest.mark.workflow

STUDY = {
    "frameworks": ["torch", "tensorflow"],
    "models": ["lenet"],
    "nodes": [1],
    "iterations": {"lenet": 6},
    "warmup": 1,
    "repeats": 1,
}
WORKFLOW_PARTS = ("Snakefile", "rules", "schemas", "scripts", "report", "profiles", "envs", "config.yaml")


def snakemake(workflow: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Snakemake of the copied workflow, targets and flags first (``--configfile`` takes several values)."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        *args,
        "--snakefile",
        str(workflow / "Snakefile"),
        "--directory",
        str(workdir),
        "--profile",
        str(workflow / "profiles" / "local"),
        "--configfile",
        str(workdir / "study.yaml"),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=workdir)


@pytest.fixture
def copied_workflow(tmp_path) -> tuple[Path, Path, Path]:
    """A copy of the workflow, a study folder, and an envs folder whose venvs are the
    machine's (linked: a rebuild over an unchanged venv installs nothing new)."""
    for framework in STUDY["frameworks"]:
        framework_python(framework)
    workflow = tmp_path / "workflow"
    workflow.mkdir()
    for part in WORKFLOW_PARTS:
        source = REPO / part
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, workflow / part)
    envs = tmp_path / "envs"
    envs.mkdir()
    for framework in STUDY["frameworks"]:
        (envs / framework).symlink_to(ENVS_DIR / framework)
    workdir = tmp_path / "study"
    workdir.mkdir()
    (workdir / "study.yaml").write_text(yaml.safe_dump({**STUDY, "envs_dir": str(envs)}))
    return workflow, workdir, envs


def test_changed_requirements_rebuild_and_rerun_in_one_invocation(copied_workflow):
    workflow, workdir, envs = copied_workflow
    proc = snakemake(workflow, workdir, RUNS_TABLE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = workdir / "results" / "runs"
    tf_events = runs / "tensorflow" / "lenet" / "n1x1" / "b64" / "r0" / "events.jsonl"
    torch_events = runs / "torch" / "lenet" / "n1x1" / "b64" / "r0" / "events.jsonl"
    tf_before, torch_before = tf_events.stat().st_mtime_ns, torch_events.stat().st_mtime_ns
    assert "Nothing to be done" in snakemake(workflow, workdir, RUNS_TABLE, "--dry-run").stdout

    # A changed lock (as `make lock` after a changed pin makes it): torch's environment.
    lock = workflow / "envs" / "torch.lock"
    lock.write_text(lock.read_text() + "# relocked\n")
    new_marker = env_marker(envs, "torch", workflow / "envs")
    try:
        dry = snakemake(workflow, workdir, RUNS_TABLE, "--dry-run")
        jobs = planned_jobs(dry.stdout + dry.stderr)
        # The whole plan, at once: torch's venv, torch's run, the tables; nothing of TensorFlow.
        assert jobs == {"framework_env": 1, "train": 1, "aggregate": 1}
        assert "framework=tensorflow" not in dry.stdout  # no TensorFlow training job

        proc = snakemake(workflow, workdir, RUNS_TABLE)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert new_marker.exists()
        assert torch_events.stat().st_mtime_ns > torch_before, "torch's run was not redone"
        assert tf_events.stat().st_mtime_ns == tf_before, "TensorFlow's run was redone"
        assert "Nothing to be done" in snakemake(workflow, workdir, RUNS_TABLE, "--dry-run").stdout
    finally:
        new_marker.unlink(missing_ok=True)  # the machine's torch venv keeps one marker
