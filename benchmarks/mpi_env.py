"""The MPI baseline's environment: Debian's Open MPI (installed when missing) and a small
venv with mpi4py (``.venvs/bench-mpi``, from benchmarks/mpi-requirements.txt).

The project's own ``scripts/install-mpi.sh`` is used when it exists (the Caffe runner
needs the same Open MPI); otherwise ``benchmarks/install-mpi.sh``. Both are idempotent.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from benchmarks.common import ENVS_DIR, REPO, log

VENV = ENVS_DIR / "bench-mpi"
REQUIREMENTS = REPO / "benchmarks" / "mpi-requirements.txt"


def install_script() -> Path:
    shared = REPO / "scripts" / "install-mpi.sh"
    return shared if shared.is_file() else REPO / "benchmarks" / "install-mpi.sh"


def ensure_mpi() -> tuple[str, Path]:
    """(mpirun, the bench-mpi python), installing Open MPI and building the venv when missing."""
    if not shutil.which("mpirun"):
        log(f"installing Open MPI with {install_script()}")
    subprocess.run(["bash", str(install_script())], check=True, timeout=900)
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun is still missing after the Open MPI install script ran")
    marker = VENV / "dlscale-env.json"
    if not marker.exists() or marker.stat().st_mtime < REQUIREMENTS.stat().st_mtime:
        from dlscale.envs import build_venv

        log(f"building {VENV} from {REQUIREMENTS.name}")
        build_venv(VENV, REQUIREMENTS, marker)
    return mpirun, VENV / "bin" / "python"


def mpirun_argv(mpirun: str, ranks: int = 2) -> list[str]:
    """mpirun on this host, as root if need be, TCP on loopback (like gloo here)."""
    return [
        mpirun, "--allow-run-as-root", "--oversubscribe", "-n", str(ranks),
        "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
        "--mca", "oob_tcp_if_include", "lo",
    ]  # fmt: skip
