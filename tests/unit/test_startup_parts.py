"""A rank's start-up parts (dlscale.runners.common.startup_part), on a hand-driven clock: a
part nested in another is its own, not the outer one's, so the parts never count a second
twice."""

from __future__ import annotations

import pytest

from dlscale.runners import common


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr(common, "_STARTUP", {})
    monkeypatch.setattr(common, "_OPEN_PARTS", [])
    fake = Clock()
    monkeypatch.setattr(common.time, "perf_counter", fake)
    return fake


def test_a_nested_part_is_taken_out_of_the_outer_one(clock):
    with common.startup_part("import_s"):
        clock.now += 2.0
        with common.startup_part("rendezvous_s"):
            clock.now += 5.0
    with common.startup_part("import_s"):  # a part timed twice adds up
        clock.now += 1.0
    assert common.startup_seconds() == {"import_s": 3.0, "rendezvous_s": 5.0}


def test_a_failing_block_still_counts_and_closes(clock):
    with pytest.raises(RuntimeError), common.startup_part("data_setup_s"):
        clock.now += 0.5
        raise RuntimeError("unreadable shard")
    assert common.startup_seconds() == {"data_setup_s": 0.5}
    assert common._OPEN_PARTS == []
