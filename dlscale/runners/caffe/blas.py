"""Caffe's BLAS, chosen at run time: one build, the implementation on the loader's search path.

The workflow's Caffe (scripts/build_caffe.sh) is linked against the standard interface:
its libcaffe.so NEEDs ``libblas.so.3`` (Debian's soname, which carries the CBLAS symbols
Caffe calls), not one implementation. A run's launcher links ``libblas.so.3`` to the
implementation of the run's ``blas`` option in a directory of the run's own
(``prepare_dir``) and puts that directory first on the ranks' ``LD_LIBRARY_PATH``
(``blas_env``); the loader takes the first ``libblas.so.3`` on that path:

  openblas  Debian's OpenBLAS 0.3.21, pthread build: ``openblas-pthread/libblas.so.3``
  blis      Debian's BLIS 0.9.0, pthread build: ``blis-pthread/libblas.so.3``
  mkl       Intel MKL's single dynamic library ``libmkl_rt.so.N`` from the PyPI wheels of
            envs/caffe-mkl.lock, installed once into the cache (scripts/caffe_blas.sh)

Each rank then measures what it loaded (``loaded``: /proc/self/maps after its first step,
the library's own version string) and records it (run_start ``measured.blas``). A user's
own Caffe (``caffe.home``) may be linked to one implementation by name: the same directory
is prepared, and the record says what it really loaded.

Standard library and the ground floor only: the launcher imports this from the workflow's
python, the ranks from the caffe venv.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlscale.envs import SPEC_DIR, machine_cache

#: The implementations of the runner's ``blas`` option.
CHOICES = ("openblas", "blis", "mkl")
#: The soname the one Caffe build NEEDs, and the name the prepared directory links.
SONAME = "libblas.so.3"
#: Debian's pthread builds: their directory under /usr/lib/<multiarch>, their package.
DEBIAN = {
    "openblas": ("openblas-pthread", "libopenblas0-pthread"),
    "blis": ("blis-pthread", "libblis4-pthread"),
}
#: How many threads each implementation reads from which variable (beside OMP_NUM_THREADS).
THREAD_VARIABLES = {"openblas": "OPENBLAS_NUM_THREADS", "blis": "BLIS_NUM_THREADS", "mkl": "MKL_NUM_THREADS"}
#: MKL's threading layer for a Caffe rank (Caffe itself is single-threaded: MKL's threads
#: are all there is). One thread: SEQUENTIAL, no OpenMP runtime at all, measured fastest on
#: LeNet (2,783 samples/s [2,667, 2,882] against INTEL's 2,493 [2,212, 2,600] and GNU's
#: 2,628 [2,369, 2,684], n=3 each, docs/caffe-blas.md). More threads: INTEL, MKL's default
#: (libiomp5 ships beside libmkl_rt in the wheels; not measured here).
MKL_THREADING_LAYER = {1: "SEQUENTIAL"}
MKL_THREADING_LAYER_DEFAULT = "INTEL"
#: A mapped file that belongs to a BLAS implementation (numpy's bundled OpenBLAS excepted).
_BLAS_FILE = re.compile(r"^lib(blas\.so|cblas\.so|openblas|blis|mkl_|iomp5)")
#: The lock of the MKL wheels (envs/caffe-mkl.lock).
MKL_LOCK = SPEC_DIR / "caffe-mkl.lock"


class BlasNotInstalled(RuntimeError):
    """The run's BLAS implementation is not on this machine: the message says how to install it."""


