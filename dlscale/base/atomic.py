"""Atomic file writes: every output of the workflow appears whole or not at all.

A training job can be killed at any moment (a time limit, a cancelled allocation, snakemake
killed hard), and a reader (Snakemake, the aggregation, a colleague) must then find the old
file or none, never a torn one. Every writer in dlscale goes through this module: data are
written to a temporary file in the target's directory (same file system, so the rename is
atomic), flushed to disk, given the permissions a plain ``open()`` would have given
(mkstemp makes 0600 files, which colleagues on a cluster could not read), and renamed over
the target.

A write that fails (a full disk, a quota, a read-only file system) raises ``WriteError``,
whose message names the file and says the old one is intact: the temporary file is removed
and nothing was renamed, so the previous version (or none) is what a reader finds.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
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


#: Errors that mean the file system has no room for the file (a full disk, a user's quota).
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


class WriteError(OSError):
    """A file could not be written; the message names it and says the old one is intact.

    An OSError (with the cause's errno), so a caller that handles OSError still does; a
    command-line entry point prints ``str(err)`` instead of a library's traceback.
    """

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = path
        self.cause = cause

    def __str__(self) -> str:
        what = self.strerror or str(self.cause)
        if self.errno in NO_SPACE:
            return (
                f"cannot write {self.path}: the file system is full ({what});"
                f" {self.path} is left as it was: free space (or quota) there and run again"
            )
        return f"cannot write {self.path}: {what}; {self.path} is left as it was"


def replace_with(target: str | os.PathLike[str], write: Callable[[str], None]) -> Path:
    """Fill a temporary file next to ``target`` through ``write(tmp_path)``, then rename it.

    For libraries that write to a path themselves (pandas, altair). The temporary name keeps
    the target's suffix, since some writers choose the format from it. An OSError on the way
    (ENOSPC from pandas' write, from fsync on NFS, ...) becomes a ``WriteError`` naming
    ``target``: the library's own message names only the temporary file, or nothing.
    """
    return replace_all({target: write})[0]


def replace_all(writers: Mapping[str | os.PathLike[str], Callable[[str], None]]) -> list[Path]:
    """``replace_with`` for several files at once, all or none: each is written to its
    temporary file first, and only when every one is written are they renamed. A full disk
    at the last of a set of tables (an aggregation's) leaves every old table as it was,
    never a new runs.csv beside an old runs.parquet."""
    written: list[tuple[str, Path]] = []
    try:
        for target, write in writers.items():
            path = Path(target)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(
                    prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent
                )
                os.close(fd)
                written.append((tmp, path))
                os.chmod(tmp, file_mode())
                write(tmp)
                _fsync_path(tmp)
            except WriteError:
                raise
            except OSError as err:
                raise WriteError(path, err) from err
        while written:
            tmp, path = written[0]
            try:
                os.replace(tmp, path)
            except OSError as err:
                raise WriteError(path, err) from err
            written.pop(0)
    finally:
        for tmp, _ in written:  # not renamed: removed (freeing what they took of a full disk)
            Path(tmp).unlink(missing_ok=True)
    return [Path(target) for target in writers]


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
