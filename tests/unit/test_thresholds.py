"""dlscale.thresholds: the table applies itself (``passes``/``fails``), one edge rule for every
decision that reads it, and values scoped per profile."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from helpers.events import steady_run

from dlscale import quality, thresholds
from dlscale.analysis import tables
from dlscale.host import contention, roofline
from dlscale.thresholds import THRESHOLDS, Threshold, threshold


def test_a_value_on_the_bound_passes_and_nan_neither_passes_nor_fails() -> None:
    at_most, at_least = threshold("contended_share"), threshold("harness_ratio")
    assert at_most.passes(at_most.value) and not at_most.fails(at_most.value)
    assert at_most.fails(math.nextafter(at_most.value, 1.0))
    assert at_least.passes(at_least.value) and at_least.fails(math.nextafter(at_least.value, 0.0))
    for t in THRESHOLDS.values():
        assert not t.passes(math.nan) and not t.fails(math.nan), t.name


@pytest.mark.parametrize(("share", "contended"), [(0.19, False), (0.2, False), (0.2001, True)])
def test_the_runs_table_and_the_probe_mark_contention_at_the_same_edge(
    tmp_path: Path, share: float, contended: bool
) -> None:
    probe = {"other_busy_share": share, "steal_share": None, "contended": None}
    steady_run(tmp_path, 100.0, nodes=1, contention=probe)
    runs, _ = tables.load_events(sorted(tmp_path.rglob("events.jsonl")))
    assert bool(runs["contended"].iat[0]) is contended
    assert contention.CONTENDED.fails(share) is contended


def test_the_fixed_overhead_flag_and_the_roofline_flag_use_the_same_edge() -> None:
    runs = pd.DataFrame(
        {"world_size": [1, 1, 1], "exposed_comm_share": [0.1, 0.1001, math.nan], "contended": [False] * 3}
    )
    assert [flag is not None for flag in tables.run_flags(runs)] == [False, True, False]
    limit = threshold("roofline_fraction").value
    assert roofline.flag_of(limit, 1, {"peak_flops": {"1": 1.0}}) is None
    assert roofline.flag_of(limit + 0.01, 1, {"peak_flops": {"1": 1.0}}) is not None


def test_learned_is_the_thresholds_passes_in_multiples_of_chance() -> None:
    # MNIST top-1 chance is 0.1: twice chance learned, a hair below not
    factor = quality.LEARNED_TOPK.value
    assert quality.learned("top1", factor * 0.1, "mnist") is True
    assert quality.learned("top1", factor * 0.1 - 1e-9, "mnist") is False


def test_a_profile_scopes_a_value_and_its_bound() -> None:
    base = Threshold("busy", 0.2, "share", None, 0.2, False, "m", {"tianhe": 0.3, "laptop": 0.1})
    tianhe = base.at("tianhe")
    assert (tianhe.value, tianhe.upper, tianhe.lower) == (0.3, 0.3, None)
    assert base.passes(0.25, "tianhe") and not base.passes(0.25) and base.fails(0.15, "laptop")
    assert base.at("elsewhere") is base and base.at(None) is base
    # a bound of its own stays where it is when the value moves
    banded = Threshold("ratio", 1.0, "x", 0.9, 1.0, True, "m", {"site": 1.1})
    assert (banded.at("site").lower, banded.at("site").upper) == (0.9, 1.1)


def test_threshold_takes_a_profile_and_names_an_unknown_one() -> None:
    assert threshold("contended_share", "no-such-profile") is THRESHOLDS["contended_share"]
    with pytest.raises(KeyError, match="no threshold 'nope'"):
        threshold("nope")


def test_one_idiom_reads_a_value() -> None:
    shorthands = [name for name in vars(thresholds) if name.isupper() and name != "THRESHOLDS"]
    assert shorthands == []
