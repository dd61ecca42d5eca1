"""Weak-scaling projection to nodes with cores of their own: step time, speedup and
efficiency at 1, 2, 4, ... nodes with bootstrap bands, the node count from which efficiency
stays below 50% (and every range where it dips below and recovers), and how much the answer
depends on the network's latency.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from dlscale.networks import NetworkPreset
from dlscale.perfmodel.comm import Calibration, Gradient, gradient_size, library_comm
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.patterns import gradient_bytes
from dlscale.perfmodel.runs import compute_baselines, measured_runs

#: Percentiles of the bootstrap band.
BAND = (2.5, 97.5)


PROJECTION_COLUMNS: tuple[str, ...] = (
    "setup", "framework", "pattern", "model", "network", "alpha_s", "beta_Bps", "nodes",
    "ranks_per_node", "world_size", "batch_per_rank", "gradient_bytes", "compute_s",
    "comm_s", "step_s", "throughput", "speedup", "efficiency", "step_lo", "step_hi",
    "speedup_lo", "speedup_hi", "efficiency_lo", "efficiency_hi",
)  # fmt: skip
EFFICIENCY50_COLUMNS: tuple[str, ...] = (
    "setup", "framework", "model", "network", "nodes50", "nodes50_lo", "nodes50_hi",
    "above_max_share", "crossings", "below50", "max_nodes", "summary",
)  # fmt: skip
#: Ranges below 50% the headline (``summary``) lists before it says how many more there are.
SUMMARY_RANGES = 4
SENSITIVITY_COLUMNS: tuple[str, ...] = (
    "setup", "framework", "model", "network", "latency_us", "nodes", "efficiency", "nodes50",
)  # fmt: skip


def node_counts(max_nodes: int) -> list[int]:
    """1, 2, 4, ... up to ``max_nodes`` (and ``max_nodes`` itself when not a power of 2)."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    counts = [1 << k for k in range(int(max_nodes).bit_length()) if (1 << k) <= max_nodes]
    if counts[-1] != max_nodes:
        counts.append(int(max_nodes))
    return counts


@dataclass(frozen=True)
class Curve:
    """One projected curve's inputs: a set-up, a model, its compute and batch."""

    setup: str
    model: str
    dataset: str
    batch_per_rank: int
    compute_s: float


def curves(measured: pd.DataFrame, calibrations: Mapping[str, Calibration] | None = None) -> list[Curve]:
    """A curve per set-up and model with a compute measurement (calibrated set-ups only,
    when ``calibrations`` is given): the batch of its smallest world (a strong-scaling
    study's first batch: the projection is weak from 1 node)."""
    base = compute_baselines(measured).sort_values(["world_size", "batch_per_rank"], kind="stable")
    base = base.drop_duplicates(["setup", "model"]).sort_values(["setup", "model"])
    found = [
        Curve(b.setup, b.model, str(b.dataset), int(b.batch_per_rank), float(b.compute_s))
        for b in base.itertuples(index=False)
    ]
    return found if calibrations is None else with_borrowed(found, calibrations)


def with_borrowed(found: Sequence[Curve], calibrations: Mapping[str, Calibration]) -> list[Curve]:
    """The curves of calibrated set-ups; a set-up with library fits but no runs of its own
    (TensorFlow's ps in a study that ran its ring) borrows the compute of its framework's
    own set-up: compute moves no gradient."""
    out = [c for c in found if c.setup in calibrations]
    have = {c.setup for c in out}
    for setup in sorted(set(calibrations) - have):
        framework = setup.split("-")[0]
        out += [dataclasses.replace(c, setup=setup) for c in found if c.setup == framework]
    return out


def step_at(
    cal: Calibration,
    compute_s: float,
    gradient: str | Gradient,
    nodes: Any,
    ranks_per_node: int,
    link: Link,
    num_ps: Any = 1,
    batch_per_rank: int = 0,
    dataset: str | None = None,
) -> np.ndarray:
    """Step time at each node count on nodes with cores of their own (no contention): the
    compute step, plus the synchronisation of ``gradient`` (a catalog model or a published
    system's ``Gradient``) in ``cal``'s pattern on ``link`` and the runner's offset.

    The one place a step is made for a node count: the study's projection (``step_times``)
    and the replay of published systems (``dlscale.perfmodel.replay``) both call it, so a
    replay checks the very arithmetic that projects the study to 1024 nodes.
    """
    comm = library_comm(cal, gradient, nodes, ranks_per_node, link, None, num_ps, batch_per_rank, dataset)
    offset = cal.offset(nodes, ranks_per_node, projected=True, nbytes=gradient_size(gradient))
    return compute_s + np.maximum(comm + offset, 0.0)


