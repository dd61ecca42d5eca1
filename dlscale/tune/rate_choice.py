"""The learning-rate sweep's choice (``lr_scaling: {rule: tuned}``, ``dlscale.tune.rates``):
from the reference framework's runs of one model and global batch at each swept rate, the
rate every framework borrows.

Per rate: steps to the target with their interval over repeats (``batch_scaling``: the
median with non-reaching repeats counted as infinitely slow, so it exists only while more
than half reached the target). The choice is the rate with the fewest median steps among
the rates none of whose repeats diverged (MLPerf's reference convergence points are taken
at a stable rate: a rate that diverged once is a rate a borrowing framework may diverge
at); ties, common because evaluations quantise the steps, go to the tighter upper bound,
then to the rate nearer the linear rule's (the smaller change from the computed rule).
A rate must be borrowed whatever the sweep shows, so the choice is always made, but it says
"no clear best" (and ``clear_best`` is false) where another stable rate's interval overlaps
the chosen one's: the repeats cannot tell those rates apart, and the pick is a tie-break.
Where no rate qualifies, the linear rule's rate is borrowed and the choice says why, so
the study still runs and its tables show the batch that could not be trained.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dlscale.analysis import batch_scaling
from dlscale.analysis.tables import load_study
from dlscale.base import atomic

#: The sweep table's columns (rule lr_tuning_table; one row per model, batch and rate).
SWEEP_COLUMNS: tuple[str, ...] = (
    "model", "global_batch", "framework", "factor", "lr_rate", "target_metric", "target_value",
    "repeats", "reached", "not_reached", "diverged", "failed", "steps_to_target", "steps_low",
    "steps_high", "steps_interval", "bracket_steps", "chosen", "clear_best", "note",
)  # fmt: skip


def rate_rows(outcomes: pd.DataFrame, factors: Mapping[float, float]) -> pd.DataFrame:
    """Per swept rate (``factors``: rate -> its factor of the linear rule's rate): the
    steps table's row (``batch_scaling.steps_by_batch``) with its factor. A rate none of
    whose runs left events still gets a row (every repeat failed), so nothing disappears."""
    steps = batch_scaling.steps_by_batch(outcomes)
    rows = []
    for rate, factor in sorted(factors.items()):
        mine = steps[steps["lr_rate"].astype(float).sub(rate).abs().le(1e-12 * max(rate, 1.0))]
        if len(mine) > 1:
            raise ValueError(f"rate {rate:g}: runs of more than one model or batch: {len(mine)} rows")
        row: dict[str, Any] = mine.iloc[0].to_dict() if len(mine) else {"lr_rate": rate, "repeats": 0}
        row["factor"] = factor
        rows.append(row)
    return pd.DataFrame(rows)


def choose(rates: pd.DataFrame) -> tuple[float, str]:
    """The chosen rate and a sentence saying why (module docstring's rule)."""
    rate, why, _ = decide(rates)
    return rate, why


def decide(rates: pd.DataFrame) -> tuple[float, str, bool]:
    """The chosen rate, a sentence saying why and whether the sweep separates it from every
    other stable rate (module docstring's rule)."""
    stable = rates[
        rates["diverged"].fillna(0).eq(0)
        & rates["repeats"].fillna(0).gt(0)
        & pd.to_numeric(rates["steps_to_target"], errors="coerce").notna()
    ]
    if stable.empty:
        linear = rates.loc[(rates["factor"] - 1.0).abs().idxmin()]
        return (
            float(linear["lr_rate"]),
            (
                "no swept rate reached the target in more than half its repeats without diverging:"
                f" the linear rule's rate {float(linear['lr_rate']):g} is borrowed"
            ),
            False,
        )
    order = stable.assign(
        _distance=stable["factor"].map(lambda f: abs(math.log(f))),
        _high=pd.to_numeric(stable["steps_high"], errors="coerce").fillna(math.inf),
    ).sort_values(["steps_to_target", "_high", "_distance", "lr_rate"], kind="stable")
    best = order.iloc[0]
    why = f"fewest median steps to target: {best['steps_to_target']:g} [{best['steps_low']:g}, {best['steps_high']:g}]"
    if len(rates) > 1 and best["factor"] in (rates["factor"].min(), rates["factor"].max()):
        edge = "largest" if best["factor"] == rates["factor"].max() else "smallest"
        why += f"; the sweep's {edge} rate: a wider sweep may find a better one"
    others = order.iloc[1:]
    tied = others[others["steps_to_target"].eq(best["steps_to_target"])]
    if len(tied):
        why += f" (tied on the median with {', '.join(f'{r:g}' for r in tied['lr_rate'])}: the tighter interval, then the rate nearer the linear rule's)"
    overlapping = others[~_separated(best, others)]
    if len(overlapping):
        why += (
            f"; no clear best: the interval of {', '.join(f'{r:g}' for r in overlapping['lr_rate'])}"
            " overlaps the chosen rate's, so the repeats cannot tell them apart"
        )
    return float(best["lr_rate"]), why, overlapping.empty


def _separated(best: pd.Series, others: pd.DataFrame) -> pd.Series:
    """Per other rate: whether its interval lies wholly above the best's (a rate without an
    interval, one repeat, is never separated)."""
    high = float(best["steps_high"]) if pd.notna(best["steps_high"]) else math.nan
    low = pd.to_numeric(others["steps_low"], errors="coerce")
    return low.gt(high)  # NaN on either side compares False: not separated


def choice(
    paths: Sequence[str | os.PathLike[str]], model: str, global_batch: int, factors: Mapping[float, float]
) -> dict[str, Any]:
    """The choice of one (model, global batch) from its sweep's events files: every rate's
    row (``SWEEP_COLUMNS``) and the chosen rate."""
    # One file at a time: the sweep's runs at different rates share their run ids (the
    # rate is their folder's), which one study's tables refuse as a run counted twice.
    outcomes = pd.concat(
        [batch_scaling.run_outcomes(*_tables(path)) for path in sorted(paths, key=str)], ignore_index=True
    )
    wrong = outcomes[~outcomes["model"].eq(model) | ~outcomes["global_batch"].eq(global_batch)]
    if len(wrong):
        raise ValueError(
            f"{wrong['run_id'].iloc[0]} is no run of {model} at global batch {global_batch}: not this sweep's"
        )
    rates = rate_rows(outcomes, factors)
    rate, why, clear = decide(rates)
    chosen = rates["lr_rate"].astype(float).eq(rate)
    rates = rates.assign(
        model=model,
        global_batch=global_batch,
        chosen=chosen,
        clear_best=[clear if c else None for c in chosen],
        note=[why if r == rate else None for r in rates["lr_rate"].astype(float)],
    )
    table = rates.reindex(columns=list(SWEEP_COLUMNS))
    return {
        "model": model,
        "global_batch": global_batch,
        "chosen_rate": rate,
        "clear_best": clear,
        "why": why,
        "rates": [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in table.to_dict("records")
        ],
    }


def _tables(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(runs, evals, iterations) of one events file, as ``run_outcomes`` takes them."""
    runs, iterations, evals = load_study([path])
    return runs, evals, iterations


def write_choice(path: str | os.PathLike[str], made: Mapping[str, Any]) -> None:
    """The choice as JSON, written atomically (a rule's output)."""
    atomic.write_text(path, json.dumps(made, indent=1, sort_keys=True, default=float) + "\n")


def sweep_table(choices: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Every rate row of every choice (the report's table of the sweep)."""
    rows = [row for made in choices for row in made["rates"]]
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))
