"""dlscale.base.untrusted: names shown escaped, CSV cells neutralised and restored whole;
dlscale.archive.origin: the publisher's digest read and judged."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd
import pytest

from dlscale.archive import origin
from dlscale.archive.artifact import sha256_file
from dlscale.archive.safety import Refused
from dlscale.base.untrusted import csv_cell, restore_cell, restored, shown, write_csv

HOSTILE = ["=cmd|' /C calc'!A0", "+1+cmd", "-2+3+cmd", "@SUM(A1)", "\tx", "\rx", "'=quoted already", "'", "-"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_formula_cell_is_quoted_and_restored(value: str) -> None:
    assert csv_cell(value).startswith("'") and restore_cell(csv_cell(value)) == value


@pytest.mark.parametrize("value", ["-1.5", "+2e3", "-.5", "plain", "", "host-1", "1-2"])
def test_numbers_and_plain_text_stay_as_they_are(value: str) -> None:
    assert csv_cell(value) == value


def test_a_frame_round_trips_through_a_csv_with_numbers_kept_numeric() -> None:
    frame = pd.DataFrame({"host": [HOSTILE[0], "cn1"], "ratio": [-1.5, 2.0], "=col": ["-1.5", "@x"]})
    buffer = io.StringIO()
    write_csv(frame, buffer)
    text = buffer.getvalue()
    assert text.splitlines()[0] == "host,ratio,'=col"
    assert (
        "\n'=cmd" in text
        and ",-1.5," in text
        and not any(line.startswith(("=", "+", "@")) for line in text.splitlines())
    )
    back = restored(pd.read_csv(io.StringIO(text)))
    assert back.columns.tolist() == frame.columns.tolist()
    assert back["host"].tolist() == frame["host"].tolist() and back["ratio"].tolist() == [-1.5, 2.0]
    assert back["=col"].tolist() == ["-1.5", "@x"]


def test_shown_escapes_what_would_start_a_line_or_drive_the_terminal() -> None:
    assert shown("a\nverify: OK") == "a\\nverify: OK"
    assert shown("\x1b[2J\x07\r\u2028") == "\\x1b[2J\\x07\\r\\u2028"
    assert shown("Zürich node-1") == "Zürich node-1"


def test_the_publishers_digest_is_read_and_judged(tmp_path: Path) -> None:
    archive = tmp_path / "artifact.tar.gz"
    archive.write_bytes(b"an archive")
    assert origin.check_origin(archive).status == origin.NOT_PROVEN
    good = sha256_file(archive)
    assert origin.check_origin(archive, good.upper()).status == origin.PROVEN
    assert origin.check_origin(archive, "0" * 64).status == origin.FAILED
    sidecar = tmp_path / "artifact.tar.gz.sha256"
    sidecar.write_text(f"{'1' * 64}  artifact.tar.gz\n")
    assert origin.check_origin(archive).status == origin.FAILED
    assert origin.check_origin(archive, good).status == origin.FAILED  # every digest given must match
    sidecar.write_text(f"{good}  other.tar.gz\n")
    with pytest.raises(Refused, match="names another file"):
        origin.check_origin(archive)
    sidecar.unlink()
    os.mkfifo(sidecar)
    with pytest.raises(Refused, match="not a regular file"):
        origin.check_origin(archive)
    with pytest.raises(Refused, match="not a sha256"):
        origin.check_origin(archive, "xyz")
    with pytest.raises(Refused, match="is a folder"):
        origin.check_origin(tmp_path, good)
    assert origin.check_origin(tmp_path).status == origin.NOT_PROVEN


def test_a_figure_spec_vega_would_run_unsafely_is_named() -> None:
    from dlscale.archive.published import MAX_FIGURE_ROWS, unsafe_spec

    own = {"datasets": {"d": [{"x": 1}]}, "data": {"name": "d"}, "mark": "point"}
    assert unsafe_spec(own) is None
    assert "not one of its own datasets" in unsafe_spec({**own, "data": {"name": "other"}})
    assert "not one of its own datasets" in unsafe_spec({**own, "layer": [{"data": {"url": "/etc/passwd"}}]})
    assert "'keyvals' generator" in unsafe_spec(
        {**own, "transform": [{"impute": "y", "keyvals": {"stop": 10**9}}]}
    )
    assert "['sequence']" in unsafe_spec({**own, "layer": [{"data": {"sequence": {"stop": 10**9}}}]})
    assert "over 10,000" in unsafe_spec({**own, "transform": [{"density": "x", "steps": 10**9}]})
    assert "data rows" in unsafe_spec({**own, "datasets": {"d": [{}] * (MAX_FIGURE_ROWS + 1)}})
    assert "not an object" in unsafe_spec([own])