def throughput_of(nodes: Any, ranks_per_node: int, batch_per_rank: int, steps: Any) -> np.ndarray:
    """Global samples per second of weak-scaling steps: every rank trains its batch a step."""
    return np.asarray(nodes, dtype="float64") * ranks_per_node * batch_per_rank / np.asarray(steps)


def throughput_at(
    cal: Calibration,
    compute_s: float,
    gradient: str | Gradient,
    nodes: Any,
    ranks_per_node: int,
    link: Link,
    num_ps: Any = 1,
    batch_per_rank: int = 0,
    dataset: str | None = None,
) -> np.ndarray:
    """Global samples per second at each node count (``step_at``, ``throughput_of``)."""
    steps = step_at(cal, compute_s, gradient, nodes, ranks_per_node, link, num_ps, batch_per_rank, dataset)
    return throughput_of(nodes, ranks_per_node, batch_per_rank, steps)


def step_times(
    cal: Calibration, curve: Curve, nodes: np.ndarray, ranks_per_node: int, link: Link, num_ps: int = 1
) -> np.ndarray:
    """Projected step time of a study's curve at each node count (``step_at``)."""
    return step_at(
        cal,
        curve.compute_s,
        curve.model,
        nodes,
        ranks_per_node,
        link,
        num_ps,
        curve.batch_per_rank,
        curve.dataset,
    )


def stays_below_half(nodes: np.ndarray, efficiency: np.ndarray) -> float:
    """The node count from which the efficiency stays below 0.5 up to the last node count
    (inf when the last is not below). Not the first count below 0.5: a curve can dip and
    recover (Open MPI's algorithms on a world that is not a power of 2), and a headline
    taken at the dip would contradict the curve it summarises."""
    above = np.nonzero(~(efficiency < 0.5))[0]
    if not len(above):
        return float(nodes[0])
    return float(nodes[above[-1] + 1]) if above[-1] + 1 < len(nodes) else math.inf


def below_half_ranges(nodes: np.ndarray, efficiency: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Every run of consecutive node counts whose efficiency is below 0.5, as (first, last):
    each boundary between two runs is a crossing of the 50% line."""
    below = efficiency < 0.5
    edges = np.diff(np.concatenate([[False], below, [False]]).astype(np.int8))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0] - 1
    return tuple((int(nodes[a]), int(nodes[b])) for a, b in zip(starts, ends, strict=True))


def crossings_of(ranges: Sequence[tuple[int, int]], first: int, last: int) -> int:
    """How many times a curve over node counts ``first``..``last`` with these ranges below 50%
    crosses the line (a range that starts at ``first`` or ends at ``last`` crosses once)."""
    return sum((lo > first) + (hi < last) for lo, hi in ranges)


class PointProjection(NamedTuple):
    """One curve's projection: step times at the table's node counts, the node count from
    which its efficiency stays below 50% (``stays_below_half``) and every range below 50%."""

    steps: np.ndarray
    nodes50: float
    below50: tuple[tuple[int, int], ...]


@dataclass
class Projection:
    """The projection's tables: ``table`` (per node count, with bands), ``efficiency50``."""

    table: pd.DataFrame
    efficiency50: pd.DataFrame
    replicates: int = 0
    samples: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)


