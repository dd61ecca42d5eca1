"""The aggregation reproduces the golden study's tables byte for byte.

``tests/data/golden/runs`` is a small seeded study (``make_runs.py`` there says what is in
it); ``expected/`` holds the tables ``python -m dlscale.analysis`` made from it. A change
that moves a number, a column or a row shows here first; a deliberate one regenerates
``expected/`` (``python -m dlscale.analysis runs --out expected`` in that folder) in the
same commit, so the diff of the tables is reviewed with the code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO

GOLDEN = REPO / "tests" / "data" / "golden"
TABLES = ("runs.csv", "cells.csv", "findings.csv", "claims.csv")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("golden")
    proc = subprocess.run(
        [sys.executable, "-m", "dlscale.analysis.aggregate", "runs", "--out", str(out)],
        cwd=GOLDEN,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.parametrize("table", TABLES)
def test_the_golden_study_gives_the_same_tables(made: Path, table: str) -> None:
    expected = (GOLDEN / "expected" / table).read_bytes()
    got = (made / table).read_bytes()
    if got != expected:
        old, new = expected.decode().splitlines(), got.decode().splitlines()
        first = next(
            (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new))
        )
        pytest.fail(
            f"{table} differs from tests/data/golden/expected/{table} at line {first + 1}:\n"
            f"expected: {old[first] if first < len(old) else '<end>'}\n"
            f"got:      {new[first] if first < len(new) else '<end>'}"
        )
