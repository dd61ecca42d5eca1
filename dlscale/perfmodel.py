"""A calibrated model of one synchronous training step, to scale past the machines we have.

This host has one machine and two cores; the study's question is how each framework
scales to hundreds of nodes. So, as performance engineers do: measure the parts at small
scale (compute per model, each framework's communication overheads), model the rest from
the framework's synchronisation pattern on an alpha-beta network, check the model on
runs over an emulated interconnect (``dlscale.netns``), and project.

The model (weak scaling: the batch per rank is fixed, so compute per rank does not change
with the node count). One step on ``P`` ranks, ``S`` gradient bytes (parameters x 4):

    step(P) = compute + comm(P)

Compute and communication do not overlap: the ring frameworks here synchronise the whole
flat gradient after the backward pass (torch times it apart from DDP's bucketed overlap;
TensorFlow's collectives and Caffe-MPI's Allreduce do not overlap on CPU), and BigDL
aggregates between two Spark stages. ``compute`` is measured: the median ``compute_s``
of the framework and model at its smallest world (any network: no gradient moves in it).

``comm`` follows the framework's pattern on a network of latency ``alpha`` (s per
message) and bandwidth ``beta`` (bytes/s), plus a fixed per-step cost ``c``:

* ring all-reduce (torch over gloo, TensorFlow MultiWorkerMirrored, Caffe-MPI), ``P``
  ranks: reduce-scatter then all-gather, ``2(P-1)`` steps of ``S/P`` bytes each way::

      comm = c + 2(P-1)·alpha + 2(P-1)/P · S/beta          (comm = 0 at P = 1)

* parameter servers (TensorFlow ps), ``W`` workers (one per rank), ``n_ps`` servers
  holding ``S/n_ps`` each: every worker pushes ``S`` and pulls ``S``; a server's link
  carries ``W·S/n_ps`` each way, a worker's ``S``; the busier link is the bottleneck::

      comm = c + 2·alpha + 2·max(W/n_ps, 1) · S/beta        (also at W = 1)

* BigDL's block-manager synchronisation (``AllReduceParameter``), ``N`` executors (one
  per node): each executor fetches its ``1/N`` slice of the gradient from the ``N-1``
  others, then the updated weight slices, ``2(N-1)/N · S`` bytes; ``c`` is the Spark
  scheduling of the iteration's jobs, paid at ``N = 1`` too::

      comm = c + 2(N-1)·alpha + 2(N-1)/N · S/beta

Calibration (``calibrate``). Per set-up (framework, and TensorFlow's strategy), from the
study's ok runs on the host network: the measured exposed communication of each run
(``step_s - compute_s``: the synchronisation plus the wait for the slowest rank, the cost
a user pays) is fitted as ``c + m·alpha_f + b·gamma_f`` (``m``, ``b``: the pattern's
message and byte coefficients above; ``gamma_f = 1/beta_f``) by non-negative least squares
on relative residuals (each run's error divided by its measurement, so LeNet's
milliseconds count as much as AlexNet's tenths of seconds). Runs at ``P = 1`` enter for
the patterns that communicate there (ps, BigDL). A coefficient the runs cannot separate
(one world size: ``c`` and ``alpha`` are collinear) is not fitted: ``alpha_f`` is then 0
(``c`` holds the host's few microseconds of latency) and an unidentified ``gamma_f`` is
NaN. ``alpha_f``/``beta_f`` are what the framework achieves on this host's loopback:
network plus the framework's own per-message and per-byte software cost.

The ``loopback`` preset (``loopback_preset``) is the host network as the fastest
framework saw it: ``alpha_lo = min alpha_f``, ``beta_lo = max beta_f``. A framework's
overheads are what it adds beyond that; on another network (``alpha_n``, ``beta_n``)::

      alpha = alpha_n + max(alpha_f - alpha_lo, 0)
      1/beta = 1/beta_n + max(1/beta_f - 1/beta_lo, 0)

so the model on ``loopback`` gives back the host fit, and on a slow link every framework
is bound by the link plus its own software cost (its bandwidth efficiency on the host
is ``beta_f / beta_lo``).

Everything here is arithmetic on small tables (numpy/pandas): it runs in the analysis
step, never at DAG time.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dlscale.networks import HOST, PRESETS, NetworkPreset, emulated_preset
from dlscale.runners.caffe.models import EXPECTED_PARAMETERS

#: Learnable parameters per model (the same architecture in every framework, tested).
PARAMETERS: Mapping[str, int] = EXPECTED_PARAMETERS
#: Gradients travel as float32.
BYTES_PER_PARAMETER = 4

RING, PS, BIGDL = "ring", "ps", "bigdl"
#: Synchronisation pattern of each set-up (a framework, or a framework and its strategy).
SETUP_PATTERN: Mapping[str, str] = {
    "torch": RING,
    "tensorflow": RING,  # MultiWorkerMirroredStrategy, CommunicationImplementation.RING
    "tensorflow-ps": PS,
    "caffe": RING,
    "bigdl": BIGDL,
}
LOOPBACK = "loopback"

#: Floor of a measurement in the relative weights of the fit (s): no division by zero.
_WEIGHT_FLOOR_S = 1e-6

CALIBRATION_COLUMNS: tuple[str, ...] = (
    "setup",
    "pattern",
    "runs",
    "world_sizes",
    "models",
    "overhead_s",
    "alpha_s",
    "beta_Bps",
    "bandwidth_efficiency",
    "fitted",
    "rel_rmse",
)
VALIDATION_COLUMNS: tuple[str, ...] = (
    "run_id",
    "framework",
    "setup",
    "model",
    "nodes",
    "ranks_per_node",
    "world_size",
    "network",
    "alpha_s",
    "beta_Bps",
    "measured_s",
    "predicted_s",
    "error",
    "measured_compute_s",
    "predicted_compute_s",
    "compute_source",
    "measured_exposed_s",
    "predicted_comm_s",
    "comm_error",
    "note",
)
SUMMARY_COLUMNS: tuple[str, ...] = (
    "setup",
    "framework",
    "runs",
    "predicted",
    "median_abs_error",
    "max_abs_error",
    "median_error",
    "networks",
)
PROJECTION_COLUMNS: tuple[str, ...] = (
    "setup",
    "framework",
    "pattern",
    "model",
    "network",
    "alpha_s",
    "beta_Bps",
    "nodes",
    "ranks_per_node",
    "world_size",
    "batch_per_rank",
    "gradient_bytes",
    "compute_s",
    "comm_s",
    "step_s",
    "throughput",
    "speedup",
    "efficiency",
)


# --- the patterns ------------------------------------------------------------------------


def gradient_bytes(model: str) -> int:
    """Bytes of one full gradient of ``model`` (float32 parameters)."""
    return PARAMETERS[model] * BYTES_PER_PARAMETER


def ring_allreduce_s(ranks: int, size_bytes: float, alpha_s: float, beta_Bps: float) -> float:
    """Ring all-reduce of ``size_bytes`` over ``ranks``: 2(P-1)·alpha + 2(P-1)/P · S/beta."""
    p = int(ranks)
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * size_bytes / beta_Bps


def parameter_server_s(
    workers: int, size_bytes: float, alpha_s: float, beta_Bps: float, num_ps: int = 1
) -> float:
    """Push then pull of ``size_bytes`` per worker through ``num_ps`` servers.

    2·alpha + 2·max(W/n_ps, 1) · S/beta: each server's link carries W·S/n_ps each way.
    """
    return 2 * alpha_s + 2 * max(workers / num_ps, 1.0) * size_bytes / beta_Bps


def bigdl_sync_s(
    nodes: int, size_bytes: float, alpha_s: float, beta_Bps: float, scheduling_s: float
) -> float:
    """BigDL's block-manager exchange among ``nodes`` executors plus the per-iteration scheduling.

    scheduling + 2(N-1)·alpha + 2(N-1)/N · S/beta.
    """
    n = int(nodes)
    return scheduling_s + 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * size_bytes / beta_Bps


@dataclass(frozen=True)
class Terms:
    """``comm = fixed·c + messages·alpha + bytes·(1/beta)`` for one pattern at one size."""

    fixed: float
    messages: float
    bytes: float


def comm_terms(pattern: str, peers: int, size_bytes: float, num_ps: int = 1) -> Terms:
    """The coefficients of ``c``, ``alpha`` and ``1/beta`` in ``pattern``'s comm time.

    ``peers``: ranks for ring, workers for ps, executors (nodes) for BigDL.
    """
    p = int(peers)
    if pattern == RING:
        if p <= 1:
            return Terms(0.0, 0.0, 0.0)
        return Terms(1.0, 2.0 * (p - 1), 2.0 * (p - 1) / p * size_bytes)
    if pattern == PS:
        return Terms(1.0, 2.0, 2.0 * max(p / num_ps, 1.0) * size_bytes)
    if pattern == BIGDL:
        return Terms(1.0, 2.0 * (p - 1), 2.0 * (p - 1) / p * size_bytes)
    raise ValueError(f"unknown synchronisation pattern {pattern!r} (expected {RING}, {PS} or {BIGDL})")


def peers_of(pattern: str, nodes: int, ranks_per_node: int) -> int:
    """Who exchanges gradients: every rank (ring, ps) or one executor per node (BigDL)."""
    return int(nodes) if pattern == BIGDL else int(nodes) * int(ranks_per_node)


# --- calibration -------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """One set-up's fitted communication costs on the host (see the module docstring).

    ``gamma_s_per_byte`` is ``1/beta_f`` (NaN when the runs could not tell it apart).
    """

    setup: str
    pattern: str
    overhead_s: float
    alpha_s: float
    gamma_s_per_byte: float
    runs: int = 0
    world_sizes: tuple[int, ...] = ()
    models: tuple[str, ...] = ()
    fitted: tuple[str, ...] = ()
    rel_rmse: float = math.nan

    @property
    def beta_Bps(self) -> float:
        gamma = self.gamma_s_per_byte
        if math.isnan(gamma):
            return math.nan
        return math.inf if gamma <= 0 else 1.0 / gamma


def fit_overheads(
    fixed: Iterable[float], messages: Iterable[float], nbytes: Iterable[float], measured: Iterable[float]
) -> tuple[float, float, float, tuple[str, ...]]:
    """Fit ``measured ≈ fixed·c + messages·alpha + nbytes·gamma`` with c, alpha, gamma >= 0.

    Least squares on relative residuals ((model - measured) / measured). Coefficients are
    taken in the order gamma, c, alpha, each only where it adds to the rank of the design
    (the data can tell it apart from those before); the others come back as 0 (c, alpha)
    or NaN (gamma) and are not named in the returned ``fitted``. Non-negativity is exact:
    every subset of the identifiable coefficients is solved and the best non-negative
    solution kept (at most 7 small solves). Returns ``(c, alpha, gamma, fitted)``.
    """
    columns = {
        "gamma": np.asarray(list(nbytes), dtype="float64"),
        "c": np.asarray(list(fixed), dtype="float64"),
        "alpha": np.asarray(list(messages), dtype="float64"),
    }
    y = np.asarray(list(measured), dtype="float64")
    if not all(len(col) == len(y) for col in columns.values()):
        raise ValueError("fit_overheads: every column needs one value per measurement")
    result = {"c": 0.0, "alpha": 0.0, "gamma": math.nan}
    if len(y) == 0:
        return result["c"], result["alpha"], result["gamma"], ()
    weights = 1.0 / np.maximum(np.abs(y), _WEIGHT_FLOOR_S)
    scaled: dict[str, np.ndarray] = {}
    for name, col in columns.items():
        weighted = col * weights
        norm = float(np.linalg.norm(weighted))
        if norm > 0:
            scaled[name] = weighted / norm
    picked: list[str] = []
    for name in ("gamma", "c", "alpha"):
        if name not in scaled:
            continue
        trial = np.column_stack([scaled[n] for n in (*picked, name)])
        if np.linalg.matrix_rank(trial, tol=1e-9) == len(picked) + 1:
            picked.append(name)
    target = y * weights
    best: tuple[float, dict[str, float]] | None = None
    for size in range(len(picked), 0, -1):
        for subset in itertools.combinations(picked, size):
            design = np.column_stack([scaled[n] for n in subset])
            solution, *_ = np.linalg.lstsq(design, target, rcond=None)
            if (solution < 0).any():
                continue
            residual = float(np.sum((design @ solution - target) ** 2))
            if best is None or residual < best[0] - 1e-15:
                unscaled = {
                    n: float(v) / float(np.linalg.norm(columns[n] * weights))
                    for n, v in zip(subset, solution, strict=True)
                }
                best = (residual, unscaled)
    if best is not None:
        for name in picked:
            result[name] = best[1].get(name, 0.0)
    if "gamma" not in picked:
        result["gamma"] = math.nan
    return (
        result["c"],
        result["alpha"],
        result["gamma"],
        tuple(n for n in ("c", "alpha", "gamma") if n in picked),
    )


def setup_of(framework: str, versions: Any = None) -> str:
    """A run's set-up: its framework, and for TensorFlow its strategy (``tensorflow-ps``)."""
    if framework == "tensorflow":
        try:
            recorded = json.loads(versions) if isinstance(versions, str) else (versions or {})
        except ValueError:
            recorded = {}
        if isinstance(recorded, dict) and recorded.get("strategy") == "ps":
            return "tensorflow-ps"
    return str(framework)


