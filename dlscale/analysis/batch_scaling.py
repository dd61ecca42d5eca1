"""Steps to a target quality against the global batch, and time and node-hours to it per
node count: how many nodes train a model fastest, and which train it cheapest.

Weak scaling grows the global batch with the nodes; whether that shortens training depends
on how many optimiser steps the larger batch still needs. Per run, from its eval events:

* **steps to target**: the ``iteration`` of the first evaluation at or past the target, in
  optimiser steps of the run's global batch, every step since the start counted (the
  timing warm-up trains too: ``evals.summarise``'s ``iterations_to_target``); samples are
  steps x global batch. Evaluations come every ``eval_every`` steps, so the true crossing
  lies in the **bracket** between the last evaluation below the target and the first at
  or past it (0 when the first evaluation already met it); every number carries it.
* **outcome**: ``reached``; ``not reached`` (censored: the run ended first); ``diverged``
  (``divergence`` below), which is never a number; ``failed`` (any other failure: not a
  repeat, as in every other table).

Per framework, model, learning-rate rule, rate and global batch: the median steps over
repeats with ``convergence.time_to_target_interval`` (``stats.median_interval``'s order
statistics from 6 repeats, the min-max range below, none for one; a repeat that did not
reach the target, diverged ones included, counts as infinitely slow, so the median exists
only while at most half of them failed to reach it). ``fit_steps`` fits McCandlish et al.'s
S(B) = S_min (1 + B_noise / B) over those medians, and ``node_winners`` names the node
count that trains fastest and the one that trains cheapest, by the verdicts' rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from dlscale import quality
from dlscale.analysis.convergence import NO_CLEAR_WINNER, time_to_target_interval
from dlscale.analysis.stats import BOOTSTRAP_SEED, Interval, separated
from dlscale.analysis.tables import LR_COLUMNS

REACHED = "reached"
NOT_REACHED = "not reached"
DIVERGED = "diverged"
FAILED = "failed"

#: A loss above this many times the rank's first finite loss has exploded: cross-entropy
#: starts near ln(classes) and a reconstruction MSE near the data's variance, so a tenfold
#: rise is no plateau or noise but a run that left its basin.
LOSS_EXPLOSION_FACTOR = 10.0

#: The learning-rate columns every run records (run_start and runs.csv).
#: What identifies a set-up apart from its node count and batch.
SETUP_KEYS: tuple[str, ...] = ("framework", "model", "network", "ranks_per_node", "batch_per_rank")

OUTCOME_COLUMNS: tuple[str, ...] = (
    "run_id", "framework", "model", "network", "nodes", "ranks_per_node", "batch_per_rank",
    "global_batch", "repeat", "contended", *LR_COLUMNS, "target_metric", "target_value", "outcome", "reason",
    "evals", "steps_to_target", "steps_bracket_low", "samples_to_target", "samples_bracket_low",
    "time_to_target_s", "time_bracket_low_s", "wall_to_target_s", "node_hours",
)  # fmt: skip
STEPS_COLUMNS: tuple[str, ...] = (
    "framework", "model", "lr_rule", "lr_rate", "global_batch", "target_metric", "target_value",
    "repeats", "reached", "not_reached", "diverged", "failed", "steps_to_target", "steps_low",
    "steps_high", "steps_interval", "samples_to_target", "samples_low", "samples_high", "bracket_steps",
)  # fmt: skip
NODES_COLUMNS: tuple[str, ...] = (
    *SETUP_KEYS, "lr_rule", "nodes", "global_batch", "target_metric", "target_value", "repeats",
    "reached", "not_reached", "diverged", "time_to_target_s", "time_low", "time_high",
    "time_interval", "bracket_s", "node_hours", "node_hours_low", "node_hours_high",
    "contended_runs", "excluded",
)  # fmt: skip
WINNER_COLUMNS: tuple[str, ...] = (
    *SETUP_KEYS, "lr_rule", "target_metric", "target_value", "node_counts", "fastest", "fastest_nodes",
    "fastest_time_s", "fastest_low", "fastest_high", "cheapest", "cheapest_nodes", "cheapest_node_hours",
    "cheapest_low", "cheapest_high", "note",
)  # fmt: skip

NO_NODE_COUNT = "n/a (no node count reached the target)"


def divergence(losses: pd.DataFrame, reason: str | None = None) -> tuple[float, str] | None:
    """Whether (and from which iteration) one run diverged, from its iteration events'
    losses (columns ``rank``, ``iteration``, ``loss``; a null loss is NaN) and its failure
    reason; None when it did not.

    The rule, per rank in iteration order: a non-finite loss (the events write NaN and inf
    as null, so a rank whose losses turn null after a finite one and stay null counts too:
    a rank that never reports a loss does not); or a finite loss above
    ``LOSS_EXPLOSION_FACTOR`` times the rank's first finite loss; or a failure reason that
    names a non-finite loss (the runner stopped on it). The earliest such iteration counts
    (NaN where only the reason tells).
    """
    found: list[tuple[float, str]] = []
    for rank, rows in losses.sort_values("iteration", kind="stable").groupby("rank", sort=True):
        loss = pd.to_numeric(rows["loss"], errors="coerce").to_numpy(dtype="float64")
        iterations = rows["iteration"].to_numpy()
        finite = np.isfinite(loss)
        if not finite.any():
            continue
        first = float(loss[finite][0])
        trailing_null = np.isnan(loss) & (np.arange(len(loss)) > np.nonzero(finite)[0][-1])
        bad = np.nonzero(np.isinf(loss) | trailing_null)[0]
        if len(bad):
            found.append(
                (
                    float(iterations[bad[0]]),
                    f"loss not finite at iteration {iterations[bad[0]]} on rank {rank}",
                )
            )
        high = np.nonzero(finite & (loss > LOSS_EXPLOSION_FACTOR * abs(first)))[0]
        if len(high) and first != 0:
            i = high[0]
            found.append(
                (
                    float(iterations[i]),
                    f"loss exploded at iteration {iterations[i]} on rank {rank}: {loss[i]:.3g} >"
                    f" {LOSS_EXPLOSION_FACTOR:g} x the first {first:.3g}",
                )
            )
    if found:
        return min(found, key=lambda f: f[0])
    if quality.says_diverged(reason):
        return math.nan, reason
    return None


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _failed(run: Mapping[str, Any]) -> bool:
    status = run.get("status")
    return isinstance(status, str) and status != "ok"


def _warmup_seconds(iterations: pd.DataFrame) -> float:
    """Rank 0's warm-up step seconds (outside the training clock, inside the allocation)."""
    if iterations.empty or "warmup" not in iterations:
        return 0.0
    warm = iterations[iterations["warmup"].eq(True) & iterations["rank"].eq(0)]
    return float(pd.to_numeric(warm["step_s"], errors="coerce").fillna(0.0).sum())


