"""Non-negative fits of each library operation's costs on its micro-benchmark cells.

Relative residuals (``scipy.optimize.nnls`` on errors divided by the measurement), so a
microsecond cell counts as much as a second one; a coefficient enters only where the data
can tell it from those before it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dlscale import catalog
from dlscale.networks import HOST
from dlscale.perfmodel.patterns import (
    contention,
    mpi_algorithm_terms,
    openmpi_allreduce_algorithm,
    ring_terms,
)

WEIGHT_FLOOR_S = 1e-7


FIT_COLUMNS: tuple[str, ...] = (
    "library", "op", "coefficient", "value", "identified", "points", "worlds", "sizes",
    "rel_rmse", "max_abs_rel_error", "host_cores", "network",
)  # fmt: skip


@dataclass(frozen=True)
class Fit:
    """Non-negative coefficients of one library operation, and how well they fit."""

    library: str
    op: str
    coefficients: Mapping[str, float]
    identified: tuple[str, ...] = ()
    points: int = 0
    worlds: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    rel_rmse: float = math.nan
    max_abs_rel_error: float = math.nan
    host_cores: int = 0
    network: str = HOST
    #: Root-mean-square residual in seconds, and the median residual (measured - fitted) at
    #: each world, where a fit reports them (``fit_spark_step``).
    rmse_s: float = math.nan
    residuals_s: tuple[tuple[int, float], ...] = ()

    def get(self, name: str) -> float:
        return float(self.coefficients.get(name, 0.0))


#: A fit's key: ``(library, op, network)``.
FitKey: TypeAlias = tuple[str, str, str]
#: Every fit of a study's micro-benchmarks by key (``fit_commbench``).
Fits: TypeAlias = Mapping[FitKey, Fit]


def nnls_fit(
    columns: Mapping[str, np.ndarray], measured: np.ndarray, order: Sequence[str] | None = None
) -> tuple[dict[str, float], tuple[str, ...], np.ndarray]:
    """Fit ``measured ≈ Σ coef·column`` with every coef >= 0, on relative residuals.

    Columns are taken in ``order``, each only where it adds to the rank of the design (the
    data can tell it from those before); the others are 0 and not in ``identified``.
    Returns ``(coefficients, identified, predictions)``.
    """
    y = np.asarray(measured, dtype="float64")
    names = list(order or columns)
    weights = 1.0 / np.maximum(np.abs(y), WEIGHT_FLOOR_S)
    scaled: dict[str, np.ndarray] = {}
    norms: dict[str, float] = {}
    for name in names:
        col = np.asarray(columns[name], dtype="float64") * weights
        norm = float(np.linalg.norm(col))
        if norm > 0 and np.isfinite(norm):
            scaled[name], norms[name] = col / norm, norm
    picked: list[str] = []
    for name in names:
        if name in scaled:
            trial = np.column_stack([scaled[n] for n in (*picked, name)])
            if np.linalg.matrix_rank(trial, tol=1e-8) == len(picked) + 1:
                picked.append(name)
    coefficients = {name: 0.0 for name in names}
    if picked and len(y):
        solution, _ = nnls(np.column_stack([scaled[n] for n in picked]), y * weights)
        for name, value in zip(picked, solution, strict=True):
            coefficients[name] = float(value) / norms[name]
    predicted = np.zeros_like(y)
    for name in names:
        predicted = predicted + coefficients[name] * np.asarray(columns[name], dtype="float64")
    return coefficients, tuple(picked), predicted


def fit_cells(
    library: str, op: str, cells: pd.DataFrame, columns: dict[str, np.ndarray], order: Sequence[str]
) -> Fit:
    y = cells["seconds"].to_numpy(dtype="float64")
    coefficients, identified, predicted = nnls_fit(columns, y, order)
    rel = (predicted - y) / np.maximum(np.abs(y), WEIGHT_FLOOR_S)
    return Fit(
        library=library,
        op=op,
        coefficients=coefficients,
        identified=identified,
        points=len(cells),
        worlds=tuple(sorted(int(w) for w in cells["world"].unique())),
        sizes=tuple(sorted(int(s) for s in cells["nbytes"].unique())),
        rel_rmse=float(np.sqrt(np.mean(rel**2))) if len(rel) else math.nan,
        max_abs_rel_error=float(np.max(np.abs(rel))) if len(rel) else math.nan,
        host_cores=int(cells["host_cores"].max()) if "host_cores" in cells and len(cells) else 0,
        network=str(cells["network"].iloc[0]) if "network" in cells and len(cells) else HOST,
    )


def with_latency(frame: pd.DataFrame) -> pd.Series:
    """The network of each row, ``+<latency>us`` where a per-hop delay was added to it
    (``dlscale.commbench.latency``): a delayed link is another network."""
    network = frame["network"].astype(str)
    if "latency_us" not in frame:
        return network
    latency = pd.to_numeric(frame["latency_us"], errors="coerce").fillna(0.0)
    return network.where(latency.le(0), network + "+" + latency.map("{:g}".format) + "us")


def normalised(raw: pd.DataFrame) -> pd.DataFrame:
    """A copy of raw micro-benchmark rows with the optional columns filled (older CSVs lack
    them) and the network named with its added latency: how every reader groups them."""
    frame = raw.copy()
    for name, default in (("parts", 1), ("model", ""), ("algorithm", "default"), ("host_cores", 0)):
        if name not in frame:
            frame[name] = default
    frame["model"] = frame["model"].fillna("").astype(str)
    frame["algorithm"] = frame["algorithm"].fillna("default").astype(str)
    frame["network"] = with_latency(frame)
    return frame


def commbench_cells(raw: pd.DataFrame) -> pd.DataFrame:
    """One row per benchmark cell (library, op, network, world, size, model, algorithm):
    the median of its timed repeats (``seconds``) and how many there were."""
    keys = ["library", "op", "network", "world", "nbytes", "parts", "model", "algorithm"]
    if raw.empty:
        return pd.DataFrame(columns=[*keys, "seconds", "repeats", "host_cores"])
    frame = normalised(raw)
    return frame.groupby(keys, as_index=False, sort=True).agg(
        seconds=("seconds", "median"), repeats=("seconds", "size"), host_cores=("host_cores", "max")
    )


def host_cells(cells: pd.DataFrame, library: str, op: str, network: str = HOST) -> pd.DataFrame:
    pick = cells[
        cells["library"].eq(library) & cells["op"].eq(op) & cells["network"].eq(network)
        & cells["algorithm"].eq("default")
    ]  # fmt: skip
    return pick[pick["seconds"] > 0]


def design(
    library: str, op: str, world: Any, nbytes: Any, cores: int | None
) -> tuple[dict[str, np.ndarray], tuple[str, ...]] | None:
    """The model's columns of one library operation at each (world, bytes), and the order
    in which the fit identifies them (None for an operation the model does not fit)."""
    p = np.asarray(world, dtype="float64")
    s = np.asarray(nbytes, dtype="float64") + 0 * p
    rho = contention(p, cores)
    ones = np.ones_like(s)
    if library == "mpi" and op == "allreduce":
        m, b = mpi_algorithm_terms(openmpi_allreduce_algorithm(p, s), p, s)
        return {"c": rho, "alpha": rho * m, "gamma": rho * b}, ("gamma", "c", "alpha")
    if op == "allreduce":  # the ring libraries
        m, b = ring_terms(p, s)
        return {"c": rho, "alpha": rho * m, "gamma": rho * b}, ("gamma", "c", "alpha")
    if op == "pushpull":
        columns = {"c": ones, "per_worker": p * ones, "gamma_worker": s, "gamma_server": p * s}
        return columns, ("gamma_server", "gamma_worker", "c", "per_worker")
    if op == "job":
        return {"c": ones, "per_task": p * ones}, ("c", "per_task")
    if op == "shuffle":
        return {"c": ones, "alpha": rho * (p - 1), "gamma": rho * (p - 1) / p * s}, ("gamma", "c", "alpha")
    if op == "pingpong":
        return {"alpha": ones, "gamma": s}, ("gamma", "alpha")
    return None


def fit_library(cells: pd.DataFrame, library: str, op: str, network: str = HOST) -> Fit | None:
    """One library operation's coefficients from its benchmark cells on ``network``."""
    pick = host_cells(cells, library, op, network)
    if pick.empty:
        return None
    cores = int(pick["host_cores"].max()) or None
    made = design(library, op, pick["world"].to_numpy(), pick["nbytes"].to_numpy(), cores)
    if made is None:
        return None
    return fit_cells(library, op, pick, *made)


