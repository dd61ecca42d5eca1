"""The MPI baseline's environment: Debian's Open MPI (``benchmarks/install-mpi.sh``, which
installs it only when missing) and a small venv with mpi4py (``.venvs/bench-mpi``, from
benchmarks/mpi-requirements.txt, dlscale installed in it as in every venv).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from benchmarks.common import ENVS_DIR, REPO, log

VENV = ENVS_DIR / "bench-mpi"
REQUIREMENTS = REPO / "benchmarks" / "mpi-requirements.txt"
INSTALL_SCRIPT = REPO / "benchmarks" / "install-mpi.sh"


def marker() -> Path:
    """The venv's marker, named by its requirements (as dlscale.envs.env_marker names a
    framework's): changed requirements are a missing marker, hence a rebuild."""
    sha = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    return VENV / f"dlscale-env-{sha}.json"


def ensure_mpi() -> tuple[str, Path]:
    """(mpirun, the bench-mpi python), installing Open MPI and building the venv when missing."""
    if not shutil.which("mpirun"):
        log(f"installing Open MPI with {INSTALL_SCRIPT}")
    subprocess.run(["bash", str(INSTALL_SCRIPT)], check=True, timeout=900)
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun is still missing after the Open MPI install script ran")
    if not marker().exists():
        from dlscale.envs import build_venv

        log(f"building {VENV} from {REQUIREMENTS.name}")
        build_venv(VENV, REQUIREMENTS, marker())
    return mpirun, VENV / "bin" / "python"


def mpirun_argv(mpirun: str, ranks: int = 2) -> list[str]:
    """mpirun on this host, as root if need be, TCP on loopback (like gloo here)."""
    return [
        mpirun, "--allow-run-as-root", "--oversubscribe", "-n", str(ranks),
        "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
        "--mca", "oob_tcp_if_include", "lo",
    ]  # fmt: skip
