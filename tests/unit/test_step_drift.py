"""Steady or not: a run whose timed steps drift (a JVM still compiling) is flagged, with the
drift and its test in runs.csv, and counted in its cell's note; a steady run is not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.events import iteration, write_run
from scipy.stats import mannwhitneyu

from dlscale.analysis import tables
from dlscale.analysis.cells import cells
from dlscale.analysis.runstats import DRIFT_MIN_HALF, step_drift


def run_of(tmp_path: Path, steps: list[float], repeat: int = 0, warmup: int = 2) -> Path:
    events = [iteration(0, i, 9.0, loss=2.0, warmup=True) for i in range(warmup)]
    events += [iteration(0, warmup + i, step, loss=1.0) for i, step in enumerate(steps)]
    return write_run(tmp_path, events, framework="bigdl", repeat=repeat)


def noisy(rng: np.random.Generator, centre: np.ndarray) -> list[float]:
    return list(centre * rng.uniform(0.97, 1.03, len(centre)))


def test_drift_is_the_halves_median_ratio_and_their_rank_test() -> None:
    # Out of order on purpose: the halves follow the iteration, not the row order.
    steps = pd.Series(
        [0.10, 0.15, 0.14, 0.16, 0.05, 0.06, 0.04, 0.045, 0.055, 0.13, 0.5],
        index=pd.MultiIndex.from_tuples([(0, i) for i in (1, 0, 2, 3, 6, 7, 8, 9, 10, 4, 5)]),
    )
    got = step_drift(steps, pd.RangeIndex(1)).iloc[0]
    early, late = [0.15, 0.10, 0.14, 0.16, 0.13], [0.05, 0.06, 0.04, 0.045, 0.055]  # 0.5: the middle
    assert got["step_drift"] == pytest.approx(np.median(late) / np.median(early))
    assert got["step_drift_p"] == pytest.approx(mannwhitneyu(early, late, alternative="two-sided").pvalue)
    assert got["step_drift_p"] < 0.01


def test_too_few_steps_give_no_drift() -> None:
    n = 2 * DRIFT_MIN_HALF - 1
    steps = pd.Series(np.linspace(1.0, 0.1, n), index=pd.MultiIndex.from_tuples([(0, i) for i in range(n)]))
    got = step_drift(steps, pd.RangeIndex(2))
    assert got.isna().all().all()  # run 0: too few; run 1: no steps at all


def test_a_warming_run_is_flagged_and_noted_in_its_cell_a_steady_one_is_not(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    # What BigDL's LeNet runs did in the demo (2026-12-05): ~150 ms falling to ~50 ms.
    warming = noisy(rng, np.linspace(0.15, 0.05, 40))
    steady = noisy(rng, np.full(40, 0.1))
    paths = [
        run_of(tmp_path / "a", warming, 0),
        run_of(tmp_path / "a", steady, 1),
        run_of(tmp_path / "a", steady, 2),
    ]
    runs, _ = tables.load_events(paths)
    by_repeat = runs.set_index("repeat")
    assert by_repeat.at[0, "step_drift"] < 0.6 and by_repeat.at[0, "step_drift_p"] < 1e-6
    assert by_repeat.at[0, "flag"].startswith("unsteady: the second half of its timed steps ran at 0.")
    assert "still warming up" in by_repeat.at[0, "flag"]
    assert 0.95 < by_repeat.at[1, "step_drift"] < 1.05
    assert pd.isna(by_repeat.at[1, "flag"]) and pd.isna(by_repeat.at[2, "flag"])
    cell = cells(runs).iloc[0]
    assert cell["repeats"] == 3  # counted, not left out
    assert "unsteady: 1 of 3 repeat(s)" in cell["note"]
    assert pd.isna(cell["flag"])


def test_a_run_slowed_while_timed_is_flagged_too(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    slowed = noisy(rng, np.concatenate([np.full(20, 0.1), np.full(20, 0.13)]))
    runs, _ = tables.load_events([run_of(tmp_path, slowed)])
    assert runs.at[0, "step_drift"] == pytest.approx(1.3, rel=0.05)
    assert "slowed while timed" in runs.at[0, "flag"]


def test_a_small_but_significant_drift_is_not_flagged(tmp_path: Path) -> None:
    # 3 % slower in the second half, every step: significant, but inside the band that the
    # steady frameworks' halves spread over (docs/thresholds.md).
    steps = [0.100 + 0.0001 * (i % 3) for i in range(20)] + [0.103 + 0.0001 * (i % 3) for i in range(20)]
    runs, _ = tables.load_events([run_of(tmp_path, steps)])
    assert runs.at[0, "step_drift_p"] < 0.01
    assert pd.isna(runs.at[0, "flag"])


def test_a_claim_on_an_unsteady_framework_says_so(tmp_path: Path) -> None:
    from dlscale.analysis.claims import claims

    rng = np.random.default_rng(9)
    paths = []
    for repeat in range(3):
        events = [iteration(0, i, s, loss=1.0) for i, s in enumerate(noisy(rng, np.linspace(0.15, 0.05, 40)))]
        paths.append(write_run(tmp_path, events, framework="bigdl", repeat=repeat))
        events = [iteration(0, i, s, loss=1.0) for i, s in enumerate(noisy(rng, np.full(40, 0.01)))]
        paths.append(write_run(tmp_path, events, framework="torch", repeat=repeat))
    runs, _ = tables.load_events(paths)
    table = claims(cells(runs), runs=runs)
    fastest = table[table["claim"].eq("BigDL computes fastest")].iloc[0]
    assert fastest["verdict"] == "contradicted"
    assert "BigDL's unsteady: 3 of 3 repeat(s)" in fastest["reason"]
    assert "not for its steady speed" in fastest["reason"]
