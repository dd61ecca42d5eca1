"""Time to target projected to many nodes (dlscale.perfmodel.time_to_target): step time x
S(B) at each node count's global batch, the node count where more nodes stop paying, and a
held-out check, on hand-made step times and fits."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dlscale.analysis import batch_scaling as bs
from dlscale.perfmodel import time_to_target as ttt


def known_fit(s_min: float = 100.0, b_noise: float = 256.0, **extra: object) -> bs.StepsFit:
    """A fit with its numbers set by hand (no bootstrap replicates: the band is the point)."""
    return bs.StepsFit(s_min=s_min, b_noise=b_noise, batches=(64.0, 128.0, 256.0), **extra)


def projection_table(steps: dict[int, tuple[float, float, float]]) -> pd.DataFrame:
    """Rows as the throughput projection writes them (one set-up and model)."""
    return pd.DataFrame(
        [
            {
                "setup": "torch",
                "model": "lenet",
                "network": "host",
                "nodes": n,
                "step_s": s,
                "step_lo": lo,
                "step_hi": hi,
            }
            for n, (s, lo, hi) in steps.items()
        ]
    )


def test_the_projection_is_step_time_times_the_steps_at_the_global_batch() -> None:
    table = projection_table({1: (0.1, 0.09, 0.11), 2: (0.12, 0.1, 0.13), 4: (0.2, 0.18, 0.25)})
    out = ttt.project(table, known_fit(), batch_per_rank=32, ranks_per_node=2).set_index("nodes")
    # global batch 64, 128, 256 -> S = 100 (1 + 256 / B) = 500, 300, 200 steps
    assert list(out["global_batch"]) == [64, 128, 256]
    assert list(out["steps"]) == pytest.approx([500.0, 300.0, 200.0])
    assert list(out["time_to_target_s"]) == pytest.approx([50.0, 36.0, 40.0])
    assert out.loc[4, "node_hours"] == pytest.approx(4 * 40.0 / 3600)
    # no replicates: the steps band is the point, so the time band is the step band's ends x S
    assert (out.loc[2, "time_lo"], out.loc[2, "time_hi"]) == pytest.approx((30.0, 39.0))
    assert not out["extrapolated"].any()
    warm = ttt.project(table, known_fit(), 32, 2, warmup_iterations=50).set_index("nodes")
    assert warm.loc[1, "time_to_target_s"] == pytest.approx(0.1 * 450)


def test_a_step_time_callable_and_the_fits_band_combine_end_to_end() -> None:
    replicates = np.array([[90.0, 200.0], [100.0, 256.0], [110.0, 300.0]])
    fit = known_fit(replicates=replicates)

    def step(nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return 0.1 + 0.01 * nodes, 0.1 + 0.005 * nodes, 0.1 + 0.02 * nodes

    out = ttt.project(step, fit, 64, 1, nodes=[1, 8]).set_index("nodes")
    steps_lo, steps_hi = fit.band([64.0, 512.0])
    assert out.loc[8, "time_lo"] == pytest.approx(0.14 * steps_lo[1])
    assert out.loc[8, "time_hi"] == pytest.approx(0.26 * steps_hi[1])
    assert out.loc[8, "time_lo"] <= out.loc[8, "time_to_target_s"] <= out.loc[8, "time_hi"]
    assert out.loc[8, "extrapolated"] and not out.loc[1, "extrapolated"]
    with pytest.raises(ValueError, match="node counts"):
        ttt.project(step, fit, 64, 1)


def test_batches_at_or_past_a_diverged_one_have_no_projection() -> None:
    table = projection_table({n: (0.1, 0.1, 0.1) for n in (1, 2, 4, 8)})
    out = ttt.project(table, known_fit(diverged_batches=(512.0,)), 64, 1).set_index("nodes")
    assert math.isfinite(out.loc[4, "time_to_target_s"])
    assert math.isnan(out.loc[8, "time_to_target_s"]) and "diverged at global batch 512" in out.loc[8, "note"]
    assert ttt.project(table, bs.StepsFit(refused="too few batches"), 64, 1).empty


def test_where_more_nodes_stop_paying_within_the_band() -> None:
    # 100 (1 + 256/B) steps, B = 64 N: 500, 300, 200, 150, 125, 112.5 steps at 1..32 nodes
    table = projection_table({n: (0.1, 0.095, 0.105) for n in (1, 2, 4, 8, 16, 32)})
    out = ttt.project(table, known_fit(), 64, 1)
    stop = ttt.stops_paying(out)
    assert stop.fastest_nodes == 32
    # 16 nodes: 12.5 s [11.9, 13.1]; 32 nodes: 11.25 s [10.7, 11.8] lies wholly below it;
    # 8 nodes' band [14.25, 15.75] is beaten by 16's, so the first unbeaten is 32: still paying
    assert stop.nodes == math.inf
    slower = projection_table(
        {1: (0.1, 0.095, 0.105), 2: (0.1, 0.095, 0.105), 4: (0.2, 0.19, 0.21), 8: (0.3, 0.29, 0.31)}
    )
    stop = ttt.stops_paying(ttt.project(slower, known_fit(), 64, 1))
    assert (stop.fastest_nodes, stop.nodes) == (2, 2)  # 50, 30, 40, 45 s
    nothing = ttt.project(table, known_fit(diverged_batches=(64.0,)), 64, 1)
    assert all(
        math.isnan(v) for v in (ttt.stops_paying(nothing).nodes, ttt.stops_paying(nothing).fastest_nodes)
    )


def weak_outcomes(s_min: float, b_noise: float, step_s: dict[int, float], repeats: int = 3) -> pd.DataFrame:
    """Run outcomes at batch 64 per node whose steps follow S(B) (small spread) and whose
    time to target is those steps x the node count's step time."""
    rows = []
    for nodes, step in step_s.items():
        for r in range(repeats):
            steps = bs.steps_curve(64 * nodes, s_min, b_noise) * (1 + 0.01 * (r - 1))
            rows.append(
                {
                    "framework": "torch", "model": "lenet", "lr_rule": "linear", "lr_rate": 0.01 * nodes,
                    "nodes": nodes, "global_batch": 64 * nodes, "repeat": r, "outcome": bs.REACHED,
                    "target_metric": "top1", "target_value": 0.9, "steps_to_target": steps, "steps_bracket_low": steps - 10,
                    "time_to_target_s": steps * step, "time_bracket_low_s": (steps - 10) * step,
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


def test_the_held_out_check_predicts_the_largest_node_count_from_the_smaller_ones() -> None:
    step_s = {1: 0.1, 2: 0.11, 4: 0.12, 8: 0.14}
    outcomes = weak_outcomes(100.0, 256.0, step_s)
    table = projection_table({n: (s, s * 0.95, s * 1.05) for n, s in step_s.items()})
    held = ttt.held_out_check(outcomes, table, batch_per_rank=64, ranks_per_node=1, resamples=100)
    assert held.refused is None
    assert held.held_out_nodes == 8 and held.calibrated_on == (1, 2, 4)
    assert held.measured_s == pytest.approx(0.14 * 150.0)
    assert abs(held.relative_error) < 0.05 and held.within_band
    assert held.measured_bracket_s == pytest.approx(1.4)
    # the largest node count needs twice the steps the curve says: a large error, outside the band
    off = outcomes.copy()
    off.loc[off["nodes"].eq(8), "time_to_target_s"] *= 2
    held = ttt.held_out_check(off, table, 64, 1, resamples=100)
    assert held.relative_error == pytest.approx(-0.5, abs=0.03) and held.within_band is False


def test_the_held_out_check_refuses_without_enough_node_counts_or_a_measured_time() -> None:
    outcomes = weak_outcomes(100.0, 256.0, {1: 0.1, 2: 0.11})
    table = projection_table({n: (0.1, 0.1, 0.1) for n in (1, 2)})
    assert "2 or more distinct global batches" in ttt.held_out_check(outcomes, table, 64, 1).refused
    none = outcomes.assign(outcome=bs.NOT_REACHED)
    assert "has a measured median time to target" in ttt.held_out_check(none, table, 64, 1).refused
    # The largest count without a median is not held out, nor calibrated on.
    outcomes = weak_outcomes(100.0, 256.0, {1: 0.1, 2: 0.11, 4: 0.12, 8: 0.14})
    outcomes.loc[outcomes["nodes"].eq(8), "outcome"] = bs.NOT_REACHED
    table = projection_table({n: (0.1, 0.1, 0.1) for n in (1, 2, 4, 8)})
    held = ttt.held_out_check(outcomes, table, 64, 1, resamples=20)
    assert held.refused is None and held.held_out_nodes == 4 and held.calibrated_on == (1, 2)
    # Only the counts whose runs had a core per rank are held out; contended seconds never count.
    held = ttt.held_out_check(outcomes, table, 64, 1, resamples=20, host_cores=2)
    assert held.held_out_nodes == 2 and held.calibrated_on == (1, 4)
    outcomes["contended"] = outcomes["nodes"].eq(2)
    held = ttt.held_out_check(outcomes, table, 64, 1, resamples=20, host_cores=2)
    # 2 nodes' steps still calibrate S(B) (they do not depend on the load).
    assert held.held_out_nodes == 1 and held.calibrated_on == (2, 4) and held.refused is None
