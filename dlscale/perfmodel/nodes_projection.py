"""Time and node-hours to target projected to ``projection.max_nodes``, per framework.

The throughput projection (``projection.csv``) gives each framework's step time at every
node count with a band; the study's runs give the steps to the target at each global
batch, fitted as S(B) (``dlscale.analysis.batch_scaling``). Their product is the time to
target at N nodes (``time_to_target.project``). The summary names, per framework, model
and learning-rate rule, the projected fastest node count, the node count beyond which
more nodes no longer shorten training within the band, and two held-out checks: the time
to target at one measured node count predicted from S(B) calibrated on the others and the
step time of the scaling model on the host that ran the runs (``host_steps``: the model on
this host's loopback, nodes with cores of their own; held out where the runs had a core
per rank), and S(B) alone extrapolated from the smaller batches to the largest measured one
(independent of any host: what the projection's extrapolation of steps is worth).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import pandas as pd

from dlscale.analysis.batch_scaling import FAILED, fit_steps
from dlscale.perfmodel.time_to_target import (
    PROJECTED_COLUMNS,
    held_out_check,
    project,
    steps_held_out,
    stops_paying,
)

KEYS: tuple[str, ...] = ("framework", "model", "lr_rule")
CURVE_COLUMNS: tuple[str, ...] = (*KEYS, "network", *PROJECTED_COLUMNS)
SUMMARY_COLUMNS: tuple[str, ...] = (
    *KEYS, "network", "batch_per_rank", "ranks_per_node", "b_noise", "b_noise_low", "b_noise_high",
    "fastest_nodes", "stops_paying_nodes", "held_out_nodes", "calibrated_on", "predicted_s",
    "predicted_lo", "predicted_hi", "measured_s", "measured_low", "measured_high", "measured_bracket_s",
    "relative_error", "within_band", "held_out_step_time", "steps_held_out_batch", "steps_predicted",
    "steps_measured", "steps_measured_low", "steps_measured_high", "steps_relative_error", "not_projected",
    "note",
)  # fmt: skip
#: Where the held-out check's step time comes from, by input (``held_out_step_time``).
HOST_STEP_TIME = "the model on this host (loopback, a core per rank)"
PROJECTED_STEP_TIME = "the projection's network (no host model given)"


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


def _host_cores(host_steps: pd.DataFrame) -> int:
    """The cores of the host the model's step times are for (0: unknown)."""
    if host_steps.empty or "host_cores" not in host_steps:
        return 0
    cores = pd.to_numeric(host_steps["host_cores"], errors="coerce").max()
    return int(cores) if math.isfinite(cores) and cores > 0 else 0


def project_to_target(
    projection: pd.DataFrame,
    outcomes: pd.DataFrame,
    warmup_iterations: int = 0,
    host_steps: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curves, summary): the projected time and node-hours to target at every projected
    node count (``CURVE_COLUMNS``), and per framework, model and rule what they say
    (``SUMMARY_COLUMNS``). ``outcomes``: ``batch_scaling.run_outcomes`` rows;
    ``warmup_iterations``: the runs' un-timed warm-up steps (counted in S(B), not in time);
    ``host_steps``: the scaling model's step times on the host that ran the runs (the
    perfmodel's ``host_model.csv``, with its ``host_cores``) for the held-out check; without
    it the check uses the projection's and compares every node count."""
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
        # Why no curve is projected (the figure's title says it), also the note's own clause.
        not_projected = (
            f"no projected step time for {framework} {model}"
            if steps.empty
            else None
            if fit.fitted
            else f"no S(B): {fit.refused}"
        )
        row["not_projected"] = not_projected
        if not_projected:
            notes.append(not_projected)
        else:
            row["network"] = str(steps["network"].iloc[0])
            curve = project(steps, fit, batch_per_rank, ranks, warmup_iterations=warmup_iterations)
            curves.append(
                curve.assign(**dict(zip(KEYS, (framework, model, rule), strict=True)), network=row["network"])
            )
            paying = stops_paying(curve)
            row.update(fastest_nodes=paying.fastest_nodes, stops_paying_nodes=paying.nodes)
        on_host = _step_times(host_steps, framework, model) if host_steps is not None else pd.DataFrame()
        check_steps = on_host if not on_host.empty else steps
        cores = _host_cores(on_host)
        check = (
            held_out_check(group, check_steps, batch_per_rank, ranks, warmup_iterations, host_cores=cores)
            if not check_steps.empty
            else None
        )
        alone = steps_held_out(group)
        row.update(
            steps_held_out_batch=alone.batch, steps_predicted=alone.predicted, steps_measured=alone.measured,
            steps_measured_low=alone.measured_low, steps_measured_high=alone.measured_high,
            steps_relative_error=alone.relative_error,
        )  # fmt: skip
        if alone.refused:
            notes.append(f"S(B) held out: {alone.refused}")
        if check is not None:
            row["held_out_step_time"] = HOST_STEP_TIME if not on_host.empty else PROJECTED_STEP_TIME
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
