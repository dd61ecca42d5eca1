"""The wall-split table's arithmetic, checked on any study's ``wall_split.csv``
(dlscale.analysis.wallsplit): by the unit tests and on the session's workflow study."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dlscale.analysis.wallsplit import STARTUP_COLUMNS


def assert_adds_up(table: pd.DataFrame) -> None:
    """Every row's parts sum to its wall and its start-up, and its total to wall + gaps -
    overlaps (to the millisecond the table is rounded to)."""
    for framework, row in table.iterrows():
        parts = row[["startup_s", "warmup_s", "timed_s", "eval_s", "other_s"]].sum()
        assert parts == pytest.approx(row["wall_s"], abs=0.01), framework
        startup = row[[*STARTUP_COLUMNS, "startup_other_s"]].sum()
        assert startup == pytest.approx(row["startup_s"], abs=0.01), framework
        total = row["wall_s"] + row["gap_s"] - row["overlap_s"]
        assert total == pytest.approx(row["total_s"], abs=0.01), framework
        assert not math.isnan(row["timed_share"]), framework
