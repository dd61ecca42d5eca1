"""How many nodes to a trained model: the study's tables that answer it.

What a centre decides is which framework, on how many nodes, reaches the quality it needs
fastest and for the fewest node-hours. Under a declared learning-rate rule (config
``lr_scaling``) the answer has two factors, and the study measures both: the steps to the
target at each global batch (a property of the model's statistics and the rule, fitted as
S(B) = S_min (1 + B_noise / B), McCandlish et al. 2018) and each framework's step time at
each node count. ``dlscale.analysis.batch_scaling`` computes them from the runs, evals and
iterations tables; this module puts them into the four tables the aggregation writes:

- ``target_runs``: every run's outcome (reached, not reached, diverged, failed), its steps,
  samples, time and node-hours to the target with the evaluation bracket;
- ``steps_to_target``: per framework, model, rule, rate and global batch, the median steps
  with their interval, and where the fit puts the batch (its band, the regime);
- ``batch_fit``: per framework, model and rule, S_min and the critical batch B_noise with
  its bootstrap interval, or why no curve was fitted;
- ``nodes_to_target``: per set-up, rule and node count, time and node-hours to target with
  intervals, and per set-up the node count that trains fastest and the one that trains
  cheapest, or "no clear winner".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from dlscale import catalog
from dlscale.analysis import batch_scaling

#: One S(B) curve per framework, model and rule.
FIT_KEYS: tuple[str, ...] = ("framework", "model", "lr_rule")
FIT_COLUMNS: tuple[str, ...] = (
    *FIT_KEYS, "batches", "s_min", "b_noise", "b_noise_low", "b_noise_high", "resamples",
    "diverged_batches", "refused",
)  # fmt: skip
STEPS_COLUMNS: tuple[str, ...] = (
    *batch_scaling.STEPS_COLUMNS, "fit_steps", "band_low", "band_high", "leaves_band", "regime",
    "reference_check",
)  # fmt: skip
NODES_COLUMNS: tuple[str, ...] = (
    *batch_scaling.NODES_COLUMNS, "fastest", "cheapest", "winner_note",
)  # fmt: skip


@dataclass(frozen=True)
class NodesToTarget:
    """The four tables (module docstring)."""

    target_runs: pd.DataFrame
    steps_to_target: pd.DataFrame
    batch_fit: pd.DataFrame
    nodes_to_target: pd.DataFrame


def fits(outcomes: pd.DataFrame) -> dict[tuple[str, str, str], batch_scaling.StepsFit]:
    """S(B) for every framework, model and rule with a target (fitted or refused)."""
    have = outcomes[outcomes["target_metric"].notna()] if len(outcomes) else outcomes
    return {
        tuple(str(k) for k in key): batch_scaling.fit_steps(group)
        for key, group in have.groupby(list(FIT_KEYS), sort=True, dropna=False)
    }


def _fit_row(key: tuple[str, str, str], fit: batch_scaling.StepsFit) -> dict[str, object]:
    return {
        **dict(zip(FIT_KEYS, key, strict=True)),
        "batches": ";".join(f"{b:g}" for b in fit.batches),
        "s_min": fit.s_min,
        "b_noise": fit.b_noise,
        "b_noise_low": fit.b_noise_low,
        "b_noise_high": fit.b_noise_high,
        "resamples": fit.resamples,
        "diverged_batches": ";".join(f"{b:g}" for b in fit.diverged_batches),
        "refused": fit.refused,
    }


def _with_fit_points(
    steps: pd.DataFrame, curves: Mapping[tuple[str, str, str], batch_scaling.StepsFit]
) -> pd.DataFrame:
    """The steps table with each batch's place on its curve (empty where none was fitted)."""
    points = [
        batch_scaling.fit_points(fit).assign(**dict(zip(FIT_KEYS, key, strict=True)))
        for key, fit in curves.items()
        if fit.fitted
    ]
    extra = ["fit_steps", "band_low", "band_high", "leaves_band", "regime"]
    steps = steps.assign(reference_check=reference_check(steps))
    if not points or steps.empty:
        return steps.assign(**{c: math.nan for c in extra})[list(STEPS_COLUMNS)]
    placed = pd.concat(points, ignore_index=True)[[*FIT_KEYS, "global_batch", *extra]]
    keys = [*FIT_KEYS, "global_batch"]
    steps = steps.astype({"global_batch": "float64"})
    placed = placed.astype({"global_batch": "float64"})
    merged = steps.merge(placed, on=keys, how="left", validate="many_to_one")
    return merged[list(STEPS_COLUMNS)]


