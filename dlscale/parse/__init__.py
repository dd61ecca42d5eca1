"""Parsers of frameworks' native logs into dlscale events (one module per framework).

Each parser module ``dlscale/parse/<name>.py`` provides ``iter_events(path)`` (the events
as the log is read: memory stays flat in the log's size, so a 200 MB log of a long run
costs what a 2 KB one does), ``parse(path) -> list[dict]`` (the same, as a list) and is
reachable as ``python -m dlscale.parse <name> LOG``, which prints each event as a line of
JSON as soon as it is complete and exits 2 with ``FILE:LINE: message`` on malformed input.

What every parser holds to ("no silent wrong numbers"):

- A log is text: UTF-8, no NUL or other control bytes (tab, CR, form feed and ESC, which
  log writers and consoles use, are text). Anything else is ``FILE:LINE: not a text log``;
  a file of zero bytes is ``FILE:0: empty log``. A parser never guesses at bytes.
- What cannot happen in a real log is malformed, never smoothed over: time going
  backwards, iteration numbers going backwards, and a last line without its newline that
  would be read for numbers (a log cut while being written: ``loss = 0.76`` may be what is
  left of ``0.762439``).
- A run that failed is reported, not hidden: the parser ends its events with
  ``{"event": "run_end", "status": "failed", "reason": ..., "time": ..., "line": N}``
  (``line``: the log line that shows the failure), after the iterations read before it.
  The CLI still exits 0 then: the log was read correctly, and the failure is in the events.
  A parser writes no ``run_end`` for a log that shows no failure: a log cannot prove that
  the run finished, only the runner (which knows the planned iterations) can.
- A non-finite loss (a diverged run) stays what it is: a float ``nan``/``inf`` in Python.
  ``dlscale.events.dumps`` writes non-finite floats as ``null``, which would make "the loss
  was NaN" read as "no loss", so the CLI writes them as the JSON strings ``"nan"``,
  ``"inf"`` and ``"-inf"`` (``portable``); ``restore`` reads them back.
- After exit 2 the events already printed are not a record of the run: the exit status
  says the log is malformed, and a reader must discard the output.

Parsers read a log through ``read_lines`` (a file, in blocks) or ``text_lines`` (a log
already in memory), which hold to the first rule and say whether the last line ended.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple


class ParseError(ValueError):
    """Malformed log input. ``str()`` starts with ``FILE:LINE:``."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


class Line(NamedTuple):
    """One line of a log: its 1-based number, its text (no line ending), and whether it
    ended with a newline (only the last line of a log cut while being written does not)."""

    number: int
    text: str
    terminated: bool


# Control bytes that no log writer emits: everything below space except tab, LF, VT, FF,
# CR and ESC (colour codes of consoles). One of them means the file is not a log.
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
_CHUNK = 1 << 18  # bytes read at a time: big enough to be fast, small enough to hold


def _binary(path: str, number: int, detail: str) -> ParseError:
    return ParseError(path, number, f"not a text log ({detail})")


def _decode(path: str, number: int, raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _binary(path, number, f"invalid UTF-8 at byte {err.start + 1} of the line") from None
    if number == 1 and text.startswith("\ufeff"):
        text = text[1:]
    return text[:-1] if text.endswith("\r") else text


def _decode_lines(path: str, number: int, data: bytes) -> Iterator[str]:
    """The lines of ``data`` (whole lines after line ``number``), decoded in one call;
    line by line only to name the first line that is not UTF-8 (after the lines before it)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        for offset, raw in enumerate(data.split(b"\n"), start=1):
            yield _decode(path, number + offset, raw)
        return
    if number == 0 and text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    yield from ([line[:-1] if line.endswith("\r") else line for line in lines] if "\r" in text else lines)


def read_lines(path: str | Path) -> Iterator[Line]:
    """The lines of the log at ``path``, one at a time (a FIFO or ``/dev/stdin`` works).

    The file is read in blocks of ``_CHUNK`` bytes, each searched for control bytes in one
    pass, then split: a binary file is refused at its first block, and memory holds one
    block (or one line, if a line is longer). ``ParseError`` for an empty file (line 0) or
    one that is not text, after the lines before the offending one; ``OSError`` if it
    cannot be opened or read.
    """
    name, number = str(path), 0
    pending: list[bytes] = []  # the start of a line that continues in the next block
    # Unbuffered: one read() returns what is there, so a FIFO's lines are parsed (and the
    # CLI prints their events) as they are written, not once a whole block has arrived.
    with open(path, "rb", buffering=0) as handle:
        while block := handle.read(_CHUNK):
            bad = _CONTROL_BYTES.search(block)
            usable = block[: bad.start()] if bad else block
            end = usable.rfind(b"\n")
            if end >= 0:
                for text in _decode_lines(name, number, b"".join([*pending, usable[:end]])):
                    number += 1
                    yield Line(number, text, True)
                pending, usable = [], usable[end + 1 :]
            if bad:
                raise _binary(name, number + 1, "control characters")
            pending.append(usable)
    if any(pending):
        number += 1
        yield Line(number, _decode(name, number, b"".join(pending)), False)
    if number == 0:
        raise ParseError(name, 0, "empty log")


def text_lines(text: str, path: str = "<log>") -> Iterator[Line]:
    """``read_lines`` for a log already in memory (the same checks, lines split at ``\\n``)."""
    if not text:
        raise ParseError(path, 0, "empty log")
    start, number = 0, 0
    while start < len(text):
        end = text.find("\n", start)
        stop = len(text) if end < 0 else end
        number += 1
        if _CONTROL_CHARS.search(text, start, stop):
            raise _binary(path, number, "control characters")
        line = text[start:stop]
        if number == 1 and line.startswith("\ufeff"):
            line = line[1:]
        yield Line(number, line[:-1] if line.endswith("\r") else line, end >= 0)
        start = stop + 1


REASON_LIMIT = 300  # characters of a failure reason kept in a run_end event


def shorten(reason: str | None) -> str | None:
    """A failure reason cut to REASON_LIMIT characters (a log line can be megabytes)."""
    if reason is None or len(reason) <= REASON_LIMIT:
        return reason
    return reason[: REASON_LIMIT - 3] + "..."


_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def portable(value: Any) -> Any:
    """``value`` with non-finite floats (also inside dicts and lists) as the strings
    ``"nan"``, ``"inf"``, ``"-inf"``: JSON has no NaN, and ``null`` would mean "no value"."""
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if math.isnan(value) else repr(value))
    if isinstance(value, dict):
        if all(type(item) is not float or math.isfinite(item) for item in value.values()) and not any(
            isinstance(item, (dict, list)) for item in value.values()
        ):
            return value  # the common case, checked without a call per field
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item) for item in value]
    return value


def restore(value: Any) -> Any:
    """The inverse of ``portable`` for a parsed event: ``"nan"``/``"inf"``/``"-inf"`` as floats."""
    if isinstance(value, str):
        return _NONFINITE.get(value, value)
    if isinstance(value, dict):
        return {key: restore(item) for key, item in value.items()}
    if isinstance(value, list):
        return [restore(item) for item in value]
    return value