def measured_runs(runs: pd.DataFrame, num_ps: int = 1) -> pd.DataFrame:
    """The ok runs of a runs table with what the model needs: set-up, pattern, peers, S, terms.

    Runs of a framework or model the model does not know are left out (nothing to predict
    them from). ``exposed_s`` is the run's median ``step_s - compute_s`` (its ``comm_s``
    where the step was not split).
    """
    columns = [
        "run_id",
        "framework",
        "setup",
        "pattern",
        "model",
        "network",
        "nodes",
        "ranks_per_node",
        "world_size",
        "batch_per_rank",
        "step_s",
        "compute_s",
        "exposed_s",
        "peers",
        "gradient_bytes",
        "fixed",
        "messages",
        "bytes",
    ]
    if runs.empty or "status" not in runs:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in columns})
    ok = runs[runs["status"].eq("ok") & runs["step_s"].notna()].copy()
    versions = ok["versions"] if "versions" in ok else pd.Series(None, index=ok.index)
    ok["setup"] = [setup_of(fw, v) for fw, v in zip(ok["framework"], versions, strict=True)]
    ok = ok[ok["setup"].isin(list(SETUP_PATTERN)) & ok["model"].isin(list(PARAMETERS))].copy()
    if "network" not in ok:
        ok["network"] = HOST
    ok["network"] = ok["network"].fillna(HOST).astype(str)
    ok["pattern"] = ok["setup"].map(SETUP_PATTERN)
    for name in ("nodes", "ranks_per_node", "world_size", "batch_per_rank"):
        ok[name] = ok[name].astype("int64")
    ok["peers"] = [
        peers_of(p, n, r) for p, n, r in zip(ok["pattern"], ok["nodes"], ok["ranks_per_node"], strict=True)
    ]
    ok["gradient_bytes"] = ok["model"].map(gradient_bytes).astype("float64")
    exposed = ok["exposed_comm_s"] if "exposed_comm_s" in ok else pd.Series(np.nan, index=ok.index)
    ok["exposed_s"] = exposed.where(exposed.notna(), ok.get("comm_s"))
    terms = [
        comm_terms(p, n, s, num_ps)
        for p, n, s in zip(ok["pattern"], ok["peers"], ok["gradient_bytes"], strict=True)
    ]
    ok["fixed"] = [t.fixed for t in terms]
    ok["messages"] = [t.messages for t in terms]
    ok["bytes"] = [t.bytes for t in terms]
    return ok.reset_index(drop=True)[columns]


