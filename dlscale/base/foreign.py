"""Files from elsewhere read strictly: a regular file of bounded size, text that is UTF-8,
JSON nested no deeper than a bound; anything else one ``Refused`` naming the file and rule.

Studies, events files and system files travel between sites, and whoever made them may have
crafted them. A FIFO named ``events.jsonl`` makes ``open()`` wait forever; a symbolic link
leads the reader to a host file (``/etc/shadow``); a folder where a file is expected gives
``IsADirectoryError``; 200,000 nested ``[`` in one line give a ``RecursionError`` naming no
file. Every reader of foreign input opens it here (compare, the analysis's events reader,
the replay's system files, verify): the type is checked with ``os.lstat`` before the file
is opened, the file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO swapped in after the
check cannot block the open, a link cannot be followed) and checked again on the open
descriptor (regular, the same inode), and its size is bounded before a byte is read.

Standard library only (the events reader imports it in every framework's venv).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import IO, Any

#: How deep JSON may nest (arrays and objects) in anything read from elsewhere. The deepest
#: record dlscale writes is a run_start event (spec -> options -> a list of values: 4
#: levels); 64 leaves room for any honest tool and stays far below Python's recursion limit
#: (1,000 frames), which JSON's decoder and every recursive consumer (jsonschema, copy) hit
#: first on deeper input.
MAX_JSON_DEPTH = 64


class Refused(ValueError):
    """Hostile or broken input: ``where`` (a file, a member, a line) broke ``rule``."""

    def __init__(self, where: str, rule: str) -> None:
        super().__init__(f"{where}: {rule}")
        self.where, self.rule = where, rule


def file_label(path: str | os.PathLike[str]) -> str:
    """How a file is named in a message (repr: one line whatever the name holds)."""
    return f"file {str(path)!r}"


def _kind(mode: int) -> str | None:
    """Why a file of this mode is not read (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link where a file is expected: links from elsewhere are not followed"
    if stat.S_ISDIR(mode):
        return "a folder where a file is expected"
    if stat.S_ISFIFO(mode):
        return "a FIFO where a file is expected (a read would wait forever)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device where a file is expected"
    if stat.S_ISSOCK(mode):
        return "a socket where a file is expected"
    return f"not a regular file (mode {oct(mode)})"


def check_regular(path: str | os.PathLike[str], where: str | None = None) -> os.stat_result:
    """``path``'s own status (never a link's target) when it is a regular file;
    ``Refused`` for a link, folder, FIFO, device or socket, or a file that cannot be read."""
    where = where or file_label(path)
    try:
        found = os.lstat(path)
    except OSError as err:
        raise Refused(where, f"cannot be read ({err.strerror or err})") from None
    why = _kind(found.st_mode)
    if why:
        if stat.S_ISLNK(found.st_mode):
            why = why.replace("where", f"(to {os.readlink(path)!r}) where", 1)
        raise Refused(where, why)
    return found


def open_regular(path: str | os.PathLike[str], max_bytes: int | None, where: str | None = None) -> IO[bytes]:
    """``path`` opened for reading in binary once it is a regular file (``check_regular``)
    of at most ``max_bytes`` (None: any size, for a file read a bounded line at a time); the descriptor itself is checked again (a file swapped for a
    FIFO or a link between the check and the open is refused, never waited on)."""
    where = where or file_label(path)
    before = check_regular(path, where)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise Refused(
            where, f"cannot be opened ({err.strerror or err}): it changed while being checked?"
        ) from None
    try:
        found = os.fstat(fd)
        if _kind(found.st_mode) or (found.st_dev, found.st_ino) != (before.st_dev, before.st_ino):
            raise Refused(where, "changed between the check and the opening: not read")
        if max_bytes is not None and found.st_size > max_bytes:
            raise Refused(where, f"{found.st_size:,} bytes, over the {max_bytes:,} this file may have")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_text(path: str | os.PathLike[str], max_bytes: int | None, where: str | None = None) -> IO[str]:
    """``open_regular`` as UTF-8 text (decoding errors raise ``UnicodeDecodeError``; see
    ``read_text`` for a whole file as one ``Refused``)."""
    return io.TextIOWrapper(open_regular(path, max_bytes, where), encoding="utf-8", newline=None)


def read_bytes(path: str | os.PathLike[str], max_bytes: int, where: str | None = None) -> bytes:
    """A whole regular file of at most ``max_bytes`` (``open_regular``), read to its end
    (and refused if it grew past the limit meanwhile)."""
    where = where or file_label(path)
    with open_regular(path, max_bytes, where) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(where, f"more than the {max_bytes:,} bytes this file may have")
    return data


def read_text(path: str | os.PathLike[str], max_bytes: int, where: str | None = None) -> str:
    """A whole regular file as UTF-8 text; ``Refused`` naming the file and the byte offset
    for text that is not UTF-8."""
    where = where or file_label(path)
    data = read_bytes(path, max_bytes, where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise Refused(where, f"not UTF-8 text (byte {err.start:,}: {err.reason})") from None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_INNERMOST = re.compile(r"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")


def json_depth_exceeds(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays and objects deeper than ``max_depth``, decided
    before it is parsed. Fast where it matters: text with no more brackets than
    ``max_depth`` cannot nest deeper (one count, in C); otherwise strings are blanked and
    the innermost brackets removed ``max_depth`` times, each pass one regex sweep."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    rest = _STRING.sub('""', text)
    for _ in range(max_depth):
        rest, removed = _INNERMOST.subn("0", rest)
        if not removed:
            return False
    return "[" in rest or "{" in rest


def loads_json(text: str, where: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON ``text`` parsed once it nests no deeper than ``max_depth``; ``Refused`` naming
    ``where`` for text too deep or not JSON (the decoder's message with its position)."""
    if json_depth_exceeds(text, max_depth):
        raise Refused(where, f"JSON nested deeper than {max_depth} levels: no tool writes that")
    try:
        return json.loads(text)
    except RecursionError:  # a bound lower than the decoder's: defensive only
        raise Refused(where, f"JSON nested deeper than {max_depth} levels: no tool writes that") from None
    except ValueError as err:  # JSONDecodeError, and numbers beyond int's digit limit
        raise Refused(where, f"not JSON ({err})") from None


def read_json(
    path: str | os.PathLike[str], max_bytes: int, where: str | None = None, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """A whole regular file of JSON (``read_text`` then ``loads_json``)."""
    where = where or file_label(path)
    return loads_json(read_text(path, max_bytes, where), where, max_depth)


def check_folder(path: str | os.PathLike[str], where: str | None = None) -> None:
    """``path`` is a real folder (not a link to one): ``Refused`` otherwise."""
    where = where or file_label(path)
    try:
        mode = os.lstat(path).st_mode
    except OSError as err:
        raise Refused(where, f"cannot be read ({err.strerror or err})") from None
    if stat.S_ISLNK(mode):
        raise Refused(
            where, f"a symbolic link (to {os.readlink(path)!r}) where a folder is expected: not followed"
        )
    if not stat.S_ISDIR(mode):
        raise Refused(where, "not a folder")


def inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (resolved) is ``folder`` (resolved) or below it."""
    return Path(path).resolve().is_relative_to(Path(folder).resolve())
