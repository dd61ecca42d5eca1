"""The commands users are told to type: `snakemake --profile tianhe` and a plain `snakemake`.

Snakemake finds a profile named without a path in $XDG_CONFIG_HOME/snakemake; `make
profiles` (scripts/install-profiles.sh) links the project's there. A plain `snakemake` in
the project takes the workflow profile profiles/default.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO
from helpers.workflow import planned_jobs

from dlscale import catalog


def snakemake(*args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--nolock", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )


@pytest.fixture
def user_config(tmp_path) -> dict[str, str]:
    """A user's environment whose Snakemake profile folder is a fresh one, set up by the
    README's step (`make profiles`)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-profiles.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("tianhe", "slurm"):
        assert (tmp_path / "config" / "snakemake" / name).resolve() == REPO / "profiles" / name
    return env


def test_tianhe_study_dry_run_as_typed_lists_every_framework(user_config):
    proc = snakemake(
        "--profile", "tianhe", "--configfile", "profiles/tianhe/study.yaml", "--dry-run", env=user_config
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    jobs = planned_jobs(output)
    frameworks = set(re.findall(r"results/runs/([a-z]+)/\w+/n\d+x1/", output))
    # The seed's comparison (its three and PyTorch, every model): the frameworks it lists,
    # not the catalog's (a framework added later joins it when it has every model).
    listed = yaml.safe_load((REPO / "profiles/tianhe/study.yaml").read_text())["frameworks"]
    assert frameworks == set(listed) and set(listed) <= set(catalog.FRAMEWORK_NAMES)
    assert jobs["train"] == 4 * 4 * 5 * 3  # frameworks x models x node counts x repeats
    hours = re.search(r"at most ([\d,.]+) node-hours requested", output)
    assert hours and float(hours[1].replace(",", "")) > 0


def test_tianhe_parameter_server_study_plans_tensorflow_ps_in_its_own_directory(user_config, tmp_path):
    work = tmp_path / "tianhe-ps"
    proc = snakemake(
        "--profile", "tianhe", "--configfile", str(REPO / "profiles/tianhe/study-ps.yaml"),
        "--directory", str(work), "--snakefile", str(REPO / "Snakefile"), "--dry-run", env=user_config,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert planned_jobs(output)["train"] == 4 * 5 * 3  # models x node counts x repeats
    assert set(re.findall(r"results/runs/([a-z]+)/\w+/n\d+x1/", output)) == {"tensorflow"}
    strategies = re.findall(r'"num_ps": (\d+), "strategy": "(\w+)"', output)
    assert len(strategies) == 60 and set(strategies) == {("2", "ps")}, strategies[:3]
    assert not (REPO / "tianhe-ps").exists()  # nothing of it in the project's own results


def test_install_leaves_a_users_own_profile_alone(tmp_path):
    own = tmp_path / "config" / "snakemake" / "slurm"
    own.mkdir(parents=True)
    (own / "config.yaml").write_text("jobs: 1\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-profiles.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "exists and is not a link to this project" in proc.stderr
    assert (own / "config.yaml").read_text() == "jobs: 1\n" and not own.is_symlink()


def test_plain_snakemake_uses_the_default_workflow_profile(tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = snakemake("--dry-run", env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "study:" in proc.stdout + proc.stderr
