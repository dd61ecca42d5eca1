"""Steps to target against the global batch, the S(B) fit, and the node count that trains
fastest and cheapest (dlscale.analysis.batch_scaling), on hand-made runs and evals."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dlscale.analysis import batch_scaling as bs
from dlscale.analysis.convergence import NO_CLEAR_WINNER

TARGET = ("top1", 0.9)


def run(run_id: str, nodes: int = 1, batch_per_rank: int = 64, repeat: int = 0, **extra: object) -> dict:
    row = {
        "run_id": run_id,
        "framework": "torch",
        "model": "lenet",
        "network": "host",
        "nodes": nodes,
        "ranks_per_node": 1,
        "batch_per_rank": batch_per_rank,
        "global_batch": nodes * batch_per_rank,
        "repeat": repeat,
        "status": "ok",
        "reason": None,
        "startup_s": 0.0,
        "target_metric": TARGET[0],
        "target_value": TARGET[1],
        "lr_rule": "linear",
        "lr_base_batch": 64,
        "lr_warmup_iterations": 0,
        "lr_rate": 0.01 * nodes * batch_per_rank / 64,
    }
    return row | extra


def evals_of(run_id: str, points: list[tuple[int, float, float]], eval_s: float = 0.0) -> list[dict]:
    """(iteration, top1, train_s) per evaluation."""
    return [
        {"run_id": run_id, "iteration": it, "metric": "top1", "value": v, "train_s": t, "eval_s": eval_s}
        for it, v, t in points
    ]


def outcomes_of(runs: list[dict], evals: list[dict], iterations: list[dict] | None = None) -> pd.DataFrame:
    its = pd.DataFrame(iterations) if iterations else None
    return bs.run_outcomes(pd.DataFrame(runs), pd.DataFrame(evals), its)


def test_the_quantisation_bracket_lies_between_the_last_evaluation_below_and_the_first_at_the_target() -> (
    None
):
    evals = evals_of("a", [(10, 0.5, 1.0), (20, 0.85, 2.0), (30, 0.91, 3.0), (40, 0.95, 4.0)], eval_s=0.5)
    evals += evals_of("b", [(10, 0.92, 1.5)])
    out = outcomes_of([run("a", startup_s=2.0), run("b", nodes=2)], evals).set_index("run_id")
    a = out.loc["a"]
    assert a["outcome"] == bs.REACHED
    assert (a["steps_bracket_low"], a["steps_to_target"]) == (20.0, 30.0)
    assert (a["samples_bracket_low"], a["samples_to_target"]) == (20 * 64.0, 30 * 64.0)
    assert (a["time_bracket_low_s"], a["time_to_target_s"]) == (2.0, 3.0)
    # start-up 2 + training 3 + the three evaluations up to the crossing 1.5, on one node
    assert a["wall_to_target_s"] == pytest.approx(6.5)
    assert a["node_hours"] == pytest.approx(6.5 / 3600)
    b = out.loc["b"]  # met at the first evaluation: the crossing lies after step 0
    assert (b["steps_bracket_low"], b["steps_to_target"], b["samples_to_target"]) == (0.0, 10.0, 1280.0)
    assert b["node_hours"] == pytest.approx(2 * 1.5 / 3600)


def test_a_run_that_never_meets_the_target_is_not_reached_and_has_no_number() -> None:
    out = outcomes_of([run("a")], evals_of("a", [(10, 0.5, 1.0), (20, 0.8, 2.0)])).iloc[0]
    assert out["outcome"] == bs.NOT_REACHED
    assert math.isnan(out["steps_to_target"]) and math.isnan(out["time_to_target_s"])


def test_divergence_from_a_non_finite_or_exploding_loss_or_the_runners_reason() -> None:
    losses = pd.DataFrame(
        {"rank": 0, "iteration": [0, 1, 2, 3], "loss": [2.3, 2.0, float("nan"), float("nan")]}
    )
    assert bs.divergence(losses)[0] == 2
    exploding = losses.assign(loss=[2.3, 2.0, 30.0, 1e4])
    assert bs.divergence(exploding)[0] == 2 and "exploded" in bs.divergence(exploding)[1]
    # a rank that never reports a loss, and a gap followed by a finite loss, are no divergence
    assert bs.divergence(losses.assign(loss=float("nan"))) is None
    assert bs.divergence(losses.assign(loss=[2.3, float("nan"), 2.0, 1.9])) is None
    reason = "loss became nan at iteration 7 on rank 1"
    assert bs.divergence(losses.iloc[0:0], reason) == (pytest.approx(math.nan, nan_ok=True), reason)


def test_a_diverged_run_is_counted_as_diverged_and_never_a_number() -> None:
    runs = [run("a", repeat=0), run("b", repeat=1), run("c", repeat=2)]
    evals = evals_of("a", [(10, 0.95, 1.0)]) + evals_of("b", [(10, 0.95, 1.1)])
    iterations = [{"run_id": "c", "rank": 0, "iteration": i, "loss": v, "warmup": False, "step_s": 0.1}
                  for i, v in enumerate([2.3, 40.0])]  # fmt: skip
    out = outcomes_of(runs, evals, iterations).set_index("run_id")
    assert out.loc["c", "outcome"] == bs.DIVERGED and math.isnan(out.loc["c", "steps_to_target"])
    steps = bs.steps_by_batch(out.reset_index()).iloc[0]
    assert (steps["reached"], steps["not_reached"], steps["diverged"], steps["repeats"]) == (2, 0, 1, 3)
    # two of three reached: the median is the larger reached value, the diverged one infinitely slow
    assert steps["steps_to_target"] == 10.0 and steps["steps_high"] == math.inf


def test_a_failed_run_is_no_repeat() -> None:
    runs = [run("a"), run("b", repeat=1, status="failed", reason="rank 1 lost")]
    out = outcomes_of(runs, evals_of("a", [(10, 0.95, 1.0)]) + evals_of("b", [(10, 0.95, 1.0)]))
    steps = bs.steps_by_batch(out).iloc[0]
    assert (steps["repeats"], steps["failed"], steps["reached"]) == (1, 1, 1)


def synthetic(
    s_min: float, b_noise: float, batches: list[int], repeats: int, noise: float, seed: int
) -> pd.DataFrame:
    """Run outcomes whose steps follow S(B) with multiplicative noise."""
    rng = np.random.default_rng(seed)
    runs, evals = [], []
    for batch in batches:
        for r in range(repeats):
            steps = int(round(bs.steps_curve(batch, s_min, b_noise) * math.exp(rng.normal(0, noise))))
            run_id = f"b{batch}/r{r}"
            runs.append(run(run_id, nodes=batch // 64, repeat=r))
            evals += evals_of(run_id, [(steps - 1, 0.5, steps * 0.01 - 0.01), (steps, 0.95, steps * 0.01)])
    return outcomes_of(runs, evals)


def test_the_fit_recovers_b_noise_from_steps_on_a_known_curve() -> None:
    outcomes = synthetic(40.0, 300.0, [64, 128, 256, 512, 1024, 2048], repeats=6, noise=0.05, seed=1)
    fit = bs.fit_steps(outcomes, resamples=300, seed=7)
    assert fit.fitted, fit.refused
    assert fit.b_noise_low <= 300.0 <= fit.b_noise_high
    assert fit.b_noise == pytest.approx(300.0, rel=0.25) and fit.s_min == pytest.approx(40.0, rel=0.15)
    assert fit.resamples == 300
    again = bs.fit_steps(outcomes, resamples=300, seed=7)
    assert (again.b_noise_low, again.b_noise_high) == (fit.b_noise_low, fit.b_noise_high)
    points = bs.fit_points(fit)
    assert list(points["global_batch"]) == [64, 128, 256, 512, 1024, 2048]
    assert (points["band_low"] <= points["fit_steps"]).all() and (
        points["fit_steps"] <= points["band_high"]
    ).all()
    assert list(points["regime"]) == [bs.PERFECT] * 3 + [bs.DIMINISHING] * 3


def test_a_point_that_leaves_the_band_is_marked() -> None:
    outcomes = synthetic(40.0, 300.0, [64, 128, 256, 512, 1024], repeats=6, noise=0.02, seed=2)
    slow = outcomes["global_batch"].eq(1024)
    outcomes.loc[slow, "steps_to_target"] *= 3  # the largest batch needs far more steps than the curve
    fit = bs.fit_steps(outcomes, resamples=200)
    points = bs.fit_points(fit).set_index("global_batch")
    assert points.loc[1024, "leaves_band"] == "above"


def test_fewer_than_three_batches_are_refused_with_a_reason() -> None:
    fit = bs.fit_steps(synthetic(40.0, 300.0, [64, 128], repeats=3, noise=0.05, seed=3))
    assert not fit.fitted and "3 or more distinct global batches" in fit.refused
    assert math.isnan(fit.b_noise) and bs.fit_points(fit).empty


def test_a_batch_without_a_reached_run_is_refused_and_an_all_diverged_one_left_out() -> None:
    outcomes = synthetic(40.0, 300.0, [64, 128, 256, 512], repeats=3, noise=0.05, seed=4)
    never = outcomes["global_batch"].eq(512)
    unreached = outcomes.copy()
    unreached.loc[never, "outcome"] = bs.NOT_REACHED
    fit = bs.fit_steps(unreached)
    assert not fit.fitted and "batch 512: no repeat reached the target" in fit.refused
    diverged = outcomes.copy()
    diverged.loc[never, "outcome"] = bs.DIVERGED
    fit = bs.fit_steps(diverged, resamples=50)
    assert fit.fitted and fit.diverged_batches == (512.0,) and fit.batches == (64.0, 128.0, 256.0)
    assert not bs.fit_steps(diverged, drop_diverged=False).fitted


def test_a_rate_sweep_at_one_batch_is_refused() -> None:
    outcomes = synthetic(40.0, 300.0, [64, 128, 256], repeats=2, noise=0.05, seed=5)
    outcomes.loc[outcomes["repeat"].eq(1), "lr_rate"] *= 2
    assert "rates (a sweep)" in bs.fit_steps(outcomes).refused


def node_outcomes(times: dict[int, list[float | None]]) -> pd.DataFrame:
    """Weak scaling at batch 64 per node: one run per value, None = never reached."""
    runs, evals = [], []
    for nodes, values in times.items():
        for r, t in enumerate(values):
            run_id = f"n{nodes}/r{r}"
            runs.append(run(run_id, nodes=nodes, repeat=r))
            evals += evals_of(run_id, [(10, 0.95 if t is not None else 0.5, t if t is not None else 1.0)])
    return outcomes_of(runs, evals)


def test_the_fastest_and_the_cheapest_node_counts_are_named_only_when_intervals_separate() -> None:
    outcomes = node_outcomes({1: [10.0, 10.5, 11.0], 2: [6.0, 6.2, 6.4], 4: [5.8, 6.1, 6.3]})
    winners = bs.node_winners(bs.time_by_nodes(outcomes)).iloc[0]
    assert winners["fastest"] == NO_CLEAR_WINNER and winners["fastest_nodes"] == 4
    assert "overlaps 2 nodes" in winners["note"]
    assert winners["cheapest"] == "1" and winners["cheapest_nodes"] == 1  # 10 node-s against 12 and 23
    assert winners["cheapest_node_hours"] == pytest.approx(10.5 / 3600)
    clear = bs.node_winners(bs.time_by_nodes(node_outcomes({1: [10.0, 10.5], 2: [4.0, 4.5]}))).iloc[0]
    assert (clear["fastest"], clear["fastest_nodes"], clear["cheapest"]) == ("2", 2, "2")


def test_a_target_no_run_reached_gives_no_winner_and_no_node_count() -> None:
    winners = bs.node_winners(bs.time_by_nodes(node_outcomes({1: [None, None], 2: [None, None]}))).iloc[0]
    assert winners["fastest"] == bs.NO_NODE_COUNT and winners["cheapest"] == bs.NO_NODE_COUNT
    assert pd.isna(winners["fastest_nodes"]) and pd.isna(winners["cheapest_nodes"])
    assert math.isnan(winners["fastest_time_s"])


def test_a_diverged_node_count_never_crowns() -> None:
    outcomes = node_outcomes({1: [10.0, 10.5], 2: [1.0, 1.2]})
    outcomes.loc[outcomes["nodes"].eq(2), ["outcome", "time_to_target_s"]] = [bs.DIVERGED, math.nan]
    by_nodes = bs.time_by_nodes(outcomes)
    assert by_nodes.set_index("nodes").loc[2, "diverged"] == 2
    winners = bs.node_winners(by_nodes).iloc[0]
    assert (winners["fastest"], winners["fastest_nodes"]) == ("1", 1)
    assert "2 nodes: no median time to target (0 of 2 reached it, 2 diverged)" in winners["note"]


def test_a_target_given_to_the_analysis_overrides_the_runs_own_and_mse_counts_downward() -> None:
    runs = pd.DataFrame([run("a", model="autoencoder", target_metric=None, target_value=math.nan)])
    evals = pd.DataFrame(
        [
            {"run_id": "a", "iteration": it, "metric": "mse", "value": v, "train_s": t, "eval_s": 0.0}
            for it, v, t in [(10, 0.08, 1.0), (20, 0.05, 2.0), (30, 0.03, 3.0)]
        ]
    )
    assert bs.run_outcomes(runs, evals).iloc[0]["reason"] == "no target"
    out = bs.run_outcomes(runs, evals, targets={"autoencoder": ("mse", 0.05)}).iloc[0]
    assert (out["outcome"], out["steps_bracket_low"], out["steps_to_target"]) == (bs.REACHED, 10.0, 20.0)