def predict_fit(fit: Fit, world: Any, nbytes: Any) -> np.ndarray:
    """A fit's time of its operation at each (world, bytes) on the host it was measured on."""
    made = design(fit.library, fit.op, world, nbytes, fit.host_cores or None)
    if made is None:
        return np.full(np.shape(nbytes), np.nan)
    columns, _ = made
    return sum(fit.get(name) * np.asarray(col, dtype="float64") for name, col in columns.items())


def fit_curves(fits: Fits, points: int = 40) -> pd.DataFrame:
    """Each fit evaluated on a log grid of sizes at each world it was measured at (the
    lines of the micro-benchmark figure)."""
    rows = []
    for fit in fits.values():
        sizes = [s for s in fit.sizes if s > 0]
        grid = np.geomspace(min(sizes), max(sizes), points) if sizes else np.array([0.0])
        for world in fit.worlds:
            seconds = predict_fit(fit, np.full(len(grid), world), grid)
            rows += [
                {"library": fit.library, "op": fit.op, "network": fit.network, "world": world,
                 "nbytes": float(size), "seconds": float(value)}
                for size, value in zip(grid, seconds, strict=True)
            ]  # fmt: skip
    return pd.DataFrame(rows, columns=["library", "op", "network", "world", "nbytes", "seconds"])


