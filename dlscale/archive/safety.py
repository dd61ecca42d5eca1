"""Archives from elsewhere opened safely: every member checked before anything is unpacked.

Studies travel between sites (dlscale.archive.artifact packs them, dlscale.archive.verify checks them), so
an archive is a stranger's input. ``tarfile``'s ``data`` filter judges one member at a time
while it unpacks, after earlier members are already on disk, and it lets an absolute name
land (stripped) beside the study's folder. Here an archive is read twice:

1. ``inspect``: every header, nothing written. Names (no absolute name, no ``..``, no
   name twice), types (folders and regular files only: dlscale.archive.artifact writes nothing
   else) and sizes (each member, the total, and the total over the archive's own size)
   against ``Limits``, refused at the first header that breaks one, before its data is
   even decompressed. Header records (PAX, GNU long names) are bounded too, as tarfile
   would hold them in memory.
2. ``extract``: the same members again, unpacked by this module, which creates only
   folders and regular files of its own (no link, device, mode or owner from the archive),
   never overwrites (``O_EXCL``, ``O_NOFOLLOW``) and counts the bytes it writes against
   the header's size and the total limit, so a lying header cannot write more.

A folder given instead of an archive is checked with ``check_tree``: no links, FIFOs or
devices where verify reads. ``Refused`` says where (``member 'NAME'``, ``file 'NAME'``,
``archive 'PATH'``) and which rule was broken, on one line.

The default limits and the measurements behind them: docs/verify.md. Standard library only.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from dlscale.base.foreign import Refused  # one class for every refusal of foreign input

#: Read and written in pieces of this size (never a whole member in memory).
CHUNK = 1 << 20
#: Header records one member may take (its ustar header, PAX records, GNU long names).
#: A PAX record holds a name of up to PATH_MAX (4096) in about 4.2 KB.
MAX_HEADER_BYTES = 64 * 1024
#: The longest name accepted, and the longest component (Linux's PATH_MAX and NAME_MAX).
MAX_NAME = 4096
MAX_COMPONENT = 255
#: Below this many unpacked bytes the ratio is not judged: a small archive of repetitive
#: text can compress far, and fills no disk.
RATIO_FROM_BYTES = 1 << 20


@dataclass(frozen=True)
class Limits:
    """How much an archive may unpack to (docs/verify.md measures honest archives)."""

    #: All members together, in bytes.
    max_unpacked_bytes: int = 4 << 30
    #: Unpacked bytes over the archive's bytes (gzip reaches about 1030 on zeros).
    max_ratio: float = 100.0
    #: One member, in bytes: dlscale.archive.artifact leaves out any file larger than 64 MiB.
    max_member_bytes: int = 64 << 20
    #: Members (files and folders): each costs an inode and a header.
    max_members: int = 100_000


@dataclass(frozen=True)
class Member:
    """A member as checked: its name in the archive, its safe relative path, its size."""

    name: str
    path: str
    is_dir: bool
    size: int


def member(name: str) -> str:
    """How a member is named in a message (repr: one line whatever the name holds)."""
    return f"member {name!r}"


def safe_relative(name: str, where: str, what: str = "the name") -> str:
    """``name`` as a relative '/'-separated path that stays below the folder it is
    joined to; ``Refused`` (naming ``where``) for an absolute name, a ``..`` component,
    a NUL, a backslash or a name too long. ``.`` and empty components are dropped."""
    if not isinstance(name, str) or not name:
        raise Refused(where, f"{what} is empty or not a string")
    if "\0" in name:
        raise Refused(where, f"a NUL character in {what}")
    if "\\" in name:
        raise Refused(where, f"a backslash in {what} (a Windows path?)")
    if name.startswith("/"):
        raise Refused(where, f"{what} is absolute")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise Refused(where, f"'..' in {what}")
    if len(name) > MAX_NAME or any(
        len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT for part in parts
    ):
        raise Refused(
            where, f"{what} is too long (at most {MAX_NAME} characters, {MAX_COMPONENT} a component)"
        )
    if not parts:
        raise Refused(where, f"{what} names no file")
    return "/".join(parts)


def confined(root: Path, name: str, where: str, what: str = "the name") -> Path:
    """``root / name`` once ``name`` is safe (``safe_relative``) and the path, resolved,
    is still inside ``root``; else ``Refused``. Nothing is created or read."""
    path = root / safe_relative(name, where, what)
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError) as err:
        raise Refused(where, f"{what} cannot be resolved: {err}") from None
    if not inside:
        raise Refused(where, f"{what} leads outside the study folder")
    return path


# --- reading ---------------------------------------------------------------------------


class _Bounded:
    """A read-only stream that refuses to be read past ``limit`` bytes: what tarfile reads
    for one member's headers is bounded before tarfile holds it in memory."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.position, self.limit = raw, 0, MAX_HEADER_BYTES
        self.after = "the archive's start"

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = CHUNK
        data = self.raw.read(min(size, max(0, self.limit - self.position) + 1))
        self.position += len(data)
        if self.position > self.limit:
            raise Refused(
                f"the member after {self.after}",
                f"its headers take more than {MAX_HEADER_BYTES:,} bytes (PAX or GNU long-name records)",
            )
        return data

    def allow(self, info: tarfile.TarInfo) -> None:
        """The next member's headers may follow ``info``'s data."""
        self.limit = info.offset_data + _blocks(info.size) + MAX_HEADER_BYTES
        self.after = member(info.name)