def calibrate(runs: pd.DataFrame, num_ps: int = 1) -> dict[str, Calibration]:
    """Fit every set-up's overheads from its ok host-network runs that communicate.

    Set-ups without such a run (e.g. a study of 1-node runs only) are absent: nothing can
    be said about their communication.
    """
    measured = measured_runs(runs, num_ps)
    usable = measured[measured["network"].eq(HOST) & measured["fixed"].gt(0) & measured["exposed_s"].notna()]
    out: dict[str, Calibration] = {}
    for setup, group in usable.groupby("setup", sort=True):
        c, alpha, gamma, fitted = fit_overheads(
            group["fixed"], group["messages"], group["bytes"], group["exposed_s"]
        )
        pattern = str(group["pattern"].iloc[0])
        predicted = c * group["fixed"] + alpha * group["messages"] + np.nan_to_num(gamma) * group["bytes"]
        rel = (predicted - group["exposed_s"]) / group["exposed_s"].abs().clip(lower=_WEIGHT_FLOOR_S)
        out[str(setup)] = Calibration(
            setup=str(setup),
            pattern=pattern,
            overhead_s=c,
            alpha_s=alpha,
            gamma_s_per_byte=gamma,
            runs=len(group),
            world_sizes=tuple(sorted(int(w) for w in group["world_size"].unique())),
            models=tuple(sorted(str(m) for m in group["model"].unique())),
            fitted=fitted,
            rel_rmse=float(np.sqrt(np.mean(rel**2))),
        )
    return out


