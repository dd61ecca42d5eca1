"""Whether an archive is the one its publisher made: verify's authenticity result.

Integrity (checksums, recomputed tables, figures and report against the tables) says that
an archive is consistent with itself, and whoever forges one can make it so: edit the
events, re-aggregate the tables with the analysis code, redraw or leave out the figures,
redo the manifest's checksums and seal. Only evidence from outside the archive, obtained
from its publisher, tells the forgery from the original: the sha256 of the archive file
that ``make artifact`` prints and writes beside it (``ARCHIVE.sha256``), given to verify as
``--expect-sha256 HEX`` or found as the ``.sha256`` file beside the archive. The digest is
worth what the channel it came by is worth (docs/verify.md, "What verify proves").

Without such a digest the result is "not proven", in words; a digest that differs is a
failure; a folder (no archive file) cannot be checked this way.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from dlscale.archive.artifact import sha256_file
from dlscale.archive.safety import Refused

PROVEN = "proven"
NOT_PROVEN = "not proven"
FAILED = "failed"
#: The words of the verdict when the integrity check passed.
VERDICT = {
    PROVEN: "consistent and authentic",
    NOT_PROVEN: "consistent, origin not proven",
    FAILED: "consistent, but not the archive its publisher made",
}
#: The suffix of the digest file ``make artifact`` writes beside the archive.
DIGEST_SUFFIX = ".sha256"
#: A digest file is one line; anything longer is not one.
MAX_DIGEST_FILE_BYTES = 4096
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Origin:
    """The authenticity result: ``status`` (PROVEN, NOT_PROVEN, FAILED) and what it rests on."""

    status: str
    detail: str


def expected_digest(text: str, where: str) -> str:
    """A sha256 as 64 hex digits (either case); ``Refused`` naming ``where`` otherwise."""
    value = text.strip().lower()
    if not _HEX.fullmatch(value):
        raise Refused(where, "not a sha256 (64 hexadecimal digits)")
    return value


def digest_file(archive: Path) -> tuple[str, str] | None:
    """``(digest, where)`` from ``ARCHIVE.sha256`` beside the archive (``sha256sum``'s
    format: the digest, then the file name), None when there is none. A link, FIFO or
    other non-regular file there, or one that holds no digest, is ``Refused``."""
    path = archive.with_name(archive.name + DIGEST_SUFFIX)
    where = f"file {path.name!r}"
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise Refused(where, "not a regular file (a digest file is one line of text)")
    if info.st_size > MAX_DIGEST_FILE_BYTES:
        raise Refused(where, f"{info.st_size:,} bytes, not one line with a sha256")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        text = handle.read(MAX_DIGEST_FILE_BYTES).decode("ascii", errors="replace")
    words = text.split()
    if not words:
        raise Refused(where, "empty: no sha256 in it")
    if len(words) > 1 and words[1].lstrip("*") != archive.name:
        raise Refused(where, f"names another file ({words[1]!r}), not {archive.name!r}")
    return expected_digest(words[0], where), f"{archive.name}{DIGEST_SUFFIX} beside the archive"


def check_origin(target: Path, expect: str | None = None) -> Origin:
    """The authenticity of ``target`` against the publisher's digests: ``expect`` (from
    the command line) and the ``.sha256`` file beside it; every one given must match."""
    if not target.is_file():
        if expect is not None:
            raise Refused(
                f"--expect-sha256 {expect[:16]}...", f"{target} is a folder: a digest checks an archive file"
            )
        return Origin(
            NOT_PROVEN,
            "a folder has no publisher's digest to check: verify the archive it was unpacked from"
            " with the digest its publisher gave",
        )
    evidence: list[tuple[str, str]] = []
    if expect is not None:
        evidence.append((expected_digest(expect, "--expect-sha256"), "--expect-sha256"))
    found = digest_file(target)
    if found is not None:
        evidence.append(found)
    if not evidence:
        return Origin(
            NOT_PROVEN,
            "no digest from the publisher (give --expect-sha256 HEX, the sha256 the publisher"
            f" gave, or put the publisher's {target.name}{DIGEST_SUFFIX} beside the archive)",
        )
    actual = sha256_file(target)
    wrong = [(digest, where) for digest, where in evidence if digest != actual]
    if wrong:
        digest, where = wrong[0]
        return Origin(
            FAILED,
            f"the archive's sha256 is {actual}, the publisher's ({where}) is {digest}:"
            " not the archive its publisher made",
        )
    sources = " and ".join(where for _, where in evidence)
    return Origin(PROVEN, f"the archive's sha256 {actual[:16]}... matches the publisher's ({sources})")