def _blocks(size: int) -> int:
    return -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def _decompressed(raw: BinaryIO) -> IO[bytes]:
    """The tar stream inside ``raw``: gzip, bzip2, xz or none, told by the magic bytes."""
    magic = raw.read(6)
    raw.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


def is_zip(archive: Path) -> bool:
    return zipfile.is_zipfile(archive)


@contextlib.contextmanager
def _reading(archive: Path) -> Iterator[None]:
    """A broken archive's errors as one ``Refused`` naming the archive."""
    where = f"archive {str(archive)!r}"
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise Refused(where, f"truncated or corrupt compressed data ({_one_line(err)})") from None
    except (lzma.LZMAError, zipfile.BadZipFile, zipfile.LargeZipFile) as err:
        raise Refused(where, f"corrupt archive ({_one_line(err)})") from None
    except tarfile.TarError as err:
        raise Refused(where, f"neither a tar (.gz, .bz2, .xz) nor a zip archive ({_one_line(err)})") from None
    except NotImplementedError as err:  # zip: a compression method this Python lacks
        raise Refused(where, f"unsupported archive ({_one_line(err)})") from None
    except OSError as err:
        raise Refused(where, f"cannot be read ({_one_line(err)})") from None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _tar_kind(info: tarfile.TarInfo) -> str | None:
    """Why a tar member's type is refused (None: a folder or a regular file)."""
    if info.isdir():
        return None
    if info.issym():
        return f"a symbolic link (to {info.linkname!r}): archives hold regular files and folders only"
    if info.islnk():
        return f"a hard link (to {info.linkname!r}): archives hold regular files and folders only"
    if info.ischr() or info.isblk():
        return "a device file: archives hold regular files and folders only"
    if info.isfifo():
        return "a FIFO: archives hold regular files and folders only"
    if info.issparse():
        return "a sparse file: archives hold plain regular files only"
    if info.isreg():
        return None
    return f"a member of type {info.type!r}: archives hold regular files and folders only"