def loopback_preset(calibrations: Mapping[str, Calibration]) -> NetworkPreset:
    """The host's loopback as the fastest framework saw it: min fitted alpha, max fitted beta.

    Without any fitted value the loopback is taken as free (0 s, infinite bandwidth): the
    framework costs then stand alone.
    """
    alphas = [cal.alpha_s for cal in calibrations.values() if "alpha" in cal.fitted]
    gammas = [cal.gamma_s_per_byte for cal in calibrations.values() if "gamma" in cal.fitted]
    alpha = min(alphas) if alphas else 0.0
    gamma = min(gammas) if gammas else 0.0
    beta = math.inf if gamma <= 0 else 1.0 / gamma
    who = ", ".join(sorted(calibrations)) or "none"
    return NetworkPreset(
        LOOPBACK,
        alpha,
        beta,
        False,
        f"this host's loopback as measured: fastest latency and bandwidth fitted over the host runs of {who}",
    )


def network_preset(name: str, loopback: NetworkPreset) -> NetworkPreset:
    """A preset by name (``loopback``, a ``PRESETS`` name or ``emulated-<name>``)."""
    if name == LOOPBACK:
        return loopback
    if name in PRESETS:
        return PRESETS[name]
    preset = emulated_preset(name)
    if preset is None:  # "host": the network the calibration ran on
        return loopback
    return preset


