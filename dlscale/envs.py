"""Per-framework virtual environments, built from ``envs/<framework>.txt``.

Frameworks pin incompatible numpy/protobuf ranges, so each gets its own venv. Used by the
workflow's ``framework_env`` rule and by the tests (which need the same venvs). pip is
idempotent, so building over an existing venv only installs what changed.

Some packages must be installed without their declared dependencies (BigDL pins versions
that do not work here): list them in ``envs/<framework>.nodeps.txt``; they are installed
with ``--no-deps`` after the main requirements.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dlscale import atomic, catalog
from dlscale.catalog import REPO_DIR

log = logging.getLogger(__name__)


#: Scripts whose content keys the Caffe build and Java markers (see caffe_build_marker).
CAFFE_BUILD_SCRIPT = REPO_DIR / "scripts" / "build_caffe.sh"
JAVA_SCRIPT = REPO_DIR / "scripts" / "ensure-java.sh"


def requirement_files(framework: str, spec_dir: str | Path | None = None) -> list[Path]:
    """``envs/<env>.txt`` and, where there is one, the ``envs/<env>.nodeps.txt`` that
    build_venv installs after it with ``--no-deps`` (BigDL's wheels).

    ``spec_dir`` is the workflow's own ``envs/`` (its Snakefile's folder; by default this
    checkout's): a copy of the workflow reads its own requirement files.
    """
    base = catalog.framework(framework).requirements
    if spec_dir is not None:
        base = Path(spec_dir) / base.name
    nodeps = base.with_name(base.name.replace(".txt", ".nodeps.txt"))
    return [base, *([nodeps] if nodeps.exists() else [])]


def _sha16(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()[:16]


def requirements_sha(framework: str, spec_dir: str | Path | None = None) -> str:
    """Hash of a framework's requirements, as one stream (a single file hashes as itself,
    so runs recorded before the nodeps list existed kept their parameter)."""
    return _sha16(*(path.read_bytes() for path in requirement_files(framework, spec_dir)))


def env_marker(envs_dir: str | Path, framework: str, spec_dir: str | Path | None = None) -> Path:
    """The marker of a framework's built venv, named by its requirements' hash.

    Why the hash is in the name (issue: an environment rebuild must not end the run at
    "100% done"): the training runs take this marker as an ordinary input. With a fixed
    name they had to take it as ``ancient`` (else every rebuild redid every run), and
    ``ancient`` trips a Snakemake bug (snakemake#4166: only the producer of the ancient
    file runs, the rest of the plan needs a second invocation). Named by content, the
    marker exists exactly when the venv for these requirements was built: changed
    requirements are a new, missing file, so Snakemake plans the rebuild *and* that
    framework's runs in one invocation, and other frameworks' runs are untouched.
    """
    return Path(envs_dir) / framework / f"dlscale-env-{requirements_sha(framework, spec_dir)}.json"


def caffe_build_marker(envs_dir: str | Path, home: str | None, spec_dir: str | Path | None = None) -> Path:
    """The Caffe build's marker, named by what the build depends on (as env_marker): the
    build script, the caffe venv's requirements (pycaffe is built for its numpy) and a
    user's ``caffe.home``."""
    key = _sha16(CAFFE_BUILD_SCRIPT.read_bytes(), requirements_sha("caffe", spec_dir).encode(), (home or "").encode())
    return Path(envs_dir) / f"caffe-build-{key}.json"


def java_marker(envs_dir: str | Path) -> Path:
    """The Java runtime's marker, named by the script that checks or installs it."""
    return Path(envs_dir) / f"java-{_sha16(JAVA_SCRIPT.read_bytes())}.txt"


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
