"""Time to a target quality projected to many nodes: the scaling model's step time at N
nodes times the steps the global batch of N nodes needs, S(B) (``batch_scaling.fit_steps``).

Throughput alone says more nodes always help while efficiency holds; time to target also
asks how many steps the larger global batch saves. Under weak scaling the global batch at
N nodes is ``batch_per_rank x ranks_per_node x N``, so

    T(N) = step_s(N) x (S(B(N)) - warm-up),   node-hours(N) = N x T(N) / 3600

on the training clock (the timing warm-up's steps train but are not timed, as the measured
time to target; start-up and evaluations are not projected). The band of T multiplies the
ends of the two bands (step time's low end by S(B)'s low end, high by high): both factors
are positive, so whenever both bands cover their true values this one covers T, which
happens with at least 1 - 0.05 - 0.05 = 90 % probability for two 95 % bands (Bonferroni,
independent or not). Beyond the largest measured batch S(B) is extrapolated (marked), and
at or beyond a batch where every run diverged the projection has no number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from dlscale.analysis.batch_scaling import (
    REACHED,
    StepsFit,
    censored,
    fit_steps,
    flag,
    median_bracket,
    steps_by_batch,
)
from dlscale.analysis.convergence import time_to_target_interval
from dlscale.analysis.stats import BOOTSTRAP_SEED, Interval

#: step time at node counts -> (point, band low, band high), seconds per step.
StepTimeFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]

PROJECTED_COLUMNS: tuple[str, ...] = (
    "nodes", "global_batch", "step_s", "step_lo", "step_hi", "steps", "steps_lo", "steps_hi",
    "time_to_target_s", "time_lo", "time_hi", "node_hours", "node_hours_lo", "node_hours_hi",
    "extrapolated", "note",
)  # fmt: skip


def step_series(step_time: pd.DataFrame | StepTimeFn, nodes: Sequence[int] | None = None) -> pd.DataFrame:
    """Step time with its band at each node count: from the throughput projection's table
    (``projection.PROJECTION_COLUMNS``: ``nodes``, ``step_s``, ``step_lo``, ``step_hi``, of one
    set-up and model) or from a callable of the node counts (``nodes`` then required). A
    band the projection did not bootstrap (NaN) is the point itself."""
    if callable(step_time):
        if nodes is None:
            raise ValueError("a step-time callable needs the node counts to evaluate it at")
        counts = np.asarray(list(nodes), dtype="float64")
        point, low, high = (
            np.broadcast_to(np.asarray(v, dtype="float64"), counts.shape) for v in step_time(counts)
        )
        frame = pd.DataFrame(
            {"nodes": counts.astype("int64"), "step_s": point, "step_lo": low, "step_hi": high}
        )
    else:
        keys = [k for k in ("setup", "model", "network") if k in step_time]
        if keys and len(step_time[keys].drop_duplicates()) > 1:
            raise ValueError("step times of more than one set-up or model: project each apart")
        frame = step_time[["nodes", "step_s", "step_lo", "step_hi"]].copy()
        if nodes is not None:
            frame = frame[frame["nodes"].isin(list(nodes))]
        frame = frame.sort_values("nodes").reset_index(drop=True)
    for side in ("step_lo", "step_hi"):
        frame[side] = frame[side].astype("float64").fillna(frame["step_s"].astype("float64"))
    return frame


def project(
    step_time: pd.DataFrame | StepTimeFn,
    fit: StepsFit,
    batch_per_rank: int,
    ranks_per_node: int,
    nodes: Sequence[int] | None = None,
    warmup_iterations: int = 0,
) -> pd.DataFrame:
    """Projected time and node-hours to target at each node count with bands (module
    docstring; ``PROJECTED_COLUMNS``). Empty when the fit was refused."""
    if not fit.fitted:
        return pd.DataFrame(columns=list(PROJECTED_COLUMNS))
    frame = step_series(step_time, nodes)
    counts = frame["nodes"].to_numpy(dtype="float64")
    batch = float(batch_per_rank) * ranks_per_node * counts
    steps = fit.steps(batch)
    steps_lo, steps_hi = fit.band(batch)
    timed = [np.maximum(s - warmup_iterations, 0.0) for s in (steps, steps_lo, steps_hi)]
    out = frame.assign(
        global_batch=batch.astype("int64"),
        steps=steps,
        steps_lo=steps_lo,
        steps_hi=steps_hi,
        time_to_target_s=frame["step_s"].to_numpy() * timed[0],
        time_lo=frame["step_lo"].to_numpy() * timed[1],
        time_hi=frame["step_hi"].to_numpy() * timed[2],
    )
    for name, column in (
        ("node_hours", "time_to_target_s"),
        ("node_hours_lo", "time_lo"),
        ("node_hours_hi", "time_hi"),
    ):
        out[name] = counts * out[column] / 3600.0
    measured = (min(fit.batches), max(fit.batches)) if fit.batches else (math.nan, math.nan)
    out["extrapolated"] = (batch < measured[0]) | (batch > measured[1])
    out["note"] = None
    if fit.diverged_batches:
        unstable = min(fit.diverged_batches)
        gone = batch >= unstable
        numbers = [c for c in PROJECTED_COLUMNS if c.startswith(("steps", "time", "node_hours"))]
        out.loc[gone, numbers] = math.nan
        out.loc[gone, "note"] = f"every run diverged at global batch {unstable:g} under this rule"
    return out[list(PROJECTED_COLUMNS)].reset_index(drop=True)


@dataclass(frozen=True)
class StopsPaying:
    """Where more nodes stop shortening training: ``fastest_nodes``, the node count of the
    shortest projected time; ``nodes``, the smallest node count that no larger one beats
    beyond the band (inf: the largest still beats the one before it; NaN: no number)."""

    fastest_nodes: float
    nodes: float


def stops_paying(projected: pd.DataFrame) -> StopsPaying:
    """The node count beyond which more nodes no longer shorten training, within the band:
    the smallest N such that no larger node count's band lies wholly below N's (its high
    end under N's low end); inf where that is the largest count and it still lies wholly
    below the count before it (more nodes still pay at the end of the projection)."""
    have = projected[np.isfinite(projected["time_to_target_s"].astype("float64"))].sort_values("nodes")
    if have.empty:
        return StopsPaying(math.nan, math.nan)
    nodes = have["nodes"].to_numpy(dtype="float64")
    low, high = have["time_lo"].to_numpy(dtype="float64"), have["time_hi"].to_numpy(dtype="float64")
    fastest = float(nodes[int(np.argmin(have["time_to_target_s"].to_numpy(dtype="float64")))])
    for i in range(len(nodes)):
        if not np.any(high[i + 1 :] < low[i]):
            if i == len(nodes) - 1 and i > 0 and high[i] < low[i - 1]:
                return StopsPaying(fastest, math.inf)
            return StopsPaying(fastest, float(nodes[i]))
    return StopsPaying(fastest, math.nan)  # pragma: no cover - the last count always qualifies


#: Distinct global batches a held-out check's S(B) needs: it predicts one point and is
#: judged by that point's error, so the two that determine the curve suffice (the reported
#: fit, ``batch_scaling.FIT_MIN_BATCHES``, keeps a third for its residual).
HELD_OUT_MIN_BATCHES = 2


@dataclass(frozen=True)
class HeldOut:
    """A held-out check of the projection: S(B) calibrated on the other node counts' runs,
    the time to target predicted at the held-out node count against what its runs
    measured. ``refused`` says why there is no check."""

    held_out_nodes: float = math.nan
    calibrated_on: tuple[int, ...] = ()
    predicted_s: float = math.nan
    predicted_lo: float = math.nan
    predicted_hi: float = math.nan
    measured_s: float = math.nan
    measured_low: float = math.nan
    measured_high: float = math.nan
    measured_bracket_s: float = math.nan
    relative_error: float = math.nan
    within_band: bool | None = None
    refused: str | None = None


def _measured_times(outcomes: pd.DataFrame, nodes: int) -> tuple[Interval, float]:
    """The median time to target of the runs at ``nodes`` with its interval (a repeat that
    did not reach it counts as infinitely slow; a contended one, whose seconds are the
    host's load, is left out) and the median quantisation bracket."""
    at = outcomes[outcomes["nodes"].eq(nodes)]
    timed = at[~flag(at, "contended")]
    reached = timed[timed["outcome"].eq(REACHED)]
    return (
        time_to_target_interval(censored(timed, "time_to_target_s")),
        median_bracket(reached, "time_to_target_s", "time_bracket_low_s"),
    )


def _has_median_steps(outcomes: pd.DataFrame, nodes: int) -> bool:
    steps = censored(outcomes[outcomes["nodes"].eq(nodes)], "steps_to_target")
    return len(steps) > 0 and math.isfinite(time_to_target_interval(steps).value)


def held_out_check(
    outcomes: pd.DataFrame,
    step_time: pd.DataFrame | StepTimeFn,
    batch_per_rank: int,
    ranks_per_node: int,
    warmup_iterations: int = 0,
    resamples: int = 1000,
    seed: int = BOOTSTRAP_SEED,
    host_cores: int = 0,
) -> HeldOut:
    """Hold one node count out: calibrate S(B) on the runs (``batch_scaling.run_outcomes``
    rows of one set-up and rule) at every other node count with a median, predict the held-out count's
    time to target (``project`` with ``step_time``) and compare with its measured median:
    ``relative_error`` = (predicted - measured) / measured.

    The held-out count is the largest with a measured median time to target whose runs,
    where ``host_cores`` is known, had a core per rank (world size at most the host's
    cores): ``step_time`` is for nodes with cores of their own, and an oversubscribed
    host's seconds are its time-sharing, not the framework's. The measured time is
    quantised by the evaluation spacing (``measured_bracket_s`` wide below it), so an error
    within the bracket is no error of the model. ``within_band``: the measured interval
    (or point, for one repeat) overlaps the predicted band."""
    counts = sorted(int(n) for n in outcomes["nodes"].dropna().unique())
    if len(counts) < 2:
        return HeldOut(refused=f"{len(counts)} node count(s): the check needs another to hold out")
    measured_at = {n: _measured_times(outcomes, n) for n in counts}
    measurable = [n for n in counts if math.isfinite(measured_at[n][0].value)]
    comparable = [n for n in measurable if host_cores <= 0 or n * ranks_per_node <= host_cores]
    if not comparable:
        where = f" with a core per rank on this host ({host_cores} cores)" if host_cores > 0 else ""
        return HeldOut(refused=f"no node count{where} has a measured median time to target")
    held = comparable[-1]
    # Calibrated on the other node counts with a median step count (contended runs' steps
    # count: they do not depend on the load): a batch without one (none reached the target
    # in time) would refuse the fit; one where every run diverged has no steps.
    others = tuple(n for n in counts if n != held and _has_median_steps(outcomes, n))
    fit = fit_steps(
        outcomes[outcomes["nodes"].isin(others)],
        resamples=resamples,
        seed=seed,
        min_batches=HELD_OUT_MIN_BATCHES,
    )
    if not fit.fitted:
        return HeldOut(float(held), others, refused=f"S(B) on the other node counts: {fit.refused}")
    measured, bracket = measured_at[held]
    projected = project(step_time, fit, batch_per_rank, ranks_per_node, [held], warmup_iterations)
    base = HeldOut(
        float(held), others, measured_s=measured.value, measured_low=measured.low,
        measured_high=measured.high, measured_bracket_s=bracket,
    )  # fmt: skip
    if projected.empty or not math.isfinite(float(projected["time_to_target_s"].iloc[0])):
        note = projected["note"].iloc[0] if len(projected) else "no step time at that node count"
        return replace(base, refused=f"no projection at {held} nodes: {note}")
    point = projected.iloc[0]
    low = measured.low if math.isfinite(measured.low) else measured.value
    high = measured.high if math.isfinite(measured.high) else measured.value
    return replace(
        base,
        predicted_s=float(point["time_to_target_s"]),
        predicted_lo=float(point["time_lo"]),
        predicted_hi=float(point["time_hi"]),
        relative_error=(float(point["time_to_target_s"]) - measured.value) / measured.value,
        within_band=bool(low <= float(point["time_hi"]) and high >= float(point["time_lo"])),
    )


@dataclass(frozen=True)
class StepsHeldOut:
    """S(B)'s own held-out check, independent of any host: fitted on the node counts below
    the largest batch with a median, the steps to target predicted at that batch."""

    batch: float = math.nan
    predicted: float = math.nan
    measured: float = math.nan
    measured_low: float = math.nan
    measured_high: float = math.nan
    relative_error: float = math.nan
    refused: str | None = None


def steps_held_out(outcomes: pd.DataFrame, resamples: int = 1000, seed: int = BOOTSTRAP_SEED) -> StepsHeldOut:
    """Extrapolate S(B) from the smaller global batches to the largest one whose runs have
    a median step count (a batch where the runs diverged is none): how far the fit's
    extrapolation to the projection's batches can be trusted, seen on the one batch it
    can be checked on (``relative_error`` = (predicted - measured) / measured)."""
    steps = steps_by_batch(outcomes)
    have = steps[np.isfinite(pd.to_numeric(steps["steps_to_target"], errors="coerce").astype("float64"))]
    if have.empty:
        return StepsHeldOut(refused="no global batch has a median step count")
    largest = float(have["global_batch"].max())
    fit = fit_steps(
        outcomes[outcomes["global_batch"].lt(largest)], resamples=resamples, seed=seed,
        min_batches=HELD_OUT_MIN_BATCHES,
    )  # fmt: skip
    if not fit.fitted:
        return StepsHeldOut(largest, refused=f"S(B) below global batch {largest:g}: {fit.refused}")
    row = have[have["global_batch"].eq(largest)].iloc[0]
    predicted = float(np.asarray(fit.steps(largest)).reshape(-1)[0])
    measured = float(row["steps_to_target"])
    return StepsHeldOut(
        largest, predicted, measured, float(row["steps_low"]), float(row["steps_high"]),
        (predicted - measured) / measured,
    )  # fmt: skip