def effective_link(cal: Calibration, network: NetworkPreset, loopback: NetworkPreset) -> tuple[float, float]:
    """``(alpha, 1/beta)`` the set-up sees on ``network``: the network plus its own overheads."""
    extra_alpha = max(cal.alpha_s - loopback.latency_s, 0.0)
    gamma_lo = 0.0 if math.isinf(loopback.bandwidth_Bps) else 1.0 / loopback.bandwidth_Bps
    gamma_f = cal.gamma_s_per_byte
    extra_gamma = 0.0 if math.isnan(gamma_f) else max(gamma_f - gamma_lo, 0.0)
    gamma_net = 0.0 if math.isinf(network.bandwidth_Bps) else 1.0 / network.bandwidth_Bps
    return network.latency_s + extra_alpha, gamma_net + extra_gamma


def predict_comm_s(
    cal: Calibration,
    network: NetworkPreset,
    loopback: NetworkPreset,
    peers: int,
    size_bytes: float,
    num_ps: int = 1,
) -> float:
    """Communication time of one step of ``cal``'s set-up on ``network``."""
    terms = comm_terms(cal.pattern, peers, size_bytes, num_ps)
    alpha, gamma = effective_link(cal, network, loopback)
    return terms.fixed * cal.overhead_s + terms.messages * alpha + terms.bytes * gamma


