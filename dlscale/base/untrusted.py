"""Strings from input shown to a person or written to a CSV, made harmless on the way out.

A study from elsewhere names its own members, folders, hosts, versions and git revision, and
every tool that prints or tabulates them hands those strings on. Two rules, one place:

* ``shown``: text printed to a terminal has every non-printable character (newline,
  carriage return, escape, other control and format characters) escaped the way ``repr``
  escapes it, so that a name holding a newline cannot start a forged line (``verify: OK``)
  and a terminal escape sequence never reaches the terminal.
* ``csv_cell``/``neutralised``: a CSV cell that begins with ``=``, ``+``, ``-``, ``@``, a tab
  or a carriage return is a formula to a spreadsheet (OWASP's CSV injection), so it gets a
  single quote in front. A cell that already begins with a quote gets one too, so that the
  reader's rule is exact: ``restore_cell`` strips one leading quote, and every original comes
  back. A plain number written as text (``-1.5``, ``+2e3``) is no formula and stays as it is
  (a numeric column stays numeric).

Standard library only; the frame helpers use only the frame's own methods.
"""

from __future__ import annotations

import re
from typing import Any

#: What a spreadsheet reads as the start of a formula (OWASP, CSV injection).
CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: The prefix that makes such a cell text; a reader strips one (``restore_cell``).
CSV_QUOTE = "'"
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
#: dtype kinds that hold no strings (bool, integers, floats, complex, times).
_NUMERIC_KINDS = frozenset("biufcmM")


def shown(text: object) -> str:
    """``text`` with every non-printable character escaped as ``repr`` would escape it
    (``\\n``, ``\\r``, ``\\x1b``, ``\\u2028``...); printable text, non-ASCII included, as it is."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in value)


def csv_cell(value: Any) -> Any:
    """A cell as it may be written to a CSV: a string that a spreadsheet would run as a
    formula (or that begins with the quote itself) with ``CSV_QUOTE`` in front; a number,
    a number written as text and anything else unchanged."""
    if not isinstance(value, str) or not value:
        return value
    if value.startswith(CSV_QUOTE):
        return CSV_QUOTE + value
    if value.startswith(CSV_FORMULA_STARTS) and not _NUMBER.fullmatch(value):
        return CSV_QUOTE + value
    return value


def restore_cell(value: Any) -> Any:
    """The original of a cell ``csv_cell`` wrote: one leading ``CSV_QUOTE`` stripped."""
    if isinstance(value, str) and value.startswith(CSV_QUOTE):
        return value[len(CSV_QUOTE) :]
    return value


def _text_columns(frame: Any) -> list[Any]:
    return [
        column for column in frame.columns if getattr(frame[column].dtype, "kind", "O") not in _NUMERIC_KINDS
    ]


def neutralised(frame: Any) -> Any:
    """A copy of a pandas DataFrame with ``csv_cell`` applied to every text column's cells
    and to the header (a column may be named after a study's folder): the frame every CSV
    writer of the project writes."""
    out = frame.copy()
    for column in _text_columns(frame):
        out[column] = out[column].map(csv_cell)
    out.columns = [csv_cell(column) for column in frame.columns]
    return out


def restored(frame: Any) -> Any:
    """A pandas DataFrame read from a CSV written through ``neutralised``, with every text
    cell and column name back to its original (``restore_cell``)."""
    out = frame.copy()
    for column in _text_columns(frame):
        out[column] = out[column].map(restore_cell)
    out.columns = [restore_cell(column) for column in frame.columns]
    return out


def write_csv(frame: Any, path: Any, **options: Any) -> None:
    """``frame.to_csv(path, index=False)`` through ``neutralised``: the one way the project
    writes a CSV that may hold strings from input."""
    neutralised(frame).to_csv(path, index=False, **options)
