"""Atomic file writes: every output of the workflow appears whole or not at all.

A training job can be killed at any moment (a time limit, a cancelled allocation, snakemake
killed hard), and a reader (Snakemake, the aggregation, a colleague) must then find the old
file or none, never a torn one. Every writer in dlscale goes through this module: data are
written to a temporary file in the target's directory (same file system, so the rename is
atomic), flushed to disk, given the permissions a plain ``open()`` would have given
(mkstemp makes 0600 files, which colleagues on a cluster could not read), and renamed over
the target.

Standard library only.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def umask() -> int:
    """The process's umask (reading it means setting it, so it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """Permissions of a file created by a plain ``open()`` under the current umask."""
    return 0o666 & ~umask()


def dir_mode() -> int:
    """Permissions of a directory created by a plain ``mkdir`` under the current umask."""
    return 0o777 & ~umask()


def replace_with(target: str | os.PathLike[str], write: Callable[[str], None]) -> Path:
    """Fill a temporary file next to ``target`` through ``write(tmp_path)``, then rename it.

    For libraries that write to a path themselves (pandas, altair). The temporary name keeps
    the target's suffix, since some writers choose the format from it.
    """
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, file_mode())
        write(tmp)
        _fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_bytes(target: str | os.PathLike[str], data: bytes) -> Path:
    """Atomically replace ``target`` with ``data``."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            handle.write(data)

    return replace_with(target, write)


def write_text(target: str | os.PathLike[str], text: str) -> Path:
    """Atomically replace ``target`` with ``text`` (UTF-8)."""
    return write_bytes(target, text.encode("utf-8"))


@contextmanager
def directory(target: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory that becomes ``target`` when the block ends without error.

    For outputs that are folders (shard sets): the block fills the yielded directory; on
    success it is renamed to ``target`` (replacing nothing: ``target`` must not exist), on
    any error it is removed.
    """
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, dir_mode())
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fsync_path(path: str) -> None:
    """Flush a closed file's data to disk before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