def calibration_table(calibrations: Mapping[str, Calibration], loopback: NetworkPreset) -> pd.DataFrame:
    """The fitted overheads, one row per set-up (``calibration.csv``)."""
    rows = []
    for cal in calibrations.values():
        known = "gamma" in cal.fitted and math.isfinite(loopback.bandwidth_Bps)
        efficiency = cal.beta_Bps / loopback.bandwidth_Bps if known else math.nan
        rows.append(
            {
                "setup": cal.setup,
                "pattern": cal.pattern,
                "runs": cal.runs,
                "world_sizes": ";".join(str(w) for w in cal.world_sizes),
                "models": ";".join(cal.models),
                "overhead_s": cal.overhead_s,
                "alpha_s": cal.alpha_s if "alpha" in cal.fitted else math.nan,
                "beta_Bps": cal.beta_Bps,
                "bandwidth_efficiency": efficiency,
                "fitted": ";".join(cal.fitted),
                "rel_rmse": cal.rel_rmse,
            }
        )
    return pd.DataFrame(rows, columns=list(CALIBRATION_COLUMNS))


# --- compute -------------------------------------------------------------------------------


def compute_baselines(measured: pd.DataFrame) -> pd.DataFrame:
    """Per set-up, model and batch per rank: the median ``compute_s`` at the smallest world.

    Any network: compute moves no gradient. Where a step was not split (compute_s null),
    a 1-rank ring run's whole step is its compute. Columns: setup, model, batch_per_rank,
    world_size (the world it was measured at), ranks_per_node, compute_s.
    """
    columns = ["setup", "model", "batch_per_rank", "world_size", "ranks_per_node", "compute_s"]
    if measured.empty:
        return pd.DataFrame(columns=columns)
    frame = measured.copy()
    lone_ring = frame["pattern"].eq(RING) & frame["world_size"].eq(1)
    frame["compute"] = frame["compute_s"].where(frame["compute_s"].notna() | ~lone_ring, frame["step_s"])
    frame = frame[frame["compute"].notna()]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    keys = ["setup", "model", "batch_per_rank"]
    smallest = frame.groupby(keys)["world_size"].transform("min")
    at = frame[frame["world_size"].eq(smallest)]
    table = at.groupby(keys, as_index=False).agg(
        world_size=("world_size", "first"),
        ranks_per_node=("ranks_per_node", "min"),
        compute_s=("compute", "median"),
    )
    return table[columns]


# --- validation ----------------------------------------------------------------------------


