"""The BigDL runner tests' fixtures: the bigdl venv's python (with Java), and the check that
no process of a test's run outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers.bigdl_runs import processes_mentioning
from helpers.paths import REPO, framework_python


@pytest.fixture(scope="module")
def bigdl_py() -> Path:
    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    return framework_python("bigdl")


@pytest.fixture
def no_leftovers(tmp_path):
    """Fail (after killing them by PID) if any process of this test's run is still alive."""
    yield tmp_path
    leftovers = processes_mentioning(str(tmp_path))
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not leftovers, f"processes left running: {leftovers}"