#: reference_check's words. A framework that needs fewer steps than the reference beyond
#: both intervals is flagged, not crowned (MLPerf's reference-convergence-point check):
#: the same optimisation on the same batches cannot need fewer steps, so it did other work.
REFERENCE_ROW = "reference"
NO_REFERENCE = "n/a: no reference run at this batch and rate"
FASTER_THAN_REFERENCE = "flagged: fewer steps than the reference beyond both intervals"
SLOWER_THAN_REFERENCE = "more steps than the reference beyond both intervals"
WITHIN_REFERENCE = "within the reference's interval"
NO_INTERVAL = "n/a: no interval on one side (a single repeat): cannot decide"


def reference_check(steps: pd.DataFrame) -> pd.Series:
    """Per steps row, against the reference framework's (``catalog.PARITY_REFERENCE``) row
    of the same model, rule, rate, global batch and target: flagged where it converged
    faster beyond both intervals (module constants)."""
    keys = ["model", "lr_rule", "lr_rate", "global_batch", "target_metric", "target_value"]
    reference = {
        tuple(row[k] for k in keys): row
        for row in steps[steps["framework"].eq(catalog.PARITY_REFERENCE)].to_dict("records")
    }
    words = []
    for row in steps.to_dict("records"):
        ref = reference.get(tuple(row[k] for k in keys))
        if row["framework"] == catalog.PARITY_REFERENCE:
            words.append(REFERENCE_ROW)
        elif ref is None or not (
            math.isfinite(ref["steps_to_target"]) and math.isfinite(row["steps_to_target"])
        ):
            words.append(NO_REFERENCE)
        elif not all(math.isfinite(float(r[k])) for r in (row, ref) for k in ("steps_low", "steps_high")):
            words.append(NO_INTERVAL)
        elif row["steps_high"] < ref["steps_low"]:
            words.append(FASTER_THAN_REFERENCE)
        elif row["steps_low"] > ref["steps_high"]:
            words.append(SLOWER_THAN_REFERENCE)
        else:
            words.append(WITHIN_REFERENCE)
    return pd.Series(words, index=steps.index, dtype=object)


def _with_winners(by_nodes: pd.DataFrame) -> pd.DataFrame:
    """Each node-count row with its set-up's fastest and cheapest verdicts (one home for
    the winner: ``batch_scaling.node_winners``; repeated on every row of the set-up so a
    reader of one row sees it)."""
    winners = batch_scaling.node_winners(by_nodes)
    keys = [*batch_scaling.SETUP_KEYS, "lr_rule", "target_metric", "target_value"]
    if by_nodes.empty:
        return by_nodes.assign(fastest=None, cheapest=None, winner_note=None)[list(NODES_COLUMNS)]
    verdicts = winners[[*keys, "fastest", "cheapest", "note"]].rename(columns={"note": "winner_note"})
    merged = by_nodes.merge(verdicts, on=keys, how="left", validate="many_to_one")
    return merged[list(NODES_COLUMNS)]


def nodes_to_target(
    runs: pd.DataFrame, evals: pd.DataFrame, iterations: pd.DataFrame | None = None
) -> NodesToTarget:
    """The four tables from the runs (with their learning-rate columns), evals and
    iterations tables of a study."""
    outcomes = batch_scaling.run_outcomes(runs, evals, iterations)
    curves = fits(outcomes)
    batch_fit = pd.DataFrame([_fit_row(k, f) for k, f in curves.items()], columns=list(FIT_COLUMNS))
    steps = _with_fit_points(batch_scaling.steps_by_batch(outcomes), curves)
    by_nodes = _with_winners(batch_scaling.time_by_nodes(outcomes))
    return NodesToTarget(outcomes, steps, batch_fit, by_nodes)
