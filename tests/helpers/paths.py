"""Paths of the repository and of its virtual environments, and the framework venvs' pythons."""

from __future__ import annotations

import os
from pathlib import Path

from dlscale.catalog import CONFIG_SCHEMA

REPO = Path(__file__).resolve().parents[2]

ENVS_DIR = Path(os.environ.get("DLSCALE_ENVS_DIR", REPO / ".venvs"))
SCHEMA = CONFIG_SCHEMA

CACHE = Path(os.environ.get("DLSCALE_TEST_CACHE", Path.home() / ".cache" / "dlscale-tests"))


def framework_python(framework: str) -> Path:
    """A framework venv's python, built as the workflow builds it (once per machine)."""
    from dlscale.envs import build_venv, env_marker, requirement_files

    venv = ENVS_DIR / framework
    marker = env_marker(ENVS_DIR, framework)
    if not marker.exists():
        build_venv(venv, requirement_files(framework)[0], marker)
    return venv / "bin" / "python"


def torch_python() -> Path:
    return framework_python("torch")


def caffe_python() -> Path:
    """The caffe venv's python, with Caffe built (once per machine, cached) beside the venvs.

    scripts/build_caffe.sh is what the workflow's caffe_build rule runs: a second call is
    instant (the build is cached by source hash and options); a fresh machine builds it
    once (7.5 minutes on 2 quiet cores, 20 loaded). It writes the marker the workflow's
    rule writes (dlscale.envs.caffe_build_marker), where the runner looks.
    """
    import subprocess

    from dlscale.envs import caffe_build_marker

    python = framework_python("caffe")
    marker = caffe_build_marker(ENVS_DIR, None)
    subprocess.run(
        ["bash", str(REPO / "scripts" / "build_caffe.sh"), str(python), str(marker)],
        check=True,
        timeout=5400,
    )
    return python
