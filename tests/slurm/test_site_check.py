"""The site check (rule check_site, ``make check-site``) on the session's SLURM test cluster.

Submitted as users submit it, ``snakemake --profile profiles/slurm results/site/check.json``,
it runs one 2-node job that checks the shared file system, each framework's venv on both
nodes, TCP between the nodes by name and MPI with PMIx (Caffe). Then the same check with
one failure induced the way it happens on a real site: the venvs' folder is not visible
from one compute node (an empty file system is mounted over it in node n2's mount
namespace only), and the check fails at once naming the check, the node and the path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import ENVS_DIR, REPO
from helpers.slurm_cluster import FAST_STATUS_CHECKS, SlurmCluster

pytestmark = pytest.mark.workflow

FRAMEWORKS = ["torch", "caffe"]  # a venv import and MPI with PMIx, cheaply


def check_site(cluster: SlurmCluster, workdir: Path, envs_dir: Path) -> subprocess.CompletedProcess[str]:
    study = {"frameworks": FRAMEWORKS, "models": ["lenet"], "nodes": [1], "envs_dir": str(envs_dir)}
    (workdir / "study.yaml").write_text(yaml.safe_dump(study))
    cmd = [
        *cluster.netns_prefix(), sys.executable, "-m", "snakemake", "results/site/check.json",
        "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--profile", str(REPO / "profiles" / "slurm"), *FAST_STATUS_CHECKS, "--configfile", str(workdir / "study.yaml"),
    ]  # fmt: skip
    return subprocess.run(cmd, env=cluster.env(), cwd=workdir, capture_output=True, text=True, timeout=600)


def linked_envs(tmp_path: Path) -> Path:
    """A venvs folder of its own (links to the real venvs), so that hiding it hides nothing else."""
    envs = tmp_path / "envs"
    envs.mkdir()
    for framework in FRAMEWORKS:
        (envs / framework).symlink_to((ENVS_DIR / framework).resolve())
    return envs


def test_site_check_passes_on_a_sound_cluster(slurm, tmp_path, torch_py, caffe_py):
    before = len(slurm.sbatch_calls())  # the session's cluster: other tests' calls come first
    done = check_site(slurm, tmp_path, linked_envs(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((tmp_path / "results" / "site" / "check.json").read_text())
    assert result["status"] == "ok" and result["nodes"] == ["n1", "n2"]
    assert [c["name"] for c in result["checks"]] == [
        "shared-fs",
        "venv:torch",
        "venv:caffe",
        "tcp",
        "mpi-pmix",
    ]
    assert "n1 ok" in result["checks"][1]["detail"] and "n2 ok" in result["checks"][1]["detail"]
    calls = slurm.sbatch_calls()[before:]
    assert [call for call in calls if "--nodes=2" in call], calls


def test_site_check_names_a_venv_a_compute_node_cannot_see(slurm, tmp_path, torch_py, caffe_py):
    envs = linked_envs(tmp_path)  # this test's own folder: hiding it on n2 hides nothing shared
    slurmd_n2 = slurm.procs["slurmd-n2"].pid  # exec'd through on-node: the daemon itself
    hide = ["nsenter", f"--target={slurmd_n2}", "--mount", "mount", "-t", "tmpfs", "hidden", str(envs)]
    subprocess.run(hide, check=True, timeout=30)
    try:
        done = check_site(slurm, tmp_path, envs)
    finally:
        subprocess.run(["nsenter", f"--target={slurmd_n2}", "--mount", "umount", str(envs)], timeout=30)
    assert done.returncode != 0
    log = (tmp_path / "results" / "site" / "check.log").read_text()
    failure = next(line for line in log.splitlines() if line.startswith("[site] FAILED:"))
    assert failure.startswith("[site] FAILED: venv:torch: exit "), log
    assert f"n2: {envs}/torch/bin/python not found" in failure, log
    assert "venv:caffe" not in log  # failed fast: nothing after the first failure ran
    assert not (tmp_path / "results" / "site" / "check.json").exists()
    assert os.path.exists(envs / "torch" / "bin" / "python")  # still there where snakemake runs