def run_outcomes(
    runs: pd.DataFrame,
    evals: pd.DataFrame,
    iterations: pd.DataFrame | None = None,
    targets: Mapping[str, tuple[str, float]] | None = None,
) -> pd.DataFrame:
    """Per run (rows of the runs table, ``tables.RUN_COLUMNS`` with ``LR_COLUMNS``): its
    outcome against the target, steps, samples and time to it with their brackets, and
    node-hours to it (``OUTCOME_COLUMNS``).

    ``evals``: the evals table (``evals.EVAL_COLUMNS``); ``iterations``: the iterations
    table for the losses (``divergence``) and warm-up seconds; ``targets``: model ->
    (metric, value), else each run's own ``target_metric`` / ``target_value``.

    Time to target is the training clock (``train_s`` of the crossing evaluation, warm-up
    and evaluations excluded, as ``evals.summarise``). **Node-hours** charge what the run
    held its nodes for until the target: ``nodes x wall_to_target_s / 3600``, where
    ``wall_to_target_s`` = start-up (``startup_s``, 0 where unknown) + warm-up steps
    (rank 0's, 0 without ``iterations``) + ``train_s`` at the crossing + the evaluations up
    to and including it.
    """
    iterations = iterations if iterations is not None else pd.DataFrame(columns=["run_id"])
    evals_by_run = dict(tuple(evals.groupby("run_id", sort=False))) if len(evals) else {}
    iters_by_run = dict(tuple(iterations.groupby("run_id", sort=False))) if len(iterations) else {}
    rows = []
    for run in runs.to_dict("records"):
        row = {c: run.get(c) for c in OUTCOME_COLUMNS}
        metric, value = (targets or {}).get(
            str(run["model"]), (run.get("target_metric"), run.get("target_value"))
        )
        row.update(
            target_metric=metric,
            target_value=_number(value),
            outcome=None,
            reason=None,
            evals=0,
            **{c: math.nan for c in OUTCOME_COLUMNS[OUTCOME_COLUMNS.index("steps_to_target") :]},
        )
        has_target = isinstance(metric, str) and bool(metric) and not math.isnan(row["target_value"])
        mine = evals_by_run.get(run["run_id"], pd.DataFrame(columns=["metric", "iteration", "value"]))
        mine = (
            mine[mine["metric"].eq(metric)].sort_values("iteration", kind="stable")
            if has_target
            else mine.iloc[0:0]
        )
        row["evals"] = len(mine)
        losses = iters_by_run.get(run["run_id"], pd.DataFrame(columns=["rank", "iteration", "loss"]))
        diverged = divergence(losses, str(run.get("reason") or ""))
        if diverged is None and run.get("status") == DIVERGED:
            diverged = (math.nan, str(run.get("reason") or "the run says it diverged"))
        met = [quality.meets(str(metric), float(v), row["target_value"]) for v in mine["value"]]
        first = met.index(True) if True in met else None
        crossing = int(mine["iteration"].iloc[first]) if first is not None else None
        if diverged is not None and not (crossing is not None and diverged[0] > crossing):
            row.update(outcome=DIVERGED, reason=diverged[1])
        elif _failed(run):
            row.update(outcome=FAILED, reason=run.get("reason"))
        elif not has_target:
            row.update(outcome=None, reason="no target")
        elif crossing is None:
            row.update(
                outcome=NOT_REACHED,
                reason=f"{len(mine)} evaluation(s), none at {metric} {row['target_value']:g}",
            )
        else:
            batch = _number(run.get("global_batch"))
            hit, below = mine.iloc[first], (mine.iloc[first - 1] if first > 0 else None)
            wall = (
                np.nan_to_num(_number(run.get("startup_s")))
                + _warmup_seconds(losses)
                + float(hit["train_s"])
                + float(pd.to_numeric(mine["eval_s"].iloc[: first + 1], errors="coerce").fillna(0.0).sum())
            )
            row.update(
                outcome=REACHED,
                steps_to_target=float(crossing),
                steps_bracket_low=float(below["iteration"]) if below is not None else 0.0,
                time_to_target_s=float(hit["train_s"]),
                time_bracket_low_s=float(below["train_s"]) if below is not None else 0.0,
                wall_to_target_s=wall,
                node_hours=_number(run.get("nodes")) * wall / 3600.0,
            )
            row["samples_to_target"] = row["steps_to_target"] * batch
            row["samples_bracket_low"] = row["steps_bracket_low"] * batch
        rows.append(row)
    return pd.DataFrame(rows, columns=list(OUTCOME_COLUMNS))


