"""Time and node-hours to target projected to ``projection.max_nodes``, per framework.

The throughput projection (``projection.csv``) gives each framework's step time at every
node count with a band; the study's runs give the steps to the target at each global
batch, fitted as S(B) (``dlscale.analysis.batch_scaling``). Their product is the time to
target at N nodes (``time_to_target.project``). The summary names, per framework, model
and learning-rate rule, the projected fastest node count, the node count beyond which
more nodes no longer shorten training within the band, and the held-out check: S(B)
calibrated on the smaller node counts, the largest measured node count's time to target
predicted and compared with what its runs measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import pandas as pd

from dlscale.analysis.batch_scaling import FAILED, fit_steps
from dlscale.perfmodel.time_to_target import PROJECTED_COLUMNS, held_out_check, project, stops_paying

KEYS: tuple[str, ...] = ("framework", "model", "lr_rule")
CURVE_COLUMNS: tuple[str, ...] = (*KEYS, "network", *PROJECTED_COLUMNS)
SUMMARY_COLUMNS: tuple[str, ...] = (
    *KEYS, "network", "batch_per_rank", "ranks_per_node", "b_noise", "b_noise_low", "b_noise_high",
    "fastest_nodes", "stops_paying_nodes", "held_out_nodes", "calibrated_on", "predicted_s",
    "predicted_lo", "predicted_hi", "measured_s", "measured_low", "measured_high", "measured_bracket_s",
    "relative_error", "within_band", "note",
)  # fmt: skip


def _groups(outcomes: pd.DataFrame) -> Iterator[tuple[tuple[str, str, str], pd.DataFrame]]:
    if outcomes.empty:  # no run had a target (the table has no columns then)
        return
    have = outcomes[outcomes["target_metric"].notna() & ~outcomes["outcome"].eq(FAILED)]
    for key, group in have.groupby(list(KEYS), sort=True):
        yield tuple(str(k) for k in key), group


def _step_times(projection: pd.DataFrame, framework: str, model: str) -> pd.DataFrame:
    """The framework's own set-up's step times for the model (its synchronous set-up: the
    set-up named after it, as the runs' cells are)."""
    if projection.empty:  # the scaling model projected nothing
        return projection
    return projection[
        projection["framework"].eq(framework)
        & projection["model"].eq(model)
        & projection["setup"].eq(framework)
    ]


def project_to_target(
    projection: pd.DataFrame, outcomes: pd.DataFrame, warmup_iterations: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curves, summary): the projected time and node-hours to target at every projected
    node count (``CURVE_COLUMNS``), and per framework, model and rule what they say
    (``SUMMARY_COLUMNS``). ``outcomes``: ``batch_scaling.run_outcomes`` rows;
    ``warmup_iterations``: the runs' un-timed warm-up steps (counted in S(B), not in time)."""
    curves, summary = [], []
    for (framework, model, rule), group in _groups(outcomes):
        steps = _step_times(projection, framework, model)
        batch_per_rank = int(group["batch_per_rank"].iloc[0])
        ranks = int(group["ranks_per_node"].iloc[0])
        row: dict[str, object] = dict(zip(KEYS, (framework, model, rule), strict=True))
        row.update(batch_per_rank=batch_per_rank, ranks_per_node=ranks, network=None)
        notes = []
        if group["batch_per_rank"].nunique() > 1 or group["ranks_per_node"].nunique() > 1:
            notes.append("runs of more than one batch per rank or ranks per node: projected from the first")
        fit = fit_steps(group)
        row.update(b_noise=fit.b_noise, b_noise_low=fit.b_noise_low, b_noise_high=fit.b_noise_high)
        if steps.empty:
            notes.append(f"no projected step time for {framework} {model}")
        elif not fit.fitted:
            notes.append(f"no S(B): {fit.refused}")
        else:
            row["network"] = str(steps["network"].iloc[0])
            curve = project(steps, fit, batch_per_rank, ranks, warmup_iterations=warmup_iterations)
            curves.append(
                curve.assign(**dict(zip(KEYS, (framework, model, rule), strict=True)), network=row["network"])
            )
            paying = stops_paying(curve)
            row.update(fastest_nodes=paying.fastest_nodes, stops_paying_nodes=paying.nodes)
        check = (
            held_out_check(group, steps, batch_per_rank, ranks, warmup_iterations)
            if not steps.empty
            else None
        )
        if check is not None:
            row.update({k: v for k, v in dataclasses.asdict(check).items() if k != "refused"})
            row["calibrated_on"] = ";".join(str(n) for n in check.calibrated_on)
            if check.refused:
                notes.append(f"held-out check: {check.refused}")
        row["note"] = "; ".join(notes) or None
        summary.append(row)
    curve_table = (
        pd.concat(curves, ignore_index=True)[list(CURVE_COLUMNS)]
        if curves
        else pd.DataFrame(columns=list(CURVE_COLUMNS))
    )
    summary_table = pd.DataFrame(summary, columns=list(SUMMARY_COLUMNS))
    for column in ("fastest_nodes", "stops_paying_nodes"):
        summary_table[column] = (
            summary_table[column].astype("float64").where(summary_table[column].notna(), math.nan)
        )
    return curve_table, summary_table