def validate(
    runs: pd.DataFrame,
    calibrations: Mapping[str, Calibration],
    loopback: NetworkPreset,
    num_ps: int = 1,
) -> pd.DataFrame:
    """Predicted against measured step time for every ok run on an emulated network.

    The prediction uses only host-network runs for communication (the calibration) and,
    for compute, the median ``compute_s`` of host runs of the same set-up, model, batch
    and layout when the study has them (on one host, emulated nodes share its cores, so
    compute at 4 ranks is not compute at 1), else the compute at the smallest world;
    ``compute_source`` says which. ``error = predicted / measured - 1``; ``comm_error``
    compares the predicted communication with the run's exposed communication alone.
    A run that cannot be predicted (its set-up has no calibration) is a row with a note.
    """
    measured = measured_runs(runs, num_ps)
    emulated = measured[measured["network"].ne(HOST)]
    if emulated.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in VALIDATION_COLUMNS})
    baselines = compute_baselines(measured)
    host = measured[measured["network"].eq(HOST) & measured["compute_s"].notna()]
    same_layout = host.groupby(["setup", "model", "batch_per_rank", "nodes", "ranks_per_node"])[
        "compute_s"
    ].median()
    base = baselines.set_index(["setup", "model", "batch_per_rank"])
    rows = []
    for run in emulated.itertuples(index=False):
        row: dict[str, Any] = {name: getattr(run, name, math.nan) for name in VALIDATION_COLUMNS}
        row.update(
            measured_s=run.step_s,
            measured_compute_s=run.compute_s,
            measured_exposed_s=run.exposed_s,
            predicted_s=math.nan,
            predicted_compute_s=math.nan,
            predicted_comm_s=math.nan,
            error=math.nan,
            comm_error=math.nan,
            compute_source="",
            note="",
        )
        try:
            preset = network_preset(run.network, loopback)
        except KeyError:
            row["note"] = f"unknown network {run.network!r}"
            rows.append(row)
            continue
        if emulated_preset(run.network) is not None:
            # The emulation caps bandwidth only (dlscale.netns: no sch_netem here): its links
            # have the host's own latency, not the preset's.
            preset = dataclasses.replace(preset, latency_s=loopback.latency_s)
        row["alpha_s"], row["beta_Bps"] = preset.latency_s, preset.bandwidth_Bps
        layout = (run.setup, run.model, run.batch_per_rank, run.nodes, run.ranks_per_node)
        key = (run.setup, run.model, run.batch_per_rank)
        if layout in same_layout.index:
            row["predicted_compute_s"] = float(same_layout.loc[layout])
            row["compute_source"] = f"host runs at n{run.nodes}x{run.ranks_per_node}"
        elif key in base.index:
            entry = base.loc[key]
            row["predicted_compute_s"] = float(entry["compute_s"])
            row["compute_source"] = f"smallest world ({int(entry['world_size'])})"
        cal = calibrations.get(run.setup)
        if cal is None:
            row["note"] = f"no host-network runs of {run.setup} at world > 1 to calibrate from"
        else:
            comm = predict_comm_s(cal, preset, loopback, run.peers, run.gradient_bytes, num_ps)
            row["predicted_comm_s"] = comm
            if pd.notna(run.exposed_s) and run.exposed_s > 0:
                row["comm_error"] = comm / run.exposed_s - 1.0
            if math.isnan(row["predicted_compute_s"]):
                row["note"] = "no compute measurement for this set-up, model and batch"
            else:
                row["predicted_s"] = row["predicted_compute_s"] + comm
                row["error"] = prediction_error(row["predicted_s"], run.step_s)
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(VALIDATION_COLUMNS))
    return table.sort_values(
        ["setup", "model", "network", "world_size", "run_id"], kind="stable"
    ).reset_index(drop=True)


def prediction_error(predicted: float, measured: float) -> float:
    """Relative error ``predicted / measured - 1`` (+0.1: the model predicts 10% too slow)."""
    if not measured or math.isnan(measured) or math.isnan(predicted):
        return math.nan
    return predicted / measured - 1.0


def validation_summary(validation: pd.DataFrame) -> pd.DataFrame:
    """Per set-up: how many emulated runs, how many predicted, median and max |error|."""
    if validation.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in SUMMARY_COLUMNS})
    rows = []
    for setup, group in validation.groupby("setup", sort=True):
        errors = pd.to_numeric(group["error"], errors="coerce").dropna()
        rows.append(
            {
                "setup": setup,
                "framework": group["framework"].iloc[0],
                "runs": len(group),
                "predicted": len(errors),
                "median_abs_error": float(errors.abs().median()) if len(errors) else math.nan,
                "max_abs_error": float(errors.abs().max()) if len(errors) else math.nan,
                "median_error": float(errors.median()) if len(errors) else math.nan,
                "networks": ";".join(sorted(group["network"].astype(str).unique())),
            }
        )
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


# --- projection ----------------------------------------------------------------------------