#: The operations fitted for a library, by the synchronisation pattern of the set-ups that
#: use it (``dlscale.commbench``'s rows): a ring's all-reduce, parameter servers' pull and
#: push, BigDL's per-iteration Spark job and its block exchange.
PATTERN_OPS: Mapping[str, tuple[str, ...]] = {
    catalog.RING: ("allreduce",),
    catalog.PS: ("pushpull",),
    catalog.BIGDL: ("job", "shuffle"),
}
#: The operations fitted per library: every set-up's library (the catalog's), and the raw
#: network's ping-pong.
LIBRARY_OPS: Mapping[str, tuple[str, ...]] = {
    **{lib: PATTERN_OPS[catalog.SETUP_PATTERNS[setup]] for setup, lib in catalog.SETUP_LIBRARIES.items()},
    "tcp": ("pingpong",),
}


def fits_table(fits: Fits) -> pd.DataFrame:
    """The fitted coefficients, one row each (``commbench_fits.csv``), with derived bandwidths."""
    rows = []
    for fit in fits.values():
        values = dict(fit.coefficients)
        for name in [n for n in list(values) if n.startswith("gamma")]:
            values[name.replace("gamma", "beta_Bps")] = math.inf if values[name] <= 0 else 1.0 / values[name]
        for name, value in values.items():
            base = name.replace("beta_Bps", "gamma")
            rows.append(
                {
                    "library": fit.library, "op": fit.op, "coefficient": name, "value": value,
                    "identified": base in fit.identified, "points": fit.points,
                    "worlds": ";".join(map(str, fit.worlds)), "sizes": ";".join(map(str, fit.sizes)),
                    "rel_rmse": fit.rel_rmse, "max_abs_rel_error": fit.max_abs_rel_error,
                    "host_cores": fit.host_cores, "network": fit.network,
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(FIT_COLUMNS))