def project_point(
    calibrations: Mapping[str, Calibration],
    items: Iterable[Curve],
    link: Link,
    counts: Sequence[int],
    max_nodes: int,
    ranks_per_node: int = 1,
    num_ps: int = 1,
) -> dict[tuple[str, str], PointProjection]:
    """Per curve: step times at ``counts``, the node count from which efficiency stays below
    50% and the ranges below 50% (all integers up to ``max_nodes`` searched)."""
    every = np.arange(1, int(max_nodes) + 1, dtype="float64")
    out = {}
    for curve in items:
        cal = calibrations.get(curve.setup)
        if cal is None:
            continue
        steps_all = step_times(cal, curve, every, ranks_per_node, link, num_ps)
        efficiency = steps_all[0] / steps_all
        steps = steps_all[np.asarray(counts, dtype="int64") - 1]
        out[(curve.setup, curve.model)] = PointProjection(
            steps, stays_below_half(every, efficiency), below_half_ranges(every, efficiency)
        )
    return out


def project(
    runs: pd.DataFrame,
    calibrations: Mapping[str, Calibration],
    network: NetworkPreset,
    max_nodes: int = 1024,
    ranks_per_node: int = 1,
    num_ps: int = 1,
    replicates: Sequence[Mapping[str, Calibration]] = (),
    replicate_curves: Sequence[Sequence[Curve]] = (),
    latency_s: float | None = None,
) -> Projection:
    """Speedup and efficiency at 1, 2, 4, ... ``max_nodes`` on ``network``, per set-up and model.

    Weak scaling from the compute of the smallest world; every rank talks over ``network``.
    ``speedup`` is throughput against the same set-up at 1 node, ``efficiency = speedup /
    nodes``. With bootstrap ``replicates`` (calibrations refitted on resampled data, and
    their resampled compute curves), every number gets a 95% band (``*_lo``, ``*_hi``).
    """
    measured = measured_runs(runs)
    items = curves(measured, calibrations)
    counts = node_counts(max_nodes)
    link = Link.of_preset(network, latency_s)
    point = project_point(calibrations, items, link, counts, max_nodes, ranks_per_node, num_ps)
    samples: dict[tuple[str, str], list[PointProjection]] = {key: [] for key in point}
    for cals, cvs in zip(replicates, replicate_curves or [items] * len(replicates), strict=False):
        for key, value in project_point(cals, cvs, link, counts, max_nodes, ranks_per_node, num_ps).items():
            if key in samples:
                samples[key].append(value)
    rows, e50 = [], []
    counts_arr = np.asarray(counts, dtype="float64")
    for curve in items:
        key = (curve.setup, curve.model)
        if key not in point:
            continue
        steps, n50, below50 = point[key]
        cal = calibrations[curve.setup]
        throughput = throughput_of(counts_arr, ranks_per_node, curve.batch_per_rank, steps)
        speedup = throughput / throughput[0]
        band: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        reps = samples[key]
        if reps:
            rep_steps = np.vstack([r.steps for r in reps])
            rep_speedup = rep_steps[:, :1] / rep_steps * counts_arr
            for name, values in (
                ("step", rep_steps),
                ("speedup", rep_speedup),
                ("efficiency", rep_speedup / counts_arr),
            ):
                band[name] = (np.percentile(values, BAND[0], axis=0), np.percentile(values, BAND[1], axis=0))
        for i, nodes in enumerate(counts):
            rows.append(
                {
                    "setup": curve.setup, "framework": curve.setup.split("-")[0], "pattern": cal.pattern,
                    "model": curve.model, "network": network.name, "alpha_s": link.alpha_s,
                    "beta_Bps": link.beta_Bps, "nodes": nodes, "ranks_per_node": ranks_per_node,
                    "world_size": nodes * ranks_per_node, "batch_per_rank": curve.batch_per_rank,
                    "gradient_bytes": gradient_bytes(curve.model), "compute_s": curve.compute_s,
                    "comm_s": float(steps[i]) - curve.compute_s, "step_s": float(steps[i]),
                    "throughput": float(throughput[i]), "speedup": float(speedup[i]),
                    "efficiency": float(speedup[i]) / nodes,
                    **{
                        f"{name}_{side}": float(band[name][j][i]) if name in band else math.nan
                        for name in ("step", "speedup", "efficiency")
                        for j, side in enumerate(("lo", "hi"))
                    },
                }
            )  # fmt: skip
        # The band is each refit's own node count, found the same way as the point's.
        rep50 = np.array([r.nodes50 for r in reps]) if reps else np.array([])
        e50.append(efficiency50_row(curve, network.name, n50, rep50, max_nodes, below50))
    table = pd.DataFrame(rows, columns=list(PROJECTION_COLUMNS))
    return Projection(
        table,
        pd.DataFrame(e50, columns=list(EFFICIENCY50_COLUMNS)),
        len(replicates),
        {k: np.array([r.nodes50 for r in v]) for k, v in samples.items()},
    )