def _zip_kind(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member's type is refused (None: a folder or a regular file)."""
    if info.flag_bits & 0x1:
        return "encrypted"
    mode = info.external_attr >> 16 if info.create_system == 3 else 0
    kind = stat.S_IFMT(mode)
    if stat.S_ISLNK(mode):
        return "a symbolic link: archives hold regular files and folders only"
    if kind and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return f"a special file (mode {oct(mode)}): archives hold regular files and folders only"
    return None


class _Tally:
    """The checks that span members: count, total size, ratio, names seen."""

    def __init__(self, archive: Path, limits: Limits) -> None:
        self.limits = limits
        self.archive_bytes = max(1, archive.stat().st_size)
        self.total = 0
        self.members: list[Member] = []
        self.files: set[str] = set()
        self.folders: set[str] = set()

    def add(self, name: str, is_dir: bool, size: int, refused_type: str | None) -> Member:
        where, limits = member(name), self.limits
        if len(self.members) >= limits.max_members:
            raise Refused(where, f"more than {limits.max_members:,} members (--max-members)")
        path = safe_relative(name, where)
        if refused_type:
            raise Refused(where, refused_type)
        if not is_dir:
            if size > limits.max_member_bytes:
                raise Refused(
                    where,
                    f"{size:,} bytes, over the {limits.max_member_bytes:,} a member may have (--max-member-bytes)",
                )
            self.total += size
            if self.total > limits.max_unpacked_bytes:
                raise Refused(
                    where,
                    f"the archive unpacks to more than {limits.max_unpacked_bytes:,} bytes"
                    f" ({self.total:,} up to this member) (--max-unpacked-bytes)",
                )
            ratio = self.total / self.archive_bytes
            if self.total >= RATIO_FROM_BYTES and ratio > limits.max_ratio:
                raise Refused(
                    where,
                    f"the archive unpacks to {self.total:,} bytes up to this member from {self.archive_bytes:,},"
                    f" a compression ratio of {ratio:.0f}, over {limits.max_ratio:g} (--max-ratio)",
                )
        parents = path.split("/")[:-1]
        for depth in range(1, len(parents) + 1):
            folder = "/".join(parents[:depth])
            if folder in self.files:
                raise Refused(where, f"its folder {folder!r} is a file earlier in the archive")
        if path in self.files or (not is_dir and path in self.folders):
            raise Refused(
                where, f"{path!r} is already in the archive (a member twice, or a file and a folder)"
            )
        (self.folders if is_dir else self.files).add(path)
        self.folders.update("/".join(parents[:depth]) for depth in range(1, len(parents) + 1))
        found = Member(name, path, is_dir, 0 if is_dir else size)
        self.members.append(found)
        return found


def _tar_iter(archive: Path) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    """The tar members in order, streamed: each header is read only after the previous
    member's data, from a stream that bounds how far past that data tarfile may read."""
    with open(archive, "rb") as raw:
        bounded = _Bounded(_decompressed(raw))
        with tarfile.open(fileobj=bounded, mode="r|") as tar:  # type: ignore[call-overload]
            last: tarfile.TarInfo | None = None
            while True:
                try:
                    info = tar.next()
                except (tarfile.ReadError, EOFError, zlib.error, gzip.BadGzipFile) as err:
                    if last is None:
                        raise
                    raise Refused(
                        f"archive {str(archive)!r}",
                        f"truncated or corrupt after member {last.name!r} ({_one_line(err)})",
                    ) from None
                if info is None:
                    return
                bounded.allow(info)
                yield info, tar
                last = info


def inspect(archive: Path, limits: Limits) -> list[Member]:
    """Every member of ``archive`` (tar, tar.gz/bz2/xz or zip) checked against the rules
    and ``limits``; nothing is written. ``Refused`` at the first member that breaks one."""
    tally = _Tally(archive, limits)
    with _reading(archive):
        if is_zip(archive):
            with zipfile.ZipFile(archive) as zipped:
                for info in zipped.infolist():
                    tally.add(info.filename, info.is_dir(), info.file_size, _zip_kind(info))
        else:
            for info, _ in _tar_iter(archive):
                tally.add(info.name, info.isdir(), info.size, _tar_kind(info))
    return tally.members


# --- writing ---------------------------------------------------------------------------


def _folder(dest: Path, path: str) -> Path:
    """``dest/path`` as a folder made here (each component a real folder, never a link)."""
    here = dest
    for part in path.split("/") if path else []:
        here = here / part
        try:
            os.mkdir(here, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                raise
    return here


def copy_counted(source: IO[bytes], target: BinaryIO, size: int, where: str) -> int:
    """Copy exactly ``size`` bytes (the header's): ``Refused`` if ``source`` holds more
    (a lying header) or fewer (a truncated member). Returns the bytes written."""
    written = 0
    while True:
        chunk = source.read(min(CHUNK, size - written + 1))
        if not chunk:
            break
        written += len(chunk)
        if written > size:
            raise Refused(where, f"holds more than the {size:,} bytes its header says")
        target.write(chunk)
    if written < size:
        raise Refused(where, f"truncated: {written:,} of the {size:,} bytes its header says")
    return written


def _write(dest: Path, found: Member, source: IO[bytes]) -> int:
    """One regular file, created here (never an existing name, never through a link)."""
    parent, _, name = found.path.rpartition("/")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        folder = _folder(dest, parent)
        with open(os.open(folder / name, flags, 0o644), "wb") as target:
            return copy_counted(source, target, found.size, member(found.name))
    except OSError as err:  # a full disk, say: named, not a traceback
        raise Refused(member(found.name), f"cannot be unpacked into {dest} ({_one_line(err)})") from None


def extract(archive: Path, dest: Path, members: Sequence[Member], limits: Limits) -> None:
    """Unpack the members ``inspect`` returned into the empty folder ``dest``: folders and
    regular files only, each file exactly its header's size, the total within ``limits``.
    ``Refused`` if the archive no longer matches what was inspected."""
    changed = Refused(f"archive {str(archive)!r}", "it changed between the check and the unpacking")
    written = 0
    with _reading(archive):
        if is_zip(archive):
            with zipfile.ZipFile(archive) as zipped:
                infos = zipped.infolist()
                if len(infos) != len(members):
                    raise changed
                for info, found in zip(infos, members, strict=True):
                    if (info.filename, info.is_dir()) != (found.name, found.is_dir):
                        raise changed
                    if found.is_dir:
                        _folder(dest, found.path)
                        continue
                    with zipped.open(info) as source:
                        written += _write(dest, found, source)
                    _check_total(written, limits, found)
        else:
            index = 0
            for info, tar in _tar_iter(archive):
                found = members[index] if index < len(members) else None
                index += 1
                if found is None or (info.name, info.isdir()) != (found.name, found.is_dir):
                    raise changed
                if found.is_dir:
                    _folder(dest, found.path)
                    continue
                source = tar.extractfile(info)
                if source is None or info.size != found.size:
                    raise changed
                written += _write(dest, found, source)
                _check_total(written, limits, found)
            if index != len(members):
                raise changed


def _check_total(written: int, limits: Limits, found: Member) -> None:
    if written > limits.max_unpacked_bytes:
        raise Refused(
            member(found.name), f"unpacking passed {limits.max_unpacked_bytes:,} bytes (--max-unpacked-bytes)"
        )


# --- folders ---------------------------------------------------------------------------


def check_tree(
    top: Path, label: str = "", *, skip: Sequence[str] = (), hidden: bool = True, hard_links: bool = True
) -> None:
    """A folder verify will read: no symbolic link (the workflow and dlscale.archive.artifact make
    none; one could lead anywhere), no FIFO (a read would wait forever), device or socket,
    and, where ``hard_links`` is False, no regular file with more than one link (in an
    unpacked archive, one could be a host file's other name). Top-level folders named in
    ``skip``, and with ``hidden`` False every name starting with a dot (a failed run's
    ``.work``, which may hold its ranks' sockets), are not looked at: they are what
    dlscale.archive.artifact leaves out, and verify does not read them. ``label`` prefixes the
    names in messages. ``top`` itself may not be a link (a study folder's ``results/``
    linked elsewhere is not read). With ``hard_links`` False (an unpacked archive) no folder
    may be empty: dlscale.archive.artifact archives files only, so an empty folder was added
    after, where the manifest's unlisted-file check does not see it."""
    mode = os.lstat(top).st_mode
    if stat.S_ISLNK(mode):
        where = f"file {label.rstrip('/') or str(top)!r}"
        raise Refused(where, f"a symbolic link (to {os.readlink(top)!r}): a study holds none")
    for folder, dirs, files in os.walk(top):
        here = Path(folder)
        dirs[:] = [
            name
            for name in dirs
            if (hidden or not name.startswith(".")) and not (here == top and name in skip)
        ]
        files = [name for name in files if hidden or not name.startswith(".")]
        for name in sorted([*dirs, *files]):
            path = here / name
            where = f"file {label + path.relative_to(top).as_posix()!r}"
            try:
                mode = path.lstat()
            except OSError as err:
                raise Refused(where, f"cannot be read ({_one_line(err)})") from None
            if stat.S_ISLNK(mode.st_mode):
                raise Refused(where, f"a symbolic link (to {os.readlink(path)!r}): a study holds none")
            if stat.S_ISFIFO(mode.st_mode):
                raise Refused(where, "a FIFO: a study holds regular files and folders only")
            if stat.S_ISCHR(mode.st_mode) or stat.S_ISBLK(mode.st_mode):
                raise Refused(where, "a device file: a study holds regular files and folders only")
            if stat.S_ISSOCK(mode.st_mode):
                raise Refused(where, "a socket: a study holds regular files and folders only")
            if stat.S_ISREG(mode.st_mode) and not hard_links and mode.st_nlink > 1:
                raise Refused(where, f"a file with {mode.st_nlink} hard links: an unpacked archive has none")
            if stat.S_ISDIR(mode.st_mode) and not hard_links and _empty(path):
                raise Refused(
                    where,
                    "an empty folder, listed nowhere: an archive holds files only (added after it was made?)",
                )


def _empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None
