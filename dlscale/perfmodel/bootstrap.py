"""The bootstrap behind every band: the whole calibration refitted on resampled
micro-benchmark cells, host runs and compute iterations.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from dlscale.networks import HOST
from dlscale.perfmodel.calibration import calibrate_measured
from dlscale.perfmodel.comm import Calibration
from dlscale.perfmodel.fits import commbench_cells, normalised
from dlscale.perfmodel.library import fit_commbench
from dlscale.perfmodel.projection import Curve, curves, with_borrowed
from dlscale.perfmodel.runs import compute_baselines, measured_runs

_CELL_KEYS = ["library", "op", "network", "world", "nbytes", "parts", "model", "algorithm"]


class CellSampler:
    """Bootstrap draws of the micro-benchmark cells: within every (library, op, network,
    world, model, algorithm) stratum, cells drawn with replacement, and within each drawn
    cell its repeats, whose median is the cell's time. Built once; ``draw`` per replicate."""

    def __init__(self, raw: pd.DataFrame):
        self.cells = commbench_cells(raw)
        frame = normalised(raw)
        repeats = {k: g["seconds"].to_numpy(dtype="float64") for k, g in frame.groupby(_CELL_KEYS, sort=True)}
        self.repeats = [
            repeats[tuple(row)] for row in self.cells[_CELL_KEYS].itertuples(index=False, name=None)
        ]
        strata = self.cells.groupby(
            ["library", "op", "network", "world", "model", "algorithm"], sort=True
        ).indices
        self.strata = [np.asarray(index) for index in strata.values()]

    def draw(self, rng: np.random.Generator) -> pd.DataFrame:
        if self.cells.empty:
            return self.cells
        picks = np.concatenate([index[rng.integers(0, len(index), len(index))] for index in self.strata])
        seconds = np.empty(len(picks))
        for i, cell in enumerate(picks):
            values = self.repeats[cell]
            seconds[i] = np.median(values[rng.integers(0, len(values), len(values))])
        drawn = self.cells.iloc[picks].reset_index(drop=True)
        drawn["seconds"] = seconds
        return drawn


def resample_cells(raw: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """One bootstrap draw of the micro-benchmark cells (see ``CellSampler``)."""
    return CellSampler(raw).draw(rng)


def resample_runs(measured: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """One bootstrap draw of the host runs: within every set-up, runs drawn with replacement."""
    if measured.empty:
        return measured
    parts = [g.iloc[rng.integers(0, len(g), len(g))] for _, g in measured.groupby("setup", sort=True)]
    return pd.concat(parts, ignore_index=True)


def bootstrap(
    runs: pd.DataFrame,
    raw: pd.DataFrame,
    replicates: int = 200,
    num_ps: int = 1,
    seed: int = 0,
    iterations: pd.DataFrame | None = None,
) -> tuple[list[dict[str, Calibration]], list[list[Curve]]]:
    """``replicates`` calibrations refitted on resampled data (see ``resample_cells``,
    ``resample_runs``), and per replicate the compute curves (compute resampled from the
    baseline runs' iterations where given)."""
    rng = np.random.default_rng(seed)
    measured = measured_runs(runs)
    host = measured[measured["network"].eq(HOST)]
    compute_runs = compute_samples(measured, iterations)
    sampler = CellSampler(raw) if raw is not None and not raw.empty else None
    every = curves(measured)
    out_cals: list[dict[str, Calibration]] = []
    out_curves: list[list[Curve]] = []
    for _ in range(int(replicates)):
        cells = sampler.draw(rng) if sampler is not None else pd.DataFrame()
        fits = fit_commbench(cells) if not cells.empty else {}
        cals = calibrate_measured(resample_runs(host, rng), fits, num_ps)
        out_cals.append(cals)
        base = with_borrowed(every, cals)
        out_curves.append(
            [
                dataclasses.replace(
                    c, compute_s=_resampled_median(compute_runs.get((c.setup, c.model)), rng, c.compute_s)
                )
                for c in base
            ]
        )
    return out_cals, out_curves


def compute_samples(
    measured: pd.DataFrame, iterations: pd.DataFrame | None
) -> dict[tuple[str, str], list[np.ndarray]]:
    """Per (set-up, model): the per-iteration compute times of each of its baseline runs
    (every run at the smallest world: ``compute_baselines``' ``run_id`` lists them)."""
    if iterations is None or iterations.empty or measured.empty:
        return {}
    base = compute_baselines(measured)
    frame = iterations
    if "warmup" in frame:
        frame = frame[~frame["warmup"].fillna(False).astype(bool)]
    out: dict[tuple[str, str], list[np.ndarray]] = {}
    for b in base.itertuples(index=False):
        for run_id in str(b.run_id).split(";"):
            rows = frame[frame["run_id"].eq(run_id)]
            values = rows["compute_s"] if "compute_s" in rows else pd.Series(dtype=float)
            if values.isna().all():
                values = rows.get("step_s", pd.Series(dtype=float))
            values = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype="float64")
            if len(values):
                out.setdefault((b.setup, b.model), []).append(values)
    return out


def _resampled_median(runs: list[np.ndarray] | None, rng: np.random.Generator, default: float) -> float:
    """The baseline's compute in one bootstrap draw: runs drawn with replacement, each run's
    iterations drawn with replacement; the median over runs of each run's median (as
    ``compute_baselines`` takes it from the runs table)."""
    if not runs:
        return default
    medians = []
    for pick in rng.integers(0, len(runs), len(runs)):
        values = runs[pick]
        medians.append(np.median(values[rng.integers(0, len(values), len(values))]))
    return float(np.median(medians))