def multiarch() -> str:
    return str(sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu")


def mkl_root(env: Mapping[str, str], lock: Path = MKL_LOCK) -> Path:
    """Where scripts/caffe_blas.sh installs the locked MKL wheels: one folder per lock."""
    sha = hashlib.sha256(lock.read_bytes()).hexdigest()
    return machine_cache(env) / f"mkl-{sha[:16]}"


def library(blas: str, env: Mapping[str, str], root: Path = Path("/")) -> Path:
    """The file that stands in for ``libblas.so.3`` with ``blas`` (``root`` for tests)."""
    if blas not in CHOICES:
        raise BlasNotInstalled(f"unknown Caffe BLAS {blas!r}: one of {', '.join(CHOICES)}")
    if blas == "mkl":
        found = sorted((mkl_root(env) / "lib").glob("libmkl_rt.so.*"))
        path = found[0] if found else mkl_root(env) / "lib" / "libmkl_rt.so.N"
    else:
        path = root / "usr" / "lib" / multiarch() / DEBIAN[blas][0] / SONAME
    if not path.is_file():
        raise BlasNotInstalled(
            f"Caffe's BLAS {blas} is not installed ({path} missing): scripts/caffe_blas.sh {blas}"
            " PYTHON installs it (rule caffe_blas)"
        )
    return path


def prepare_dir(directory: str | os.PathLike[str], implementation: str | os.PathLike[str]) -> Path:
    """``directory`` with ``libblas.so.3`` linked to ``implementation`` (replaced atomically)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / SONAME
    tmp = directory / f".{SONAME}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(Path(implementation).resolve())
    os.replace(tmp, link)
    return directory


def blas_env(blas: str, directory: Path, env: Mapping[str, str], threads: int) -> dict[str, str]:
    """What the ranks need to load ``blas`` from ``directory``: the directory first on
    ``LD_LIBRARY_PATH``, the implementation's thread count (and MKL's threading layer)."""
    path = [str(directory)]
    if blas == "mkl":
        # libmkl_rt loads its core, threading and kernel libraries first from the directory
        # it was loaded from (ours: "cannot load libmkl_core.so.3"), then from the search path.
        path.append(str((Path(directory) / SONAME).resolve().parent))
    path += [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    out = {"LD_LIBRARY_PATH": os.pathsep.join(path), THREAD_VARIABLES[blas]: str(threads)}
    if blas == "mkl":
        # The launcher's own environment may choose another layer (measured by hand that way).
        out.update(
            {
                "MKL_THREADING_LAYER": env.get("MKL_THREADING_LAYER")
                or MKL_THREADING_LAYER.get(threads, MKL_THREADING_LAYER_DEFAULT),
                "MKL_INTERFACE_LAYER": "LP64",
            }
        )
    return out


def mapped_files(pid: int | str = "self") -> list[str]:
    """The BLAS files mapped into process ``pid`` (/proc/PID/maps), in load order."""
    seen: dict[str, None] = {}
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            parts = line.split(maxsplit=5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            path = parts[5].strip()
            if _BLAS_FILE.match(os.path.basename(path)) and ".libs/" not in path:
                seen.setdefault(path)
    return list(seen)


def implementation_of(files: list[str]) -> str:
    """Which implementation the mapped ``files`` are (``unknown`` when none is recognised)."""
    names = " ".join(os.path.basename(f) for f in files) + " " + " ".join(files)
    for name, pattern in (("mkl", "libmkl_"), ("openblas", "openblas"), ("blis", "blis")):
        if pattern in names:
            return name
    return "unknown" if files else "none"


def _version(files: list[str], kind: str) -> str | None:
    """The implementation's own version string, asked of the mapped library itself."""
    try:
        if kind == "openblas":
            lib = next(f for f in files if "libopenblas" in os.path.basename(f))
            get = ctypes.CDLL(lib).openblas_get_config
            get.restype = ctypes.c_char_p
            return get().decode().strip()
        if kind == "mkl":
            lib = next(f for f in files if os.path.basename(f).startswith("libmkl_rt"))
            buf = ctypes.create_string_buffer(256)
            ctypes.CDLL(lib).mkl_get_version_string(buf, len(buf))
            return buf.value.decode().strip()
        if kind == "blis":
            for lib in files:
                try:
                    get = ctypes.CDLL(lib).bli_info_get_version_str
                except AttributeError:
                    continue
                get.restype = ctypes.c_char_p
                return f"BLIS {get().decode().strip()}"
    except (OSError, StopIteration, AttributeError, UnicodeDecodeError):
        return None
    return None


def loaded(pid: int | str = "self") -> dict[str, Any]:
    """What BLAS process ``pid`` really loaded, measured: the file that serves ``libblas.so.3``
    (resolved), every BLAS file mapped (MKL's kernel and threading libraries among them), the
    implementation, and its version where the library says it (OpenBLAS's config string names
    the kernel core it chose, MKL's names the instruction set)."""
    files = mapped_files(pid)
    kind = implementation_of(files)
    serving = next(
        (f for f in files if os.path.basename(f) in (SONAME, "libcblas.so.3") or "libmkl_rt" in f),
        files[0] if files else None,
    )
    record: dict[str, Any] = {"implementation": kind, "library": serving, "mapped": files}
    version = (_version(files, kind) if pid == "self" else None) or _debian_version(serving)
    if version:
        record["version"] = version
    return record


def _debian_version(path: str | None) -> str | None:
    """The Debian package that installed ``path`` and its version (BLIS's libblas.so.3 has no
    version function): ``dpkg-query``, where there is one."""
    if not path or not path.startswith("/usr/"):
        return None
    try:
        owner = subprocess.run(["dpkg-query", "-S", path], capture_output=True, text=True, timeout=10)
        package = owner.stdout.split(":", 1)[0].strip() if owner.returncode == 0 else ""
        if not package:
            return None
        query = ["dpkg-query", "-W", "-f", "${Version}", package]
        version = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"Debian {package} {version}" if version else None