def censored(outcomes: pd.DataFrame, column: str) -> np.ndarray:
    """Per repeat: its value where it reached the target, inf where it did not (diverged
    included); failed runs are no repeats."""
    counted = outcomes[~outcomes["outcome"].eq(FAILED)]
    return np.where(counted["outcome"].eq(REACHED), pd.to_numeric(counted[column], errors="coerce"), np.inf)


def _counts(group: pd.DataFrame) -> dict[str, int]:
    outcome = group["outcome"]
    return {
        "repeats": int((~outcome.eq(FAILED)).sum()),
        "reached": int(outcome.eq(REACHED).sum()),
        "not_reached": int(outcome.eq(NOT_REACHED).sum()),
        "diverged": int(outcome.eq(DIVERGED).sum()),
    }


def _with_target(outcomes: pd.DataFrame) -> pd.DataFrame:
    return outcomes[outcomes["target_metric"].notna() & outcomes["outcome"].notna()]


def flag(table: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column (missing values, or a table without it: False)."""
    if column not in table:
        return pd.Series(False, index=table.index)
    return table[column].fillna(False).astype(bool)


def median_bracket(reached: pd.DataFrame, value: str, below: str) -> float:
    """The median width of the evaluation bracket of the runs that reached the target."""
    return float(np.median(reached[value] - reached[below])) if len(reached) else math.nan


def steps_by_batch(outcomes: pd.DataFrame) -> pd.DataFrame:
    """Per framework, model, learning-rate rule, rate and global batch: median steps (and
    samples) to target over repeats with their interval (module docstring), the counts of
    each outcome, and the median quantisation bracket of the runs that reached it
    (``STEPS_COLUMNS``). The rate is a key so a rate sweep at one batch stays apart."""
    keys = ["framework", "model", "lr_rule", "lr_rate", "global_batch", "target_metric", "target_value"]
    have = _with_target(outcomes)
    rows = []
    for key, group in have.groupby(keys, sort=True, dropna=False):
        row: dict[str, Any] = dict(zip(keys, key, strict=True)) | _counts(group)
        row["failed"] = int(group["outcome"].eq(FAILED).sum())
        steps = time_to_target_interval(censored(group, "steps_to_target"))
        batch = _number(row["global_batch"])
        reached = group[group["outcome"].eq(REACHED)]
        row.update(
            steps_to_target=steps.value,
            steps_low=steps.low,
            steps_high=steps.high,
            steps_interval=steps.method,
            samples_to_target=steps.value * batch,
            samples_low=steps.low * batch,
            samples_high=steps.high * batch,
            bracket_steps=median_bracket(reached, "steps_to_target", "steps_bracket_low"),
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=list(STEPS_COLUMNS))


def steps_curve(batch: Any, s_min: float, b_noise: float) -> np.ndarray:
    """S(B) = S_min (1 + B_noise / B) (McCandlish et al. 2018, "An Empirical Model of
    Large-Batch Training"): steps to a target at global batch B."""
    return s_min * (1.0 + b_noise / np.asarray(batch, dtype="float64"))


#: Percentiles of the bootstrap band (a 95 % band, as the throughput projection's).
BAND = (2.5, 97.5)
FIT_RESAMPLES = 1000


@dataclass
class StepsFit:
    """S(B) fitted to one framework, model and rule; ``refused`` says why there are no
    numbers. ``replicates``: (S_min, B_noise) per bootstrap replicate that could be fitted."""

    s_min: float = math.nan
    b_noise: float = math.nan
    b_noise_low: float = math.nan
    b_noise_high: float = math.nan
    batches: tuple[float, ...] = ()
    left_out: tuple[str, ...] = ()
    diverged_batches: tuple[float, ...] = ()
    replicates: np.ndarray = field(default_factory=lambda: np.empty((0, 2)))
    resamples: int = 0
    refused: str | None = None
    points: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def fitted(self) -> bool:
        return self.refused is None

    def steps(self, batch: Any) -> np.ndarray:
        """S(B) at ``batch`` (one value or an array)."""
        return steps_curve(batch, self.s_min, self.b_noise)

    def band(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        """The bootstrap band of S(B) at ``batch``: percentiles ``BAND`` over the replicates
        (the point itself where no replicate varies)."""
        b = np.atleast_1d(np.asarray(batch, dtype="float64"))
        if not len(self.replicates):
            point = self.steps(b)
            return point, point
        curves = steps_curve(b[None, :], self.replicates[:, :1], self.replicates[:, 1:])
        return np.percentile(curves, BAND[0], axis=0), np.percentile(curves, BAND[1], axis=0)


def _least_squares(batches: np.ndarray, steps: np.ndarray) -> tuple[float, float] | None:
    """(S_min, B_noise) by least squares on log steps, the parameters as logs so they stay
    positive: relative errors, since steps at small batches are many and vary by as many
    more in absolute terms. The start: S = a + b / B is linear in (a, b)."""
    design = np.column_stack([np.ones_like(batches), 1.0 / batches])
    (a, b), *_ = np.linalg.lstsq(design, steps, rcond=None)
    a = a if a > 0 else float(steps.min()) / 2.0
    b_noise0 = max(b / a, float(batches.min()) * 1e-3) if b > 0 else float(batches.min())
    x0 = np.log([a, b_noise0])

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(steps_curve(batches, math.exp(x[0]), math.exp(x[1]))) - np.log(steps)

    result = optimize.least_squares(residuals, x0, method="lm")
    if not result.success or not np.all(np.isfinite(result.x)):
        return None
    return float(math.exp(result.x[0])), float(math.exp(result.x[1]))


#: Distinct global batches the reported fit needs: two determine S_min and B_noise
#: exactly, a third leaves a residual that says whether the curve describes the runs.
FIT_MIN_BATCHES = 3


def fit_steps(
    outcomes: pd.DataFrame,
    resamples: int = FIT_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    drop_diverged: bool = True,
    min_batches: int = FIT_MIN_BATCHES,
) -> StepsFit:
    """Fit S(B) over the per-batch median steps of one framework, model and rule (rows of
    ``run_outcomes``), with a bootstrap band: ``resamples`` times, each batch's repeats are
    drawn with replacement (``numpy.random.default_rng(seed)``: reproducible) and the
    curve refitted; B_noise's interval and the band are the replicates' percentiles
    ``BAND``. A replicate in which some batch's median is censored (more than half of its
    draws did not reach the target) is not fitted: ``resamples`` counts those that were.

    Refused (``refused`` says why, no numbers) with fewer than ``min_batches`` distinct
    batches (a held-out check, which predicts a point it then compares, takes 2), with a
    batch none of whose repeats reached the target, a batch whose median is censored, or
    more than one rate at a batch (a sweep: choose one rate per batch first). With
    ``drop_diverged``, a batch whose every repeat diverged is left out first and listed in
    ``diverged_batches``: that marks where the rule's rate stops being stable, not the
    gradient noise scale the curve measures.
    """
    fit = StepsFit()
    have = _with_target(outcomes)
    have = have[~have["outcome"].eq(FAILED)]
    groups = have.groupby(["framework", "model", "lr_rule"], dropna=False).ngroups
    if groups > 1:
        fit.refused = "runs of more than one framework, model or learning-rate rule: fit each apart"
        return fit
    by_batch: dict[float, np.ndarray] = {}
    left_out: list[str] = []
    for batch, group in have.groupby("global_batch", sort=True):
        rates = group["lr_rate"].dropna().unique() if "lr_rate" in group else []
        if len(rates) > 1:
            fit.refused = (
                f"batch {batch:g} was trained at {len(rates)} rates (a sweep): choose one rate per batch"
            )
            return fit
        if drop_diverged and group["outcome"].eq(DIVERGED).all():
            fit.diverged_batches += (float(batch),)
            left_out.append(f"batch {batch:g}: every repeat diverged")
            continue
        by_batch[float(batch)] = censored(group, "steps_to_target")
    fit.left_out = tuple(left_out)
    fit.points = steps_by_batch(have[have["global_batch"].astype("float64").isin(list(by_batch))])
    if len(by_batch) < max(min_batches, 2):
        fit.refused = f"{len(by_batch)} batch(es) with runs ({', '.join(f'{b:g}' for b in by_batch) or 'none'}): S(B) needs {max(min_batches, 2)} or more distinct global batches"
        return fit
    for batch, values in by_batch.items():
        if not np.isfinite(values).any():
            fit.refused = f"batch {batch:g}: no repeat reached the target, so its steps are unknown"
            return fit
        if not math.isfinite(time_to_target_interval(values).value):
            fit.refused = (
                f"batch {batch:g}: more than half of its repeats did not reach the target (censored median)"
            )
            return fit
    batches = np.array(list(by_batch))
    medians = np.array([np.median(v) for v in by_batch.values()])
    point = _least_squares(batches, medians)
    if point is None:
        fit.refused = "the least-squares fit did not converge"
        return fit
    fit.s_min, fit.b_noise = point
    fit.batches = tuple(float(b) for b in batches)
    rng = np.random.default_rng(seed)
    replicates = []
    for _ in range(resamples):
        drawn = np.array([np.median(v[rng.integers(0, len(v), len(v))]) for v in by_batch.values()])
        if not np.all(np.isfinite(drawn)):
            continue
        refit = _least_squares(batches, drawn)
        if refit is not None:
            replicates.append(refit)
    fit.replicates = np.array(replicates).reshape(-1, 2)
    fit.resamples = len(replicates)
    if len(replicates):
        fit.b_noise_low, fit.b_noise_high = (float(v) for v in np.percentile(fit.replicates[:, 1], BAND))
    return fit


FIT_POINT_COLUMNS: tuple[str, ...] = (
    "global_batch", "steps_to_target", "steps_low", "steps_high", "fit_steps", "band_low", "band_high",
    "leaves_band", "regime",
)  # fmt: skip
PERFECT = "near-perfect scaling"
DIMINISHING = "diminishing returns"


def fit_points(fit: StepsFit) -> pd.DataFrame:
    """Per measured batch: its median steps with interval, the fit and its band there,
    whether the measured interval leaves the band (``above``: more steps than the curve
    says, ``below``: fewer; a single repeat's point is judged by itself) and its regime:
    below B_noise each doubling of the batch still saves most of the steps (near-perfect
    scaling), from B_noise on (where S = 2 S_min) it saves at most half (diminishing
    returns). Empty for a refused fit."""
    if not fit.fitted or fit.points.empty:
        return pd.DataFrame(columns=list(FIT_POINT_COLUMNS))
    points = fit.points.copy()
    batches = points["global_batch"].to_numpy(dtype="float64")
    low, high = fit.band(batches)
    points["fit_steps"] = fit.steps(batches)
    points["band_low"], points["band_high"] = low, high
    measured_low = points["steps_low"].fillna(points["steps_to_target"])
    measured_high = points["steps_high"].fillna(points["steps_to_target"])
    points["leaves_band"] = np.where(
        measured_low > high, "above", np.where(measured_high < low, "below", None)
    )
    points["regime"] = np.where(batches < fit.b_noise, PERFECT, DIMINISHING)
    return points[list(FIT_POINT_COLUMNS)].reset_index(drop=True)


def time_by_nodes(outcomes: pd.DataFrame) -> pd.DataFrame:
    """Per set-up (``SETUP_KEYS``), rule and node count: median time to target (training
    clock) and node-hours over repeats with intervals (module docstring: a repeat that did
    not reach the target is infinitely slow and costly), the median quantisation bracket in
    seconds, and the counts of each outcome (``NODES_COLUMNS``).

    Seconds are the cells' kind of number: a repeat whose host was busy with other work
    (``contended``) is left out of them while the node count has uncontended repeats, and
    a node count whose every repeat was contended keeps its numbers but is ``excluded``:
    it never wins (``node_winners``). Steps to target do not depend on the host's load and
    count every repeat (``steps_by_batch``)."""
    keys = [*SETUP_KEYS, "lr_rule", "nodes", "global_batch", "target_metric", "target_value"]
    have = _with_target(outcomes)
    rows = []
    for key, group in have.groupby(keys, sort=True, dropna=False):
        row: dict[str, Any] = dict(zip(keys, key, strict=True)) | _counts(group)
        busy = flag(group, "contended")
        timed = group[~busy] if (~busy).any() else group
        time = time_to_target_interval(censored(timed, "time_to_target_s"))
        cost = time_to_target_interval(censored(timed, "node_hours"))
        reached = timed[timed["outcome"].eq(REACHED)]
        row.update(contended_runs=int(busy.sum()), excluded=bool(len(group) and busy.all()))
        row.update(
            time_to_target_s=time.value,
            time_low=time.low,
            time_high=time.high,
            time_interval=time.method,
            bracket_s=median_bracket(reached, "time_to_target_s", "time_bracket_low_s"),
            node_hours=cost.value,
            node_hours_low=cost.low,
            node_hours_high=cost.high,
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=list(NODES_COLUMNS))


def _pick(
    candidates: Sequence[tuple[int, Interval]], unit: str
) -> tuple[str, int | None, Interval | None, str | None]:
    """The verdicts' rule over node counts: the lowest median wins only when its interval
    lies wholly below every other's; otherwise no clear winner (the leader still named)."""
    if not candidates:
        return NO_NODE_COUNT, None, None, None
    ordered = sorted(candidates, key=lambda c: (c[1].value, c[0]))
    nodes, lead = ordered[0]
    overlapping = [(n, iv) for n, iv in ordered[1:] if not separated(lead, iv, higher=False)]
    if not overlapping:
        return str(nodes), nodes, lead, None
    shown = "; ".join(f"{n} nodes {iv.value:.3g} [{iv.low:.3g}, {iv.high:.3g}]" for n, iv in overlapping)
    note = f"{unit}: {nodes} nodes {lead.value:.3g} [{lead.low:.3g}, {lead.high:.3g}] overlaps {shown}"
    return NO_CLEAR_WINNER, nodes, lead, note


def node_winners(by_nodes: pd.DataFrame) -> pd.DataFrame:
    """Per set-up and rule: the node count that trains fastest (time to target) and the one
    that trains cheapest (node-hours), each named only where its interval separates it
    from every other node count's (``stats.separated``), else ``NO_CLEAR_WINNER`` with the
    leader in ``*_nodes``. A node count without a median time (no repeat, or too few,
    reached the target: diverged ones count as not reaching) never competes; a target no
    node count reached gives ``NO_NODE_COUNT`` and no node count (``WINNER_COLUMNS``)."""
    keys = [*SETUP_KEYS, "lr_rule", "target_metric", "target_value"]
    rows = []
    for key, group in by_nodes.groupby(keys, sort=True, dropna=False):
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row["node_counts"] = ";".join(str(int(n)) for n in sorted(group["nodes"]))
        notes = [
            f"{int(g.nodes)} nodes: no median time to target ({g.reached} of {g.repeats} reached it, {g.diverged} diverged)"
            for g in group.itertuples()
            if not math.isfinite(g.time_to_target_s)
        ]
        excluded = flag(group, "excluded")
        notes += [
            f"{int(g.nodes)} nodes: every repeat ran beside other work (contended): its seconds decide nothing"
            for g in group[excluded].itertuples()
        ]
        ok = group[np.isfinite(group["time_to_target_s"].astype("float64")) & ~excluded]
        for name, column, low, high, unit in (
            ("fastest", "time_to_target_s", "time_low", "time_high", "time to target (s)"),
            ("cheapest", "node_hours", "node_hours_low", "node_hours_high", "node-hours"),
        ):
            candidates = [
                (int(r["nodes"]), Interval(float(r[column]), float(r[low]), float(r[high]), ""))
                for _, r in ok.iterrows()
            ]
            verdict, nodes, lead, note = _pick(candidates, unit)
            if not candidates and excluded.any():  # they reached it, on a busy host: undecided
                verdict = NO_CLEAR_WINNER
            value_column = "fastest_time_s" if name == "fastest" else "cheapest_node_hours"
            row.update(
                {
                    name: verdict,
                    f"{name}_nodes": nodes,
                    value_column: lead.value if lead else math.nan,
                    f"{name}_low": lead.low if lead else math.nan,
                    f"{name}_high": lead.high if lead else math.nan,
                }
            )
            if note:
                notes.append(note)
        row["note"] = "; ".join(notes) or None
        rows.append(row)
    return pd.DataFrame(rows, columns=list(WINNER_COLUMNS))