def node_counts(max_nodes: int) -> list[int]:
    """1, 2, 4, ... up to ``max_nodes`` (and ``max_nodes`` itself when not a power of 2)."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    counts = [1 << k for k in range(int(max_nodes).bit_length()) if (1 << k) <= max_nodes]
    if counts[-1] != max_nodes:
        counts.append(int(max_nodes))
    return counts


def project(
    runs: pd.DataFrame,
    calibrations: Mapping[str, Calibration],
    network: NetworkPreset,
    loopback: NetworkPreset,
    max_nodes: int = 1024,
    ranks_per_node: int = 1,
    num_ps: int = 1,
) -> pd.DataFrame:
    """Speedup and efficiency at 1, 2, 4, ... ``max_nodes`` nodes on ``network``, per set-up and model.

    Weak scaling: each rank keeps the batch and the compute time measured at the smallest
    world (of a strong-scaling study too: its batch per rank there); every rank talks over ``network`` (ranks of one node too: no faster intra-node
    path is modelled). ``speedup`` is throughput against the same set-up and model at 1
    node, ``efficiency = speedup / nodes``. Only calibrated set-ups are projected.
    """
    measured = measured_runs(runs, num_ps)
    # One curve per set-up and model: the batch of its smallest world (a strong-scaling
    # study has a batch per rank for every node count; the projection keeps the first).
    baselines = compute_baselines(measured).sort_values(["world_size", "batch_per_rank"], kind="stable")
    baselines = baselines.drop_duplicates(["setup", "model"]).sort_values(["setup", "model"])
    rows = []
    counts = node_counts(max_nodes)
    for base in baselines.itertuples(index=False):
        cal = calibrations.get(base.setup)
        if cal is None:
            continue
        size = gradient_bytes(base.model)
        alpha, gamma = effective_link(cal, network, loopback)
        first_throughput = math.nan
        for nodes in counts:
            world = nodes * ranks_per_node
            peers = peers_of(cal.pattern, nodes, ranks_per_node)
            comm = predict_comm_s(cal, network, loopback, peers, size, num_ps)
            step = float(base.compute_s) + comm
            throughput = world * int(base.batch_per_rank) / step if step > 0 else math.nan
            if nodes == counts[0]:
                first_throughput = throughput
            speedup = throughput / first_throughput
            rows.append(
                {
                    "setup": base.setup,
                    "framework": base.setup.split("-")[0],
                    "pattern": cal.pattern,
                    "model": base.model,
                    "network": network.name,
                    "alpha_s": alpha,
                    "beta_Bps": math.inf if gamma <= 0 else 1.0 / gamma,
                    "nodes": nodes,
                    "ranks_per_node": ranks_per_node,
                    "world_size": world,
                    "batch_per_rank": int(base.batch_per_rank),
                    "gradient_bytes": size,
                    "compute_s": float(base.compute_s),
                    "comm_s": comm,
                    "step_s": step,
                    "throughput": throughput,
                    "speedup": speedup,
                    "efficiency": speedup / nodes,
                }
            )
    return pd.DataFrame(rows, columns=list(PROJECTION_COLUMNS))


__all__ = (
    "BIGDL",
    "CALIBRATION_COLUMNS",
    "LOOPBACK",
    "PARAMETERS",
    "PROJECTION_COLUMNS",
    "PS",
    "RING",
    "SETUP_PATTERN",
    "SUMMARY_COLUMNS",
    "VALIDATION_COLUMNS",
    "Calibration",
    "Terms",
    "bigdl_sync_s",
    "calibrate",
    "calibration_table",
    "comm_terms",
    "compute_baselines",
    "effective_link",
    "fit_overheads",
    "gradient_bytes",
    "loopback_preset",
    "measured_runs",
    "network_preset",
    "node_counts",
    "parameter_server_s",
    "predict_comm_s",
    "prediction_error",
    "project",
    "ring_allreduce_s",
    "setup_of",
    "validate",
    "validation_summary",
)
