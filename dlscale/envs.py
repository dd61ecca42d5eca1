"""Per-framework virtual environments, built from ``envs/<framework>.txt``.

Frameworks pin incompatible numpy/protobuf ranges, so each gets its own venv. Used by the
workflow's ``framework_env`` rule and by the tests (which need the same venvs). pip is
idempotent, so building over an existing venv only installs what changed.

Some packages must be installed without their declared dependencies (BigDL pins versions
that do not work here): list them in ``envs/<framework>.nodeps.txt``; they are installed
with ``--no-deps`` after the main requirements.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dlscale import atomic
from dlscale.catalog import REPO_DIR

log = logging.getLogger(__name__)


class EnvError(RuntimeError):
    """An environment could not be built; the message names the command and the log."""


def _run(cmd: list[str]) -> str:
    log.info("$ %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log.info("%s%s", proc.stdout, proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"command failed ({proc.returncode}): {' '.join(cmd)}: {tail}")
    return proc.stdout


def build_venv(
    venv: str | Path, requirements: str | Path, marker: str | Path | None = None
) -> dict[str, Any]:
    """Create or update ``venv`` from ``requirements`` (and its ``.nodeps.txt`` sibling).

    Returns what was installed; writes it to ``marker`` (atomically, last) when given, so
    that a marker exists only for a complete environment. The marker holds nothing that
    varies between identical builds: Snakemake compares its checksum, so rebuilding an
    unchanged environment does not invalidate the runs that used it.
    """
    venv, requirements = Path(venv), Path(requirements)
    started = time.time()
    python = venv / "bin" / "python"
    if not python.exists():
        _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)])
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run([*pip, "-r", str(requirements)])
    nodeps = requirements.with_name(requirements.name.replace(".txt", ".nodeps.txt"))
    if nodeps.exists():
        _run([*pip, "--no-deps", "-r", str(nodeps)])
    # dlscale itself, editable and without dependencies: runners and launchers import it
    # from the venv (no path set by hand), and always run this checkout's code.
    _run([*pip, "--no-deps", "-e", str(REPO_DIR)])
    info = {
        "requirements": str(requirements),
        "python": _run([str(python), "-c", "import platform; print(platform.python_version())"]).strip(),
        # dlscale's editable line names the git revision: left out, so that the marker
        # changes with the environment, not with every commit.
        "packages": _run(
            [str(python), "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"]
        ).split(),
    }
    if marker is not None:
        atomic.write_text(marker, json.dumps(info, indent=2))
    log.info("environment %s ready in %.1f s", venv, time.time() - started)
    return info