def efficiency50_row(
    curve: Curve,
    network: str,
    n50: float,
    replicates: np.ndarray,
    max_nodes: int,
    below50: Sequence[tuple[int, int]] = (),
) -> dict[str, Any]:
    """One row of ``efficiency50.csv``: the node count from which efficiency stays below 50%
    and its 95% band (NaN: not within ``max_nodes``; ``above_max_share`` is the share of
    replicates that do not stay below 50% within it), the number of times the curve
    crosses 50% and every range below it (``below50``), and the headline (``summary``),
    which names the other ranges when the curve crosses more than once."""

    def finite(value: float) -> float:
        return value if math.isfinite(value) else math.nan

    lo = hi = math.nan
    share = math.nan
    if len(replicates):
        beyond = float(max_nodes) + 1.0  # a replicate that never drops below 50% (inf)
        capped = np.where(np.isfinite(replicates), replicates, beyond)
        lo = float(np.percentile(capped, BAND[0], method="lower"))
        hi = float(np.percentile(capped, BAND[1], method="higher"))
        lo, hi = (math.inf if v > max_nodes else v for v in (lo, hi))
        share = float(np.mean(~np.isfinite(replicates)))

    def text(value: float) -> str:
        return f">{max_nodes}" if not math.isfinite(value) else f"{value:.0f}"

    summary = text(n50) + (f" [{text(lo)}, {text(hi)}]" if len(replicates) else "")
    crossings = crossings_of(below50, 1, max_nodes)
    # The ranges below 50% before the one it stays below from: where the curve dips and recovers.
    dips = [r for r in below50 if r[0] != n50]
    if crossings > 1 and dips:
        shown = ", ".join(_range_text(r) for r in dips[:SUMMARY_RANGES])
        more = len(dips) - SUMMARY_RANGES
        summary += f"; dips below 50% at {shown}" + (f" and {more} more ranges" if more > 0 else "")
    return {
        "setup": curve.setup, "framework": curve.setup.split("-")[0], "model": curve.model, "network": network,
        "nodes50": finite(n50), "nodes50_lo": finite(lo), "nodes50_hi": finite(hi),
        "above_max_share": share, "crossings": crossings, "below50": ", ".join(map(_range_text, below50)),
        "max_nodes": max_nodes, "summary": summary,
    }  # fmt: skip


def _range_text(nodes: tuple[int, int]) -> str:
    """A range of node counts in words: "3", "5-7"."""
    return str(nodes[0]) if nodes[0] == nodes[1] else f"{nodes[0]}-{nodes[1]}"


def latency_sensitivity(
    runs: pd.DataFrame,
    calibrations: Mapping[str, Calibration],
    network: NetworkPreset,
    latencies_us: Sequence[float] = tuple(float(v) for v in np.geomspace(1, 100, 11)),
    max_nodes: int = 1024,
    ranks_per_node: int = 1,
    num_ps: int = 1,
) -> pd.DataFrame:
    """Efficiency at ``max_nodes`` and the 50% node count as the network's per-hop latency
    goes from 1 to 100 us (bandwidth held at ``network``'s): what the projection's latency
    assumption is worth."""
    measured = measured_runs(runs)
    items = curves(measured, calibrations)
    rows = []
    for latency in latencies_us:
        link = Link.of_preset(network, latency * 1e-6)
        point = project_point(calibrations, items, link, [1, max_nodes], max_nodes, ranks_per_node, num_ps)
        for (setup, model), (steps, n50, _) in point.items():
            rows.append(
                {
                    "setup": setup, "framework": setup.split("-")[0], "model": model, "network": network.name,
                    "latency_us": float(latency), "nodes": max_nodes, "efficiency": float(steps[0] / steps[-1]),
                    "nodes50": n50 if math.isfinite(n50) else math.nan,
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SENSITIVITY_COLUMNS))
