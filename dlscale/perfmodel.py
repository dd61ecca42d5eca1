"""A calibrated model of one synchronous training step, to scale past the machines we have.

This host has one machine and two cores; the study's question is how each framework scales
to a thousand nodes. So, as performance engineers do: measure each framework's
communication library apart (``dlscale.commbench``: message sizes 1 KB-256 MB, worlds of
2-8 emulated nodes, on loopback and on emulated links), measure compute in the study's own
runs, model each framework's synchronisation as the pattern it really runs, check the
model on runs it was not fitted on, and project with an uncertainty band.

Weak scaling: the batch per rank is fixed, so a rank's compute does not change with the
node count. One step on ``N`` nodes (``P = N x ranks_per_node`` ranks), gradient ``S``
bytes (parameters x 4)::

    step(N) = compute + comm(N) + offset

Compute and communication do not overlap here (the torch runner times the flat-gradient
all-reduce apart from DDP's bucketing; TensorFlow's collectives and Caffe-MPI's Allreduce
run after the backward pass; BigDL synchronises between two Spark jobs). ``compute`` is
measured: the median ``compute_s`` of the set-up and model at its smallest world.
``offset`` is the part of a run's exposed communication (``step_s - compute_s``) that the
library alone does not explain (the runner's own barrier, flattening, Python between
calls, copies of the gradient in and out of the library's buffer), from the study's
host-network runs of that set-up: their measured exposed time minus the model's library
time, fitted as ``o_0 + o_1·(rho(P) - 1) + o_2·S·rho(P)`` (``with_offset``,
``offset_fit``): ranks time-sharing the host's cores wait for the one the scheduler ran
last (``o_1``, where the runs span two or more levels of ``rho``), and the runner's copies
cost per gradient byte (``o_2``, where the runs have two or more gradient sizes: on the
quiet host AlexNet's 244 MB left 0.18-0.87 s a step that LeNet's 1.7 MB did not), else
the median; a projection (nodes with cores of their own)
takes it from the synchronisation the runner timed skew-free (``comm_s``, after a barrier:
the wait for the slowest rank on a shared 2-core host is that host's, not the pattern's)
of the runs with at most one rank per core, ``p_0 + p_2·S``, never below 0. It is, with BigDL's
per-iteration Spark cost (below), the only thing fitted on training runs.

The terms of ``comm`` and where each comes from
-----------------------------------------------
Every library term is fitted on the micro-benchmarks (``fit_commbench``) by non-negative
least squares on relative residuals (``scipy.optimize.nnls``; each point's error divided
by its measurement, so microseconds count as much as seconds). On this host a benchmark
of ``P`` processes shares ``C`` cores (``host_cores``, recorded with each row): parallel
phases run ``rho(P) = max(1, P/C)`` times slower, so the fit multiplies the terms that
every rank executes at once by ``rho``; a projection to nodes with their own cores uses
``rho = 1``. ``alpha``/``gamma`` below are the library's software costs per message and per
byte on this host (loopback included); a network adds its own per-hop latency ``a_n`` and
per-byte time ``g_n = 1/beta_n`` to every message and byte that crosses it
(``Link``; additive: the software path and the wire are not assumed to overlap).

* **ring all-reduce** (torch over gloo; TensorFlow ``MultiWorkerMirroredStrategy`` with
  ``CommunicationImplementation.RING``): reduce-scatter then all-gather, ``2(P-1)`` steps
  of ``S/P`` bytes (gloo's and TensorFlow's ring algorithms; Patarasuk & Yuan 2009)::

      comm = rho·(c + 2(P-1)·alpha + 2(P-1)/P·S·gamma) + 2(P-1)·a_n + 2(P-1)/P·S·g_n

  fitted on ``gloo``/``tf-ring`` ``allreduce`` rows.
* **Caffe-MPI**: one ``MPI_Allreduce`` per parameter blob (``dlscale.commbench.blobs``:
  8 for LeNet, 161 for ResNet-50), each with the algorithm Open MPI's tuned component
  picks for that blob's size and the world (``openmpi_allreduce_algorithm``: the fixed
  decision table of Open MPI 4.1's ``coll_tuned_decision_fixed.c``, commutative ops:
  recursive doubling for small blobs, Rabenseifner's reduce-scatter + all-gather for
  large ones, ring or segmented ring at 2-3 ranks), each algorithm with its own message
  and byte counts (``mpi_algorithm_terms``; Thakur, Rabenseifner & Gropp 2005)::

      comm = sum over blobs b of  rho·(c + m_alg·alpha + b_alg·gamma) + m_alg·a_n + b_alg·g_n

  fitted on ``mpi`` ``allreduce`` rows of one flat buffer (``c`` is paid per call, so a
  model of many blobs pays it many times); checked against the ``allreduce-blobs`` rows
  (Caffe's per-blob pattern timed as such) in ``commbench_fits.csv``.
* **parameter servers** (TensorFlow ``ParameterServerStrategy``, ``W`` workers, ``n_ps``
  servers on nodes ``0, 1, ...``): every worker pulls ``S`` and pushes ``S``; a server
  serves ``W·S/n_ps`` each way. The micro-benchmark (one server, ``W`` workers) gives a
  fixed cost, a per-worker cost (the coordinator schedules one closure per worker) and
  two per-byte costs, one per worker's bytes and one per server's bytes (the bottleneck)::

      host part = c + W·a_w + S·gamma_w + W·S/n_ps·gamma_s

  On a network the busiest link carries the pulls of every remote worker from the
  server's node, plus the chief's input batches (the chief shares node 0 with server 0
  and feeds every worker its uint8 batch), and the pushes: on a real switched network
  the server's ingress port carries every remote worker's push; on the emulated one
  (``tc tbf`` shapes egress only) a push crosses only its worker's own link::

      wire = 2·a_n + (R·S/n_ps + R·B_in + push)·g_n,  R = W - (workers on node 0),
      push = R·S/n_ps (real network) or ranks_per_node·S (emulated)

* **BigDL** (``DistriOptimizer``: per iteration two Spark jobs, one task per executor:
  the first fetches the weights, computes and puts the gradient slices in the block
  manager, the second fetches and sums its gradient slice from every other executor,
  updates and puts its weight slice; BigDL's ``optim/DistriOptimizer.scala``): the Spark
  driver schedules, launches and collects one task per executor for each job, so the
  scheduling grows with the executors ``N``; the exchange is ``2(N-1)`` block fetches of
  ``S/N``, where BigDL moves its parameters as FP16 (``FP16CompressedTensor`` in its
  ``AllReduceParameter``: ``S = 2 x parameters`` bytes, half the float32 gradient;
  ``BIGDL_WIRE_BYTES_PER_PARAMETER``). The exchange from the ``shuffle`` rows (an
  all-to-all block exchange of raw bytes); the per-iteration Spark cost ``spark(N)``
  (``spark_step_cost``)::

      comm = spark(N) + rho·(2(N-1)·alpha_blk + 2(N-1)/N·S·gamma_blk)
             + 2(N-1)·a_n + 2(N-1)/N·S·g_n

  ``spark(N) = s_0 + s_1·N`` **from BigDL's host-network training runs** wherever the study
  has them at two or more executor counts (``fit_spark_step``: each run's exposed time less
  the modelled exchange, a line with ``s_0, s_1 >= 0`` by ``scipy.optimize.lsq_linear``). A
  training iteration's Spark cost grows far faster with the executors than the
  micro-benchmark's (measured 0.14, 0.30, 0.51 s at 1, 2, 4 executors, against about 12 ms
  per executor for a JVM-only job): a real task deserialises the model and fetches the
  weights, and the driver waits for the slowest executor. On this 2-core host the runs'
  slope carries the contention of ``N`` JVMs too, and the projection keeps it (nothing
  measured separates the two). The line is what the exchange model leaves of the runs'
  growth, so it is only as good as the ``shuffle`` fit: a shuffle sweep at 1-2 executors
  can fit the exchange's per-message cost so high that it takes all the growth (seen on
  one sweep: ``s_1 = 0``, validation errors doubled); 1, 2 and 4 pin it. Only where the
  runs cannot pin a slope (one executor count,
  the default study's 1-2 executors pin one only just) does it fall back to the
  micro-benchmark's ``spark`` ``job`` rows (a JVM-only job of ``N`` tasks, ``t_job = j_0 +
  j_1·N``): ``spark(N) = 2·(j_0 + j_1·N)``. ``calibration.csv`` names the source
  (``spark_source``) with the fitted values and their residuals; the fit is redone in every
  bootstrap replicate on the resampled host runs (a replicate whose draw holds one executor
  count falls back as the model does).

Where a set-up has no micro-benchmark rows (a study that did not run them), its library
terms are fitted on its host-network training runs' exposed time instead (``source =
runs``: the old model, which cannot separate per-byte from per-message cost when the runs
have one gradient size), and ``offset`` is 0.

Networks (``Link``)
-------------------
A projection preset (``dlscale.networks``) gives ``a_n`` (its latency) and ``g_n``
(``1/bandwidth``); links carry traffic both ways at full rate (ingress shaped). An emulated
network (``dlscale.netns``: ``tc tbf`` on every node's egress) is the preset's rate after
a token bucket of ``B`` bytes (256 KiB here), so the busiest node of a step that sends
``b`` bytes in a row waits ``max(b - B, 0)·g_n`` (``Link.wire``; a 64 KiB message passes
a 1 Gbit/s emulated link at loopback speed, 4 MiB at the rate: measured with
``dlscale.commbench.tcp``). The bucket holds what the link's rate refilled since it last
sent (``Link.refilled``): in a training step, the compute before the synchronisation
(LeNet's 20-50 ms refill it at 100 Mbit/s); in a micro-benchmark's back-to-back loop,
nothing once an operation overflows it (``_emulated_parts``). A library's bytes may take
longer through the shaped link than its rate says: ``link_scale``, fitted per library on
the emulated micro-benchmarks that send at least 8 buckets per node (``fit_overlap``:
raw TCP and gloo 1.0, Open MPI 1.5-1.9 measured), applies to emulated links only; a
projection to a real network has no measurement of it and uses 1. tbf shapes egress only, and adds no latency: ``a_n`` is the
extra one-way latency a TCP ping-pong measured across it over loopback's, 0 on this
kernel, which has neither ``sch_netem`` nor ``fq``; ``dlscale.commbench.latency`` adds one
through NFQUEUE for the micro-benchmarks. ``latency_sensitivity`` shows how much the
projection depends on ``a_n``.

Validation, uncertainty
-----------------------
``validate`` predicts every run on an emulated network (held out: never used in a fit,
BigDL's Spark line included) from the micro-benchmarks and the host-network runs (the fit
set: micro-benchmarks on every network, training runs on the host network only): compute from the host runs of
the same layout (on one host, emulated nodes share its cores), communication from the
model with the host's contention and the emulated link. Each run is also predicted from
its own measured compute (``error_given_compute``): compute on a shared 2-core host
varies up to 3x between runs, which is the host's noise, while the model's job is the
communication and the scaling; both errors, and the compute's alone, are reported. The
unit of the summary is a cell (set-up, model, layout, network): the medians of its
repeats (``validation_cells``). ``bootstrap`` refits everything on
resampled calibration data (micro-benchmark cells within each library, world and
operation, and repeats within each cell; host runs; compute iterations) and gives every
projected number a 95% percentile band; ``efficiency50`` the node count where each
framework's efficiency first drops below 50%, with its band.

Everything here is arithmetic on small tables (numpy, pandas, scipy): it runs in the
analysis step, never at DAG time.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear, nnls

from dlscale import catalog
from dlscale.commbench import LIBRARIES
from dlscale.commbench.blobs import blob_bytes
from dlscale.netns import shaping_args
from dlscale.networks import HOST, PRESETS, NetworkPreset, emulated_preset

#: Learnable parameters per model (the same architecture in every framework, tested).
PARAMETERS: Mapping[str, int] = catalog.PARAMETERS
BYTES_PER_PARAMETER = 4
RING, PS, BIGDL = catalog.RING, catalog.PS, catalog.BIGDL
#: Synchronisation pattern of each set-up (a framework, or a framework and its strategy).
SETUP_PATTERN: Mapping[str, str] = catalog.SETUP_PATTERNS
LOOPBACK = "loopback"
#: Spark jobs per BigDL iteration (DistriOptimizer: compute + put, then aggregate + update).
BIGDL_JOBS_PER_ITERATION = 2
#: The op under which BigDL's per-iteration Spark cost fitted on its host runs is kept
#: (``fit_spark_step``; beside the micro-benchmark's ``job`` and ``shuffle``).
SPARK_STEP = "step"
#: Bytes of one input sample as the ps chief ships it to a worker (uint8 pixels).
SAMPLE_BYTES: Mapping[str, int] = {"mnist": 28 * 28, "fashion-mnist": 28 * 28, "imagenet": 3 * 224 * 224}
#: Percentiles of the bootstrap band.
BAND = (2.5, 97.5)

_WEIGHT_FLOOR_S = 1e-7
#: The smallest exposed time a host run's weight in the offset fit divides by: a ring's
#: exposed time is a difference of two medians (step - compute) and can come out at
#: microseconds by noise; the host's scheduling jitter is about a millisecond (LeNet's
#: 2-rank runs: 3-23 ms of residual), so a run weighs at most as a 1 ms one.
_OFFSET_SCALE_FLOOR_S = 1e-3

CALIBRATION_COLUMNS: tuple[str, ...] = (
    "setup",
    "runs",
    "world_sizes",
    "models",
    "overhead_s", "framework", "pattern", "library", "source", "c_s", "alpha_s", "beta_Bps",
    "per_worker_s", "server_beta_Bps", "job_s", "job_per_executor_s", "spark_source", "spark_step_s",
    "spark_step_per_executor_s", "spark_executors", "spark_points", "spark_rmse_s", "spark_rel_rmse",
    "spark_residuals_s", "offset_s", "offset_per_contention_s", "offset_per_byte_s", "projection_offset_s",
    "projection_offset_per_byte_s", "host_runs", "host_rel_rmse", "fitted", "note",
)  # fmt: skip
FIT_COLUMNS: tuple[str, ...] = (
    "library", "op", "coefficient", "value", "identified", "points", "worlds", "sizes",
    "rel_rmse", "max_abs_rel_error", "host_cores", "network",
)  # fmt: skip
VALIDATION_COLUMNS: tuple[str, ...] = (
    "run_id", "framework", "setup", "model", "nodes", "ranks_per_node", "world_size", "network",
    "batch_per_rank", "link_alpha_s", "link_beta_Bps", "link_scale", "measured_s", "predicted_s",
    "error", "measured_compute_s", "predicted_compute_s", "compute_source", "compute_error",
    "measured_exposed_s", "predicted_comm_s", "offset_s", "comm_error", "predicted_given_compute_s",
    "error_given_compute", "note",
)  # fmt: skip
#: A validation cell: the repeats of one set-up, model, layout and network (their medians
#: are the unit of validation: a repeat is a sample of the host's noise, not a new case).
VALIDATION_CELL: tuple[str, ...] = ("setup", "model", "network", "nodes", "ranks_per_node", "batch_per_rank")
SUMMARY_COLUMNS: tuple[str, ...] = (
    "setup", "framework", "runs", "predicted", "cells", "median_abs_error", "max_abs_error",
    "median_error", "worst_cell", "networks", "within_target", "median_abs_compute_error",
    "max_abs_compute_error", "median_abs_error_given_compute", "max_abs_error_given_compute",
    "median_error_given_compute", "within_target_given_compute", "worst_cell_given_compute",
    "communicating", "median_abs_comm_error", "max_abs_comm_error",
)  # fmt: skip
PROJECTION_COLUMNS: tuple[str, ...] = (
    "setup", "framework", "pattern", "model", "network", "alpha_s", "beta_Bps", "nodes",
    "ranks_per_node", "world_size", "batch_per_rank", "gradient_bytes", "compute_s",
    "comm_s", "step_s", "throughput", "speedup", "efficiency", "step_lo", "step_hi",
    "speedup_lo", "speedup_hi", "efficiency_lo", "efficiency_hi",
)  # fmt: skip
EFFICIENCY50_COLUMNS: tuple[str, ...] = (
    "setup", "framework", "model", "network", "nodes50", "nodes50_lo", "nodes50_hi",
    "above_max_share", "max_nodes", "summary",
)  # fmt: skip
SENSITIVITY_COLUMNS: tuple[str, ...] = (
    "setup", "framework", "model", "network", "latency_us", "nodes", "efficiency", "nodes50",
)  # fmt: skip
#: Target of the validation: median |error| per framework on held-out runs.
VALIDATION_TARGET = 0.10


# --- message sizes and the patterns -----------------------------------------------------------


def gradient_bytes(model: str) -> int:
    """Bytes of one full gradient of ``model`` (float32 parameters)."""
    return PARAMETERS[model] * BYTES_PER_PARAMETER


def contention(ranks: Any, cores: int | None) -> Any:
    """``rho = max(1, ranks/cores)``: how much slower a phase every rank runs at once gets
    when ``ranks`` processes share ``cores`` (1 with ``cores=None``: a node of its own each)."""
    ranks = np.asarray(ranks, dtype="float64")
    if not cores:
        return np.ones_like(ranks)
    return np.maximum(1.0, ranks / float(cores))


#: Open MPI 4.1 coll/tuned fixed decision for MPI_Allreduce with a commutative op:
#: (communicator size below which the row applies, ((message bytes below, algorithm), ...)).
#: Algorithms: 1 basic linear, 2 non-overlapping (reduce + bcast), 3 recursive doubling,
#: 4 ring, 5 segmented ring, 6 Rabenseifner.
OPENMPI_ALLREDUCE_DECISION: tuple[tuple[float, tuple[tuple[float, int], ...]], ...] = (
    (4, ((8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5), (math.inf, 6))),
    (8, ((16, 4), (8192, 3), (math.inf, 6))),
    (16, ((8192, 3), (math.inf, 6))),
    (32, ((64, 5), (4096, 3), (math.inf, 6))),
    (64, ((128, 5), (math.inf, 6))),
    (128, ((262144, 3), (math.inf, 6))),
    (256, ((131072, 2), (262144, 3), (math.inf, 6))),
    (512, ((4096, 2), (math.inf, 6))),
    (2048, ((2048, 2), (16384, 3), (math.inf, 6))),
    (4096, ((2048, 2), (4096, 5), (16384, 3), (math.inf, 6))),
    (math.inf, ((2048, 2), (16384, 5), (32768, 3), (math.inf, 6))),
)
MPI_ALGORITHMS: Mapping[int, str] = {
    1: "basic linear", 2: "non-overlapping", 3: "recursive doubling", 4: "ring", 5: "segmented ring",
    6: "Rabenseifner",
}  # fmt: skip


def openmpi_allreduce_algorithm(ranks: Any, nbytes: Any) -> np.ndarray:
    """The algorithm Open MPI 4.1's tuned component picks for an all-reduce (vectorised)."""
    p = np.asarray(ranks, dtype="float64")
    s = np.asarray(nbytes, dtype="float64")
    p, s = np.broadcast_arrays(p, s)
    out = np.zeros(p.shape, dtype="int64")
    done = np.zeros(p.shape, dtype=bool)
    for below_p, rows in OPENMPI_ALLREDUCE_DECISION:
        in_row = ~done & (p < below_p)
        picked = np.zeros(p.shape, dtype=bool)
        for below_s, alg in rows:
            hit = in_row & ~picked & (s < below_s)
            out[hit] = alg
            picked |= hit
        done |= in_row
    return out


def mpi_algorithm_terms(algorithm: Any, ranks: Any, nbytes: Any) -> tuple[np.ndarray, np.ndarray]:
    """Messages and bytes on one rank's critical path of Open MPI's all-reduce algorithms.

    ``P`` ranks, ``S`` bytes, ``p2`` the largest power of 2 <= P, ``x = 1`` when P is not
    one: recursive doubling ``log2 p2 + 2x`` messages of ``S``; ring and segmented ring
    ``2(P-1)`` of ``S/P``; Rabenseifner ``2 log2 p2 + 2x`` messages, ``2(1-1/p2)·S + 2x·S``
    bytes; basic linear ``2(P-1)`` of ``S``; reduce + broadcast ``2 ceil(log2 P)`` of ``S``.
    Zero at one rank.
    """
    alg = np.asarray(algorithm)
    p = np.asarray(ranks, dtype="float64")
    s = np.asarray(nbytes, dtype="float64")
    alg, p, s = np.broadcast_arrays(alg, p, s)
    safe = np.maximum(p, 1.0)
    p2 = 2.0 ** np.floor(np.log2(safe))
    lg = np.log2(p2)
    extra = (safe != p2).astype("float64")
    ceil_lg = np.ceil(np.log2(safe))
    ring_m, ring_b = 2 * (safe - 1), 2 * (safe - 1) / safe * s
    messages = np.select(
        [alg == 1, alg == 2, alg == 3, alg == 6],
        [2 * (safe - 1), 2 * ceil_lg, lg + 2 * extra, 2 * lg + 2 * extra],
        ring_m,
    )
    nbytes_ = np.select(
        [alg == 1, alg == 2, alg == 3, alg == 6],
        [2 * (safe - 1) * s, 2 * ceil_lg * s, (lg + 2 * extra) * s, 2 * (1 - 1 / p2) * s + 2 * extra * s],
        ring_b,
    )
    alone = safe <= 1
    return np.where(alone, 0.0, messages), np.where(alone, 0.0, nbytes_)


def ring_terms(ranks: Any, nbytes: Any) -> tuple[np.ndarray, np.ndarray]:
    """Messages ``2(P-1)`` and bytes ``2(P-1)/P·S`` of a ring all-reduce (0 at one rank)."""
    p = np.maximum(np.asarray(ranks, dtype="float64"), 1.0)
    s = np.asarray(nbytes, dtype="float64")
    return 2 * (p - 1) + 0 * s, 2 * (p - 1) / p * s


# --- fitting ---------------------------------------------------------------------------------


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
    weights = 1.0 / np.maximum(np.abs(y), _WEIGHT_FLOOR_S)
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


def _fit(
    library: str, op: str, cells: pd.DataFrame, columns: dict[str, np.ndarray], order: Sequence[str]
) -> Fit:
    y = cells["seconds"].to_numpy(dtype="float64")
    coefficients, identified, predicted = nnls_fit(columns, y, order)
    rel = (predicted - y) / np.maximum(np.abs(y), _WEIGHT_FLOOR_S)
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


def _normalised(raw: pd.DataFrame) -> pd.DataFrame:
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
    frame = _normalised(raw)
    return frame.groupby(keys, as_index=False, sort=True).agg(
        seconds=("seconds", "median"), repeats=("seconds", "size"), host_cores=("host_cores", "max")
    )


def _host_cells(cells: pd.DataFrame, library: str, op: str, network: str = HOST) -> pd.DataFrame:
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
    pick = _host_cells(cells, library, op, network)
    if pick.empty:
        return None
    cores = int(pick["host_cores"].max()) or None
    made = design(library, op, pick["world"].to_numpy(), pick["nbytes"].to_numpy(), cores)
    if made is None:
        return None
    return _fit(library, op, pick, *made)


def predict_fit(fit: Fit, world: Any, nbytes: Any) -> np.ndarray:
    """A fit's time of its operation at each (world, bytes) on the host it was measured on."""
    made = design(fit.library, fit.op, world, nbytes, fit.host_cores or None)
    if made is None:
        return np.full(np.shape(nbytes), np.nan)
    columns, _ = made
    return sum(fit.get(name) * np.asarray(col, dtype="float64") for name, col in columns.items())


def fit_curves(fits: Mapping[tuple[str, str, str], Fit], points: int = 40) -> pd.DataFrame:
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


#: The operations fitted per library (``dlscale.commbench``'s rows).
LIBRARY_OPS: Mapping[str, tuple[str, ...]] = {
    "gloo": ("allreduce",),
    "tf-ring": ("allreduce",),
    "tf-ps": ("pushpull",),
    "mpi": ("allreduce",),
    "spark": ("job", "shuffle"),
    "tcp": ("pingpong",),
}


def fit_commbench(cells: pd.DataFrame) -> dict[tuple[str, str, str], Fit]:
    """Every library operation on every network it was measured on: ``(library, op, network)``.

    Library costs are fitted on the host only (cells on emulated networks are the checks'
    held-out data, ``commbench_checks``); TCP on every network (the links themselves).
    """
    fits: dict[tuple[str, str, str], Fit] = {}
    if cells.empty:
        return fits
    usable = cells[cells["algorithm"].eq("default") & cells["seconds"].gt(0)]
    for (library, op, network), group in usable.groupby(["library", "op", "network"], sort=True):
        if op not in LIBRARY_OPS.get(library, ()) or (library != "tcp" and network != HOST):
            continue
        cores = int(group["host_cores"].max()) or None
        made = design(library, op, group["world"].to_numpy(), group["nbytes"].to_numpy(), cores)
        if made is None:
            continue
        if network != HOST:  # the link's known rate beyond its bucket out: what is left is alpha
            wire = emulated_link(str(network)).wire(0, group["nbytes"].to_numpy(dtype="float64"))
            group = group.assign(seconds=np.maximum(group["seconds"].to_numpy() - wire, _WEIGHT_FLOOR_S))
        fits[(str(library), str(op), str(network))] = _fit(str(library), str(op), group, *made)
    return fit_overlap(cells, fits)


def fits_table(fits: Mapping[tuple[str, str, str], Fit]) -> pd.DataFrame:
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


# --- links ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """What a network adds to each message (``alpha_s``) and byte (``gamma_s_per_byte``)
    that crosses it, beyond the host's own costs; ``ingress_shaped``: a node's incoming
    traffic is limited too (a real network; False for ``tc tbf`` emulation)."""

    name: str
    alpha_s: float
    gamma_s_per_byte: float
    ingress_shaped: bool = True
    #: Bytes a link passes at once before its rate applies (``tc tbf``'s bucket, or what of
    #: it has refilled since the link last sent; 0 for a real network): a node whose step
    #: sends ``B`` bytes in one go waits ``(B - burst)/beta``.
    burst_bytes: float = 0.0
    #: The time per byte beyond the bucket relative to ``1/beta`` (``link_scale``: what a
    #: library achieves through ``tc tbf``, fitted on the emulated micro-benchmarks; 1 on a
    #: real network, where the projection has no measurement of it).
    wire_scale: float = 1.0
    #: An emulated network (``dlscale.netns``), not a projection preset.
    emulated: bool = False

    def wire(self, messages: Any, nbytes: Any) -> np.ndarray:
        """What the network adds to ``messages`` hops carrying ``nbytes`` in a row."""
        b = np.maximum(np.asarray(nbytes, dtype="float64") - self.burst_bytes, 0.0)
        return (
            np.asarray(messages, dtype="float64") * self.alpha_s + b * self.gamma_s_per_byte * self.wire_scale
        )

    def refilled(self, idle_s: float) -> Link:
        """This link after ``idle_s`` seconds without sending: ``tc tbf``'s bucket holds what
        its rate refilled in that time, at most its size (a training step's compute refills
        it between two synchronisations; a benchmark's back-to-back loop hardly at all)."""
        if self.gamma_s_per_byte <= 0 or not math.isfinite(idle_s):
            return self
        return dataclasses.replace(
            self, burst_bytes=min(self.burst_bytes, max(idle_s, 0.0) / self.gamma_s_per_byte)
        )

    @classmethod
    def host(cls) -> Link:
        return cls(HOST, 0.0, 0.0, True)

    @classmethod
    def of_preset(cls, preset: NetworkPreset, alpha_s: float | None = None) -> Link:
        gamma = 0.0 if math.isinf(preset.bandwidth_Bps) else 1.0 / preset.bandwidth_Bps
        return cls(preset.name, preset.latency_s if alpha_s is None else alpha_s, gamma, True)

    @property
    def beta_Bps(self) -> float:
        return math.inf if self.gamma_s_per_byte <= 0 else 1.0 / self.gamma_s_per_byte


def emulated_link(network: str, fits: Mapping[tuple[str, str, str], Fit] | None = None) -> Link:
    """The link an emulated network adds to the host (``dlscale.netns``): the preset's rate,
    the token bucket ``tc tbf`` is given (``netns.shaping_args``), egress only, and the extra
    one-way latency a TCP ping-pong measured across it over loopback (0 when not measured:
    no delay is emulated on this kernel)."""
    preset = emulated_preset(network.split("+", 1)[0])
    if preset is None:
        return Link.host()
    args = shaping_args(preset)
    burst = float(args[args.index("burst") + 1])
    alpha = 0.0
    here, host = (fits or {}).get(("tcp", "pingpong", network)), (fits or {}).get(("tcp", "pingpong", HOST))
    if here is not None and host is not None:
        alpha = max(here.get("alpha") - host.get("alpha"), 0.0)
    return Link(network, alpha, 1.0 / preset.bandwidth_Bps, False, burst, emulated=True)


def preset_named(name: str) -> NetworkPreset:
    """A projection preset by name (``loopback``: this host, no network added)."""
    if name == LOOPBACK:
        return NetworkPreset(LOOPBACK, 0.0, math.inf, False, "this host's loopback (the library costs alone)")
    if name in PRESETS:
        return PRESETS[name]
    preset = emulated_preset(name)
    if preset is None:
        return preset_named(LOOPBACK)
    return preset


# --- checks of the library model on micro-benchmarks it was not fitted on ---------------------

CHECK_COLUMNS: tuple[str, ...] = (
    "check", "library", "op", "network", "world", "nbytes", "model", "measured_s", "predicted_s", "error",
)  # fmt: skip


def hops(fit: Fit | None) -> float:
    """Network latencies a library pays per message of its pattern (``fit_hops``; 1 unfitted)."""
    return 1.0 if fit is None else float(fit.coefficients.get("hops", 1.0))


def _emulated_parts(
    cells: pd.DataFrame, fits: Mapping[tuple[str, str, str], Fit], latency_scale: float | None = None
) -> list[tuple[Any, Fit, tuple[float, ...]]]:
    """Every emulated-network cell the model can predict from a host fit: (cell, host fit,
    (fixed, per-byte, wire)). Parameter-server cells only with every worker active (which
    workers take fewer closures is not known, so neither are their links). The link's
    latency counts ``hops`` times per message (``latency_scale`` instead, when given).

    A cell whose node sends more than the bucket holds is taken as drained
    (``Link.refilled(0)``): a benchmark repeats its operation back to back, so after the
    first repeats such a node sends at the link's rate (measured, Open MPI on 4 emulated
    100 Mbit/s nodes, 64 KiB: 0.41, 2.0, 7.9, 7.9, 7.9 ms); a cell within the bucket as
    full (the loop's gaps refill what it spends: Open MPI's 64 KiB at 1 Gbit/s passes at
    loopback speed every repeat). Between the two, how much the gaps refill is not known,
    so cells that send less than ``LOOP_FIT_MIN_BUCKETS`` buckets per node are checked but
    not fitted (``fit_overlap``). The wire is returned at its nominal rate (``wire_scale`` 1)."""
    emulated = cells[cells["network"].ne(HOST) & cells["algorithm"].eq("default") & cells["seconds"].gt(0)]
    most_workers = emulated[emulated["op"].eq("pushpull")].groupby("network")["world"].max()
    out = []
    for row in emulated.itertuples(index=False):
        try:
            link = emulated_link(row.network, fits)
        except KeyError:
            continue
        p, size = float(row.world), float(row.nbytes)
        library = "tf-ps" if row.op == "pushpull" else row.library
        scale = hops(fits.get((library, row.op, HOST))) if latency_scale is None else latency_scale
        link = dataclasses.replace(link, alpha_s=link.alpha_s * scale)
        if row.op == "pingpong":
            host = fits.get(("tcp", "pingpong", HOST))
        elif row.op == "allreduce" and row.library in ("gloo", "tf-ring", "mpi"):
            host = fits.get((row.library, "allreduce", HOST))
        elif row.op == "pushpull" and row.world == most_workers.get(row.network):
            host = fits.get(("tf-ps", "pushpull", HOST))
        else:
            continue
        if host is None:
            continue

        def parts_on(link: Link, row=row, host=host, p=p, size=size) -> tuple[float, ...]:
            if row.op == "pingpong":
                made = (predict_fit(host, p, size), 0.0, link.wire(1, size))
            elif row.library == "mpi":
                made = mpi_parts(host, [p], [size], link, host.host_cores or None)
            elif row.op == "allreduce":
                made = ring_parts(host, p, size, link, host.host_cores or None)
            else:
                made = ps_parts(host, p, size, link)
            return tuple(float(np.ravel(v)[0]) for v in made)

        parts = parts_on(link)
        beyond = parts[2] > parts_on(dataclasses.replace(link, gamma_s_per_byte=0.0))[2]
        out.append((row, host, parts_on(link.refilled(0.0)) if beyond else parts))
    return out


#: Cells a benchmark loop sends fewer bytes per node than this many token buckets of
#: (``tc tbf``'s, 256 KiB) are not fitted: how full the loop's gaps leave the bucket decides
#: their time (measured: Open MPI's 64 KiB all-reduce on emulated 1 Gbit/s nodes passes at
#: loopback speed every repeat, 0.07 ms; at 100 Mbit/s it falls to the rate by the third).
#: At 8 buckets a full and an empty bucket differ by at most an eighth of the wire time.
LOOP_FIT_MIN_BUCKETS = 8.0
#: Bounds of the fitted wire scale (``fit_overlap``): a library cannot beat the link's
#: rate by more than the bucket lets it, nor is a 5x slowdown a rate any more.
LINK_SCALE_BOUNDS = (0.5, 5.0)


def link_scale(fit: Fit | None) -> float:
    """What a library's bytes take through an emulated link relative to its rate (1 unfitted)."""
    return 1.0 if fit is None else float(fit.coefficients.get("link_scale", 1.0))


def fit_overlap(
    cells: pd.DataFrame, fits: Mapping[tuple[str, str, str], Fit]
) -> dict[tuple[str, str, str], Fit]:
    """``fits`` with each library's ``overlap`` (0-1, see ``combine``) and ``link_scale``
    (its time per byte through ``tc tbf`` relative to the link's rate, ``Link.wire_scale``)
    fitted on its cells on emulated networks that send at least ``LOOP_FIT_MIN_BUCKETS``
    buckets per node (relative least squares, ``scipy.optimize.least_squares``); a library
    without such cells keeps 0 and 1. The only parameters the emulated micro-benchmarks fit:
    the rest of the model never sees them, and the training runs on emulated networks (the
    validation's held-out set) are never fitted.

    Why a scale: on the same shaped links raw TCP and gloo move 4 MiB at 1.00-1.04x the
    rate, Open MPI at 1.5-1.9x (its all-reduce and Caffe's per-blob pattern alike). The
    cause is Open MPI's rendezvous protocol for messages above the TCP BTL's 64 KiB eager
    limit: the sender waits for the receiver's reply, which queues behind the receiver's
    own data in its shaped egress queue (``tc tbf`` holds up to 100 ms). Measured, 2
    emulated 100 Mbit/s nodes, 4 MiB all-reduce, medians of 7, interleaved: 654-717 ms
    as shipped, 348-374 ms with the rendezvous off (``btl_tcp_eager_limit``, ``_rndv_eager_
    limit`` and ``_max_send_size`` at 16 MiB), the rate being 336 ms. It is the emulator's
    deep queue, not the network's rate: a projection to a real network uses 1.
    """
    from scipy.optimize import least_squares

    out = dict(fits)
    by_library: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for row, host, (fixed, per_byte, wire) in _emulated_parts(cells, fits):
        if host.library == "tcp":
            continue
        link = emulated_link(row.network)
        if wire < LOOP_FIT_MIN_BUCKETS * link.burst_bytes * link.gamma_s_per_byte:
            continue
        by_library.setdefault((host.library, host.op), []).append((fixed, per_byte, wire, float(row.seconds)))
    for (library, op), points in by_library.items():
        fixed, per_byte, wire, y = (np.array(v) for v in zip(*points, strict=True))

        def residuals(x: np.ndarray, fixed=fixed, per_byte=per_byte, wire=wire, y=y) -> np.ndarray:
            return (combine(fixed, per_byte, x[1] * wire, x[0]) - y) / y

        best = least_squares(
            residuals, x0=[0.0, 1.0], bounds=([0.0, LINK_SCALE_BOUNDS[0]], [1.0, LINK_SCALE_BOUNDS[1]])
        )
        fit = out[(library, op, HOST)]
        out[(library, op, HOST)] = dataclasses.replace(
            fit,
            coefficients={**fit.coefficients, "overlap": float(best.x[0]), "link_scale": float(best.x[1])},
            identified=(*fit.identified, "overlap", "link_scale"),
        )
    return fit_hops(cells, out)


def fit_hops(
    cells: pd.DataFrame, fits: Mapping[tuple[str, str, str], Fit]
) -> dict[tuple[str, str, str], Fit]:
    """``fits`` with each library's ``hops``: how many network latencies it pays per message
    of its pattern (a ring step that waits for an acknowledgement pays two), fitted on its
    cells on links with an added delay (``dlscale.commbench.latency``), 1 without them."""
    from scipy.optimize import minimize_scalar

    out = dict(fits)
    delayed = cells[cells["network"].str.contains(r"\+", regex=True)] if len(cells) else cells
    if delayed.empty:
        return out
    with_latency = _emulated_parts(delayed, out, latency_scale=1.0)
    without = _emulated_parts(delayed, out, latency_scale=0.0)
    by_library: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for (row, host, (fixed, per_byte, wire)), (_, _, (_, _, wire0)) in zip(
        with_latency, without, strict=True
    ):
        if host.library != "tcp" and wire > wire0:
            by_library.setdefault((host.library, host.op), []).append(
                (fixed, per_byte, wire0 * link_scale(host), wire - wire0, float(row.seconds))
            )
    for (library, op), points in by_library.items():
        fixed, per_byte, wire0, latency, y = (np.array(v) for v in zip(*points, strict=True))
        overlap = out[(library, op, HOST)].get("overlap")

        def loss(
            h: float, fixed=fixed, per_byte=per_byte, wire0=wire0, latency=latency, y=y, overlap=overlap
        ) -> float:
            return float(np.sum(((combine(fixed, per_byte, wire0 + h * latency, overlap) - y) / y) ** 2))

        best = minimize_scalar(loss, bounds=(0.5, 20.0), method="bounded")
        fit = out[(library, op, HOST)]
        out[(library, op, HOST)] = dataclasses.replace(
            fit,
            coefficients={**fit.coefficients, "hops": float(best.x)},
            identified=(*fit.identified, "hops"),
        )
    return out


def commbench_checks(cells: pd.DataFrame, fits: Mapping[tuple[str, str, str], Fit]) -> pd.DataFrame:
    """The library fits against benchmark cells they were not fitted on (``commbench_checks.csv``).

    ``blobs``: Caffe's per-blob pattern as measured (``allreduce-blobs``) against the sum
    over blobs of the flat-buffer fit (does one fit of ``mpi`` explain many small calls?).
    ``emulated``: every cell on an emulated network against the host fit plus the link
    (``emulated_link``: its rate, the bucket drained by the back-to-back loop, egress only)
    and the library's overlap and link scale (its two parameters fitted on these cells,
    on the ones sending ``LOOP_FIT_MIN_BUCKETS`` buckets or more).
    """
    rows: list[dict[str, Any]] = []
    if cells.empty:
        return pd.DataFrame(columns=list(CHECK_COLUMNS))
    mpi = fits.get(("mpi", "allreduce", HOST))
    if mpi is not None:
        for row in _host_cells(cells, "mpi", "allreduce-blobs").itertuples(index=False):
            predicted = float(
                mpi_comm(mpi, row.model, np.array([row.world]), Link.host(), mpi.host_cores or None)[0]
            )
            rows.append(_check("blobs", row, predicted))
    for row, host, (fixed, per_byte, wire) in _emulated_parts(cells, fits):
        predicted = combine(fixed, per_byte, link_scale(host) * wire, host.get("overlap"))
        rows.append(_check("emulated", row, float(predicted)))
    return pd.DataFrame(rows, columns=list(CHECK_COLUMNS))


def _check(kind: str, row: Any, predicted: float) -> dict[str, Any]:
    return {
        "check": kind, "library": row.library, "op": row.op, "network": row.network, "world": int(row.world),
        "nbytes": int(row.nbytes), "model": row.model, "measured_s": float(row.seconds), "predicted_s": predicted,
        "error": predicted / float(row.seconds) - 1.0,
    }  # fmt: skip


# --- per-set-up calibration -----------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """Everything that predicts one set-up's communication (see the module docstring)."""

    setup: str
    pattern: str
    library: str
    source: str  # "commbench" or "runs"
    fits: Mapping[str, Fit]  # op -> fit ("allreduce", "pushpull", "job", "shuffle")
    offset_s: float = 0.0
    #: What the offset gains per unit of the host's oversubscription ``rho(P) - 1`` (ranks
    #: time-sharing its cores wait for the one the scheduler ran last): 0 for BigDL, whose
    #: Spark line in the executors already carries it, and where the host runs do not span
    #: two contention levels.
    offset_per_contention_s: float = 0.0
    #: What the offset gains per byte of the gradient, at one rank per core (every rank
    #: copies its gradient in and out of the library's buffer at once, so on this host it
    #: is slowed by ``rho`` like the library's per-byte work): 0 for BigDL and where the
    #: host runs have one gradient size.
    offset_per_byte_s: float = 0.0
    host_runs: int = 0
    #: The offset a projection uses (nodes with cores of their own): from the skew-free
    #: synchronisation time of host runs with at most one rank per core,
    #: ``projection_offset_s + projection_offset_per_byte_s·S``, never negative.
    projection_offset_s: float = 0.0
    projection_offset_per_byte_s: float = 0.0
    host_rel_rmse: float = math.nan
    note: str = ""
    world_sizes: tuple[int, ...] = ()
    models: tuple[str, ...] = ()

    def offset(
        self, nodes: Any, ranks_per_node: int = 1, projected: bool = False, nbytes: float = 0.0
    ) -> np.ndarray:
        """The offset where the set-up synchronises (a ring of one rank does not) for a
        gradient of ``nbytes``: the host's at the run's oversubscription (``offset_s +
        offset_per_contention_s·(rho - 1) + offset_per_byte_s·S·rho``, ``rho`` of the ranks
        that share the host's cores) for validation; for nodes with cores of their own
        ``max(projection_offset_s + projection_offset_per_byte_s·S, 0)``."""
        p = np.asarray(nodes, dtype="float64") * ranks_per_node
        if projected:
            value = np.full_like(
                p, max(self.projection_offset_s + self.projection_offset_per_byte_s * nbytes, 0.0)
            )
        else:  # (BigDL's contention and per-byte terms are 0: see ``with_offset``)
            rho = contention(p, self.host_cores or None)
            value = (
                self.offset_s
                + self.offset_per_contention_s * (rho - 1.0)
                + self.offset_per_byte_s * nbytes * rho
            )
        return np.where((p > 1) | (self.pattern != RING), value, 0.0)

    def coefficient(self, op: str, name: str) -> float:
        fit = self.fits.get(op)
        return 0.0 if fit is None else fit.get(name)

    @property
    def host_cores(self) -> int:
        return max((fit.host_cores for fit in self.fits.values()), default=0)


def combine(fixed: Any, per_byte: Any, wire: Any, overlap: float = 0.0) -> np.ndarray:
    """A library operation's time: its fixed (per call and message) host costs, its per-byte
    host costs and the wire's time, less the ``overlap`` share of whichever of the last two
    is shorter (0: software and wire in turn; 1: fully pipelined). ``overlap`` is fitted per
    library on the emulated-network micro-benchmarks (``fit_overlap``), 0 without them."""
    per_byte, wire = np.asarray(per_byte, dtype="float64"), np.asarray(wire, dtype="float64")
    return np.asarray(fixed, dtype="float64") + per_byte + wire - overlap * np.minimum(per_byte, wire)


def ring_parts(fit: Fit, ranks: Any, nbytes: Any, link: Link, cores: int | None) -> tuple[np.ndarray, ...]:
    """(fixed, per-byte, wire) of a ring all-reduce (gloo, TensorFlow's ring); 0 at one rank."""
    p = np.asarray(ranks, dtype="float64")
    m, b = ring_terms(p, nbytes)
    rho = contention(p, cores)
    alone = p <= 1
    return (
        np.where(alone, 0.0, rho * (fit.get("c") + m * fit.get("alpha"))),
        np.where(alone, 0.0, rho * b * fit.get("gamma")),
        np.where(alone, 0.0, link.wire(m, b)),
    )


def mpi_parts(
    fit: Fit, ranks: Any, blob_sizes: Sequence[float], link: Link, cores: int | None
) -> tuple[np.ndarray, ...]:
    """(fixed, per-byte, wire) of one Open MPI all-reduce per blob, each with the algorithm
    Open MPI picks for its size, at each of ``ranks``; the wire carries every blob's
    messages and bytes in a row."""
    p = np.atleast_1d(np.asarray(ranks, dtype="float64"))[:, None]
    sizes = np.asarray(blob_sizes, dtype="float64")[None, :]
    m, b = mpi_algorithm_terms(openmpi_allreduce_algorithm(p, sizes), p, sizes)
    rho = contention(p, cores)
    talks = p[:, 0] > 1
    fixed = np.where(talks, (rho * (fit.get("c") + m * fit.get("alpha"))).sum(axis=1), 0.0)
    per_byte = np.where(talks, (rho * b * fit.get("gamma")).sum(axis=1), 0.0)
    return fixed, per_byte, np.where(talks, link.wire(m.sum(axis=1), b.sum(axis=1)), 0.0)


def ps_parts(
    fit: Fit,
    workers: Any,
    nbytes: float,
    link: Link,
    ranks_per_node: int = 1,
    num_ps: int = 1,
    data_bytes: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """(fixed, per-byte, wire) of one parameter-server step: ``workers`` pull and push
    ``nbytes`` through ``num_ps`` servers on node 0 (and the chief there ships each remote
    worker ``data_bytes`` of input)."""
    p = np.asarray(workers, dtype="float64")
    fixed = fit.get("c") + p * fit.get("per_worker")
    per_byte = nbytes * fit.get("gamma_worker") + p * nbytes / num_ps * fit.get("gamma_server") + 0 * p
    remote = np.maximum(p - ranks_per_node, 0.0)
    pull = remote * (nbytes / num_ps + data_bytes)
    push = (
        remote * nbytes / num_ps
        if link.ingress_shaped
        else np.where(remote > 0, ranks_per_node * nbytes, 0.0)
    )
    # pulls leave the server's node, pushes cross the workers' links (emulated) or the
    # server's ingress (real): each link has its own budget (and bucket), paid in turn
    talks = np.where(remote > 0, 1.0, 0.0)
    return fixed, per_byte, link.wire(talks, pull) + link.wire(talks, push)


#: Bytes BigDL puts on the wire per parameter in its block exchange: its AllReduceParameter
#: stores and fetches gradient and weight slices as ``FP16CompressedTensor`` (BigDL's
#: ``parameters.AllReduceParameter``; ``SerializerInstance``'s default ``"fp16"``), half the
#: float32 gradient's bytes. On the quiet validation's emulated 100 Mbit/s links the float32
#: count over-predicted BigDL's AutoEncoder steps by 39-81%.
BIGDL_WIRE_BYTES_PER_PARAMETER = 2


def exchange_parts(
    fit: Fit, executors: Any, nbytes: float, link: Link, cores: int | None
) -> tuple[np.ndarray, ...]:
    """(fixed, per-byte, wire) of BigDL's block exchange: each executor fetches its slice
    from the ``N-1`` others (gradients), then their weight slices: two rounds of ``N-1``
    fetches of ``S/N``, in two Spark jobs (two bursts). ``nbytes`` is the float32 gradient's
    size; what moves is its FP16 form (``BIGDL_WIRE_BYTES_PER_PARAMETER``)."""
    n = np.asarray(executors, dtype="float64")
    rho = contention(n, cores)
    moved = np.asarray(nbytes, dtype="float64") * BIGDL_WIRE_BYTES_PER_PARAMETER / 4
    m, b = 2 * (n - 1), 2 * (n - 1) / n * moved
    return rho * m * fit.get("alpha"), rho * b * fit.get("gamma"), 2 * link.wire(m / 2, b / 2)


def mpi_comm(fit: Fit, model: str, ranks: np.ndarray, link: Link, cores: int | None) -> np.ndarray:
    """Caffe-MPI's per-blob all-reduces of ``model`` at each of ``ranks``, on ``link``."""
    return combine(*mpi_parts(fit, ranks, blob_bytes(model), link, cores), fit.get("overlap"))


def library_comm(
    cal: Calibration,
    model: str,
    nodes: Any,
    ranks_per_node: int,
    link: Link,
    cores: int | None,
    num_ps: int = 1,
    batch_per_rank: int = 0,
    dataset: str | None = None,
) -> np.ndarray:
    """The library's time of one step of ``cal``'s set-up at each node count (no offset).

    ``cores``: the host's cores when the ranks share one host (validation, host fit),
    None for nodes with cores of their own (projection). The network's part is
    ``link.wire(messages, bytes)`` of the busiest node's traffic in the step.
    """
    n = np.asarray(nodes, dtype="float64")
    p = n * ranks_per_node
    size = float(gradient_bytes(model))
    main = cal.fits.get({RING: "allreduce", PS: "pushpull", BIGDL: "shuffle"}[cal.pattern])
    link = dataclasses.replace(
        link, alpha_s=link.alpha_s * hops(main), wire_scale=link_scale(main) if link.emulated else 1.0
    )
    if cal.pattern == RING and cal.library == "mpi" and cal.source == "commbench":
        return mpi_comm(cal.fits["allreduce"], model, p, link, cores)
    if cal.pattern == RING:  # (Caffe fitted on runs: one flat ring stands in)
        fit = cal.fits["allreduce"]
        return combine(*ring_parts(fit, p, size, link, cores), fit.get("overlap"))
    if cal.pattern == PS:
        fit = cal.fits["pushpull"]
        data = batch_per_rank * SAMPLE_BYTES.get(dataset or "", 0)
        return combine(*ps_parts(fit, p, size, link, ranks_per_node, num_ps, data), fit.get("overlap"))
    if cal.pattern == BIGDL:
        shuffle = cal.fits["shuffle"]
        exchange = combine(*exchange_parts(shuffle, n, size, link, cores), shuffle.get("overlap"))
        return spark_step_cost(cal, n) + exchange
    raise ValueError(f"unknown synchronisation pattern {cal.pattern!r}")


def spark_step_cost(cal: Calibration, executors: Any) -> np.ndarray:
    """BigDL's per-iteration Spark cost (the driver scheduling, launching and collecting one
    task per executor for each of the iteration's jobs) at each of ``executors``.

    From the set-up's host runs where they pin it (``fit_spark_step``: two or more executor
    counts), else from the micro-benchmark's JVM-only jobs, ``2·(j_0 + j_1·N)``, else (library
    fitted on runs, ``source = runs``) the shuffle fit's constant: see the module docstring.
    """
    n = np.asarray(executors, dtype="float64")
    step, job = cal.fits.get(SPARK_STEP), cal.fits.get("job")
    if step is not None:
        return step.get("c") + n * step.get("per_executor")
    if job is not None:
        return BIGDL_JOBS_PER_ITERATION * (job.get("c") + n * job.get("per_task"))
    return np.full_like(n, cal.fits["shuffle"].get("c"))


def fit_spark_step(cal: Calibration, host_runs: pd.DataFrame) -> Fit | None:
    """BigDL's per-iteration Spark cost as a line in the executors ``N``, fitted on its
    host-network runs: ``exposed - exchange(N) = s_0 + s_1·N``, ``s_0, s_1 >= 0``.

    Why from runs: a training iteration's Spark cost grows far faster with the executors
    than a JVM-only job of ``N`` empty tasks (the micro-benchmark's ``j_1``, about 12 ms per
    executor here, against about 120 ms in training runs at 1-4 executors), since a real
    task deserialises the model, fetches the weights and its driver waits for the slowest
    executor. The block exchange (``exchange_parts``, micro-benchmark ``shuffle`` fit, with
    the host's contention) is taken off each run's exposed time and a line with
    non-negative coefficients is fitted by bounded least squares (``scipy.optimize.lsq_linear``, exact ``bvls``;
    absolute residuals: the points are all tenths of a second). None where the runs cannot
    pin a slope (fewer than two executor counts) or the set-up is not BigDL's; the model
    then falls back to the micro-benchmark (``spark_step_cost``).

    Only host-network runs belong here (``validate``'s held-out runs are the emulated ones).
    On this shared host the runs' slope carries the contention of ``N`` JVMs on its cores; a
    projection to nodes with cores of their own keeps it (no measurement separates it).
    """
    if cal.pattern != BIGDL or "shuffle" not in cal.fits or host_runs.empty:
        return None
    group = host_runs[host_runs["exposed_s"].notna() & host_runs["network"].eq(HOST)]
    if group["nodes"].nunique() < 2:
        return None
    shuffle = cal.fits["shuffle"]
    n = group["nodes"].to_numpy(dtype="float64")
    size = group["gradient_bytes"].to_numpy(dtype="float64")
    exchange = combine(
        *exchange_parts(shuffle, n, size, Link.host(), cal.host_cores or None), shuffle.get("overlap")
    )
    measured = group["exposed_s"].to_numpy(dtype="float64")
    design_matrix = np.column_stack([np.ones_like(n), n])
    solution = lsq_linear(design_matrix, measured - exchange, bounds=(0.0, np.inf), method="bvls").x
    residual = measured - (exchange + design_matrix @ solution)
    rel = residual / np.maximum(np.abs(measured), _WEIGHT_FLOOR_S)
    by_count = pd.Series(residual).groupby(n.astype("int64")).median()
    return Fit(
        library=cal.library,
        op=SPARK_STEP,
        coefficients={"c": float(solution[0]), "per_executor": float(solution[1])},
        identified=("c", "per_executor"),
        points=len(group),
        worlds=tuple(int(w) for w in sorted(set(n.astype("int64")))),
        sizes=tuple(int(s) for s in sorted(set(size))),
        rel_rmse=float(np.sqrt(np.mean(rel**2))),
        max_abs_rel_error=float(np.max(np.abs(rel))),
        host_cores=cal.host_cores,
        network=HOST,
        rmse_s=float(np.sqrt(np.mean(residual**2))),
        residuals_s=tuple((int(k), float(v)) for k, v in by_count.items()),
    )


def with_spark_step(cal: Calibration, host_runs: pd.DataFrame) -> Calibration:
    """``cal`` with BigDL's per-iteration Spark cost from its host runs where they pin it
    (``fit_spark_step``), and a note of the term's source; other set-ups unchanged."""
    if cal.pattern != BIGDL:
        return cal
    step = fit_spark_step(cal, host_runs)
    counts = sorted(int(c) for c in host_runs["nodes"].unique()) if len(host_runs) else []
    if step is None:
        where = f"at one executor count ({counts[0]})" if counts else "none"
        return dataclasses.replace(
            cal, note=f"Spark per-iteration cost from the micro-benchmark (host runs: {where})"
        )
    return dataclasses.replace(
        cal,
        fits={**cal.fits, SPARK_STEP: step},
        note=f"Spark per-iteration cost from {step.points} host runs at {';'.join(map(str, step.worlds))} executors",
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


def peers_of(pattern: str, nodes: int, ranks_per_node: int) -> int:
    """Who exchanges gradients: every rank (ring, ps) or one executor per node (BigDL)."""
    return int(nodes) if pattern == BIGDL else int(nodes) * int(ranks_per_node)


MEASURED_COLUMNS = (
    "run_id", "framework", "setup", "pattern", "model", "dataset", "network", "nodes", "ranks_per_node",
    "world_size", "batch_per_rank", "step_s", "compute_s", "exposed_s", "sync_s", "gradient_bytes",
)  # fmt: skip


def pool_studies(own: pd.DataFrame, studies: Sequence[str], tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """This study's table (runs or iterations) with other studies' (``projection.pool_studies``):
    one calibration, validated on every study's held-out runs. A pooled row's ``run_id``
    gets its study's directory name as a prefix (``validation-quiet:torch/lenet/...``), so
    runs of the same cell in two studies stay two runs. A table without ``run_id`` is an
    error, not a silent merge."""
    if len(studies) != len(tables):
        raise ValueError(f"{len(studies)} pooled studies but {len(tables)} tables")
    frames = [own]
    for study, table in zip(studies, tables, strict=True):
        if "run_id" not in table.columns:
            raise ValueError(f"pooled study {study!r}: its table has no run_id column")
        label = Path(study.rstrip("/")).name or study
        frames.append(table.assign(run_id=label + ":" + table["run_id"].astype(str)))
    return pd.concat([f for f in frames if len(f)] or [own], ignore_index=True)


def runs_of(runs: pd.DataFrame, frameworks: Iterable[str]) -> pd.DataFrame:
    """The rows of ``runs`` of these frameworks (a pooled study's, for this study's)."""
    if "framework" not in runs:
        raise ValueError("a runs table without a framework column")
    return runs[runs["framework"].isin(set(frameworks))]


def measured_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok runs the model knows (set-up and model in the catalog), with set-up, pattern,
    gradient bytes and ``exposed_s`` (median ``step_s - compute_s``; ``comm_s`` if unsplit).

    Contended runs (``contended``: other work took the host's CPUs while they were timed,
    ``dlscale.contention``) take no part, in calibration or validation: their time is that
    work's too, which no term of the model stands for.
    """
    if runs.empty or "status" not in runs:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in MEASURED_COLUMNS})
    contended = runs["contended"] if "contended" in runs else pd.Series(False, index=runs.index)
    contended = contended.astype(object).where(contended.notna(), False).astype(bool)
    ok = runs[runs["status"].eq("ok") & runs["step_s"].notna() & ~contended].copy()
    versions = ok["versions"] if "versions" in ok else pd.Series(None, index=ok.index)
    ok["setup"] = [setup_of(fw, v) for fw, v in zip(ok["framework"], versions, strict=True)]
    ok = ok[ok["setup"].isin(list(SETUP_PATTERN)) & ok["model"].isin(list(PARAMETERS))].copy()
    ok["network"] = (
        (ok["network"] if "network" in ok else pd.Series(HOST, index=ok.index)).fillna(HOST).astype(str)
    )
    if "dataset" not in ok:
        ok["dataset"] = ok["model"].map(lambda m: catalog.MODELS[m].datasets[0])
    ok["pattern"] = ok["setup"].map(SETUP_PATTERN)
    for name in ("nodes", "ranks_per_node", "world_size", "batch_per_rank"):
        ok[name] = ok[name].astype("int64")
    ok["gradient_bytes"] = ok["model"].map(gradient_bytes).astype("float64")
    if "compute_s" not in ok:
        ok["compute_s"] = np.nan
    exposed = ok["exposed_comm_s"] if "exposed_comm_s" in ok else pd.Series(np.nan, index=ok.index)
    ok["exposed_s"] = exposed.where(exposed.notna(), ok.get("comm_s", np.nan))
    # the synchronisation alone where the runner times it skew-free (comm_s), else exposed
    sync = ok["comm_s"] if "comm_s" in ok else pd.Series(np.nan, index=ok.index)
    ok["sync_s"] = sync.where(sync.notna(), ok["exposed_s"])
    return ok[list(MEASURED_COLUMNS)].reset_index(drop=True)


def _communicating(measured: pd.DataFrame) -> pd.Series:
    """Runs that synchronise: world > 1, or any world for ps and BigDL (they talk at 1 too)."""
    return measured["world_size"].gt(1) | measured["pattern"].isin([PS, BIGDL])


def _runs_fit(setup: str, pattern: str, host: pd.DataFrame, num_ps: int) -> Calibration | None:
    """The fallback: library terms fitted on the set-up's host runs (no micro-benchmarks)."""
    group = host[host["exposed_s"].notna() & host["exposed_s"].gt(0)]
    if group.empty:
        return None
    p = group["world_size"].to_numpy(dtype="float64")
    n = group["nodes"].to_numpy(dtype="float64")
    s = group["gradient_bytes"].to_numpy(dtype="float64")
    cells = pd.DataFrame({"seconds": group["exposed_s"].to_numpy(), "world": p, "nbytes": s})
    ones = np.ones_like(p)
    library = LIBRARIES.get(setup, setup)
    if pattern == RING:
        m, b = ring_terms(p, s)
        fit = _fit(library, "allreduce", cells, {"c": ones, "alpha": m, "gamma": b}, ("gamma", "c", "alpha"))
        fits = {"allreduce": fit}
    elif pattern == PS:
        columns = {"c": ones, "per_worker": p, "gamma_worker": s, "gamma_server": p * s / num_ps}
        fits = {
            "pushpull": _fit(
                library, "pushpull", cells, columns, ("gamma_server", "c", "gamma_worker", "per_worker")
            )
        }
    else:
        cells["world"] = n
        columns = {"c": ones, "alpha": 2 * (n - 1), "gamma": 2 * (n - 1) / n * s}
        fits = {"shuffle": _fit(library, "shuffle", cells, columns, ("gamma", "c", "alpha"))}
    fit = next(iter(fits.values()))
    return Calibration(
        setup=setup,
        pattern=pattern,
        library=library,
        source="runs",
        fits=fits,
        host_runs=len(group),
        host_rel_rmse=fit.rel_rmse,
        note="no micro-benchmarks: library terms fitted on the host runs' exposed time",
        world_sizes=tuple(sorted(int(w) for w in group["world_size"].unique())),
        models=tuple(sorted(str(m) for m in group["model"].unique())),
    )


def calibrate(
    runs: pd.DataFrame,
    fits: Mapping[tuple[str, str, str], Fit] | None = None,
    num_ps: int = 1,
) -> dict[str, Calibration]:
    """Per set-up: its library's micro-benchmark fits and the offset from its host runs
    (or, without micro-benchmarks, library terms fitted on the host runs)."""
    return calibrate_measured(measured_runs(runs), fits, num_ps)


def calibrate_measured(
    measured: pd.DataFrame, fits: Mapping[tuple[str, str, str], Fit] | None = None, num_ps: int = 1
) -> dict[str, Calibration]:
    """``calibrate`` on a table of ``measured_runs``."""
    fits = fits or {}
    host = measured[measured["network"].eq(HOST) & _communicating(measured)] if len(measured) else measured
    out: dict[str, Calibration] = {}
    setups = sorted(
        set(host["setup"]) | {s for s, lib in LIBRARIES.items() if any(k[0] == lib for k in fits)}
    )
    for setup in setups:
        pattern = SETUP_PATTERN.get(setup)
        if pattern is None:
            continue
        library = LIBRARIES[setup]
        own = {
            op: fits[(library, op, HOST)]
            for op in LIBRARY_OPS.get(library, ())
            if (library, op, HOST) in fits
        }
        group = host[host["setup"].eq(setup)] if len(host) else host
        needed = {RING: "allreduce", PS: "pushpull", BIGDL: "shuffle"}[pattern]
        if needed not in own:
            cal = _runs_fit(setup, pattern, group, num_ps)
            if cal is not None:
                out[setup] = cal
            continue
        cal = with_spark_step(Calibration(setup, pattern, library, "commbench", own), group)
        out[setup] = with_offset(cal, group, num_ps)
    return out


def with_offset(cal: Calibration, host_runs: pd.DataFrame, num_ps: int = 1) -> Calibration:
    """``cal`` with its offset: what its host runs' exposed time has beyond the library model.

    On this host the ranks of a run share its cores, and the exposed time of a run with
    more ranks than cores holds the wait for the rank the scheduler ran last: measured on
    the quiet validation study (2 cores, LeNet and AutoEncoder), the residual of torch's,
    TensorFlow's and Caffe-MPI's host runs was 3-23 ms at 2 ranks, 22-59 ms at 4 and
    71-117 ms at 8, about linear in ``rho(P) - 1``; one median over them put 29-47 ms on
    every 2-rank prediction. And the runner copies the gradient in and out of the
    library's buffer, every rank at once: AlexNet's 244 MB left 0.18-0.87 s a step at 2
    ranks that LeNet's 1.7 MB did not. So the offset is ``o_0 + o_1·(rho - 1) +
    o_2·S·rho``, each term where the runs identify it (``offset_fit``), else their median.
    BigDL keeps the median: its Spark line in the executors is fitted on the same runs and
    already grows with them. The projection's offset is fitted the same way on the
    skew-free synchronisation of the runs with a core per rank (``p_0 + p_2·S``).
    """
    group = host_runs[host_runs["exposed_s"].notna()]
    if group.empty:
        return dataclasses.replace(cal, note="; ".join(filter(None, ("no host runs: offset 0", cal.note))))
    cores = cal.host_cores or None
    measured = group["exposed_s"].to_numpy(dtype="float64")
    modelled = np.empty(len(group))
    keys = ["model", "ranks_per_node", "batch_per_rank", "dataset"]
    for (model, rpn, batch, dataset), index in group.groupby(keys, sort=False).indices.items():
        nodes = group["nodes"].to_numpy()[index]
        modelled[index] = library_comm(
            cal, model, nodes, int(rpn), Link.host(), cores, num_ps, int(batch), dataset
        )
    residual = measured - modelled
    if cal.pattern == BIGDL:
        nbytes, rho_fit = np.zeros(len(group)), np.ones(len(group))
    else:
        nbytes = group["gradient_bytes"].to_numpy(dtype="float64")
        rho_fit = contention(group["world_size"].to_numpy(dtype="float64"), cores)
    offset, per_contention, per_byte = offset_fit(residual, rho_fit - 1.0, nbytes, rho_fit, measured)
    fitted = offset + per_contention * (rho_fit - 1.0) + per_byte * nbytes * rho_fit
    rel = (modelled + fitted - measured) / np.maximum(measured, _WEIGHT_FLOOR_S)
    # For nodes of their own: the synchronisation timed skew-free (``sync_s``: the wait for
    # the slowest rank is this shared host's), of runs whose ranks had a core each (with
    # more ranks than cores, the library's time is this host's contention too).
    sync = group["sync_s"].to_numpy(dtype="float64") if "sync_s" in group else measured
    uncontended = (group["world_size"].to_numpy() <= (cores or np.inf)) & np.isfinite(sync)
    projected, projected_per_byte = 0.0, 0.0
    if uncontended.any():
        own = uncontended
        projected, _, projected_per_byte = offset_fit(
            (sync - modelled)[own], np.zeros(own.sum()), nbytes[own], scale=sync[own]
        )
        if projected_per_byte == 0.0:
            projected = max(projected, 0.0)
    return dataclasses.replace(
        cal,
        offset_s=offset,
        offset_per_contention_s=per_contention,
        offset_per_byte_s=per_byte,
        projection_offset_s=projected,
        projection_offset_per_byte_s=projected_per_byte,
        host_runs=len(group),
        host_rel_rmse=float(np.sqrt(np.mean(rel**2))),
        world_sizes=tuple(sorted(int(w) for w in group["world_size"].unique())),
        models=tuple(sorted(str(m) for m in group["model"].unique())),
    )


def offset_fit(
    residual: Any, excess: Any, nbytes: Any = None, rho: Any = None, scale: Any = None
) -> tuple[float, float, float]:
    """``(o_0, o_1, o_2)`` of ``residual ≈ o_0 + o_1·excess + o_2·nbytes·rho``, ``o_1, o_2 >=
    0`` (``scipy.optimize.lsq_linear``, exact ``bvls``), each run's error divided by its
    ``scale`` (its measured exposed time: a LeNet run's milliseconds count as much as an
    AlexNet run's seconds, as in the library fits; none: absolute errors).

    ``excess`` is each run's oversubscription of the host ``rho - 1``, ``nbytes`` its
    gradient's bytes. A term enters only where the runs identify it: ``o_1`` where
    ``excess`` takes two or more values, ``o_2`` where ``nbytes`` does (with one gradient
    size ``nbytes·rho`` is a multiple of the other two columns); with neither it is
    ``(median(residual), 0, 0)``, as robust as one level allows.
    """
    residual = np.asarray(residual, dtype="float64")
    excess = np.asarray(excess, dtype="float64")
    nbytes = np.zeros_like(residual) if nbytes is None else np.asarray(nbytes, dtype="float64")
    rho = np.ones_like(residual) if rho is None else np.asarray(rho, dtype="float64")
    scale = None if scale is None else np.asarray(scale, dtype="float64")
    columns = {"o_0": np.ones_like(residual)}
    if len(np.unique(np.round(excess, 9))) >= 2:
        columns["o_1"] = excess
    if len(np.unique(nbytes)) >= 2:
        columns["o_2"] = nbytes * rho
    if len(columns) == 1:
        return float(np.median(residual)), 0.0, 0.0
    lower = [-np.inf] + [0.0] * (len(columns) - 1)
    weight = (
        np.ones_like(residual) if scale is None else 1.0 / np.maximum(np.abs(scale), _OFFSET_SCALE_FLOOR_S)
    )
    design_matrix = np.column_stack(list(columns.values())) * weight[:, None]
    solution = lsq_linear(design_matrix, residual * weight, bounds=(lower, np.inf), method="bvls").x
    found = dict(zip(columns, solution, strict=True))
    return float(found["o_0"]), float(found.get("o_1", 0.0)), float(found.get("o_2", 0.0))


def calibration_table(calibrations: Mapping[str, Calibration]) -> pd.DataFrame:
    """One row per set-up (``calibration.csv``): the library terms used and the offset."""
    rows = []
    for cal in calibrations.values():
        main = cal.fits.get({RING: "allreduce", PS: "pushpull", BIGDL: "shuffle"}[cal.pattern])
        gamma = main.get("gamma" if cal.pattern != PS else "gamma_worker") if main else math.nan
        job = cal.fits.get("job")
        rows.append(
            {
                "setup": cal.setup, "runs": cal.host_runs, "world_sizes": ";".join(map(str, cal.world_sizes)),
                "models": ";".join(cal.models), "overhead_s": main.get("c") if main else math.nan,
                "framework": cal.setup.split("-")[0], "pattern": cal.pattern,
                "library": cal.library, "source": cal.source,
                "c_s": main.get("c") if main else math.nan,
                "alpha_s": main.get("alpha") if main else math.nan,
                "beta_Bps": (math.inf if gamma <= 0 else 1.0 / gamma) if main else math.nan,
                "per_worker_s": main.get("per_worker") if main and cal.pattern == PS else math.nan,
                "server_beta_Bps": (
                    (math.inf if main.get("gamma_server") <= 0 else 1.0 / main.get("gamma_server"))
                    if main and cal.pattern == PS else math.nan
                ),
                "job_s": job.get("c") if job else math.nan,
                "job_per_executor_s": job.get("per_task") if job else math.nan,
                **spark_step_columns(cal),
                "offset_s": cal.offset_s, "offset_per_contention_s": cal.offset_per_contention_s,
                "offset_per_byte_s": cal.offset_per_byte_s, "projection_offset_s": cal.projection_offset_s,
                "projection_offset_per_byte_s": cal.projection_offset_per_byte_s,
                "host_runs": cal.host_runs, "host_rel_rmse": cal.host_rel_rmse,
                "fitted": ";".join(f"{op}:{'+'.join(f.identified)}" for op, f in cal.fits.items()),
                "note": cal.note,
            }
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(CALIBRATION_COLUMNS))


def spark_step_columns(cal: Calibration) -> dict[str, Any]:
    """``calibration.csv``'s columns of BigDL's per-iteration Spark cost: its source
    (``runs``: fitted on host runs, ``commbench``: the micro-benchmark's two jobs,
    ``library-runs``: the whole library fitted on runs), the per-iteration fixed cost and
    slope in the executors, the executor counts and points it was fitted on, and its residuals
    (root mean square in seconds, relative, and the median residual per executor count)."""
    step, job = cal.fits.get(SPARK_STEP), cal.fits.get("job")
    empty = dict.fromkeys(
        ("spark_step_s", "spark_step_per_executor_s", "spark_points", "spark_rmse_s", "spark_rel_rmse"),
        math.nan,
    )
    if cal.pattern != BIGDL:
        return {"spark_source": "", "spark_executors": "", "spark_residuals_s": "", **empty}
    if step is not None:
        return {
            "spark_source": "runs", "spark_step_s": step.get("c"),
            "spark_step_per_executor_s": step.get("per_executor"), "spark_executors": ";".join(map(str, step.worlds)),
            "spark_points": step.points, "spark_rmse_s": step.rmse_s, "spark_rel_rmse": step.rel_rmse,
            "spark_residuals_s": ";".join(f"{k}:{v:+.4g}" for k, v in step.residuals_s),
        }  # fmt: skip
    if job is not None:
        return {
            "spark_source": "commbench", "spark_step_s": BIGDL_JOBS_PER_ITERATION * job.get("c"),
            "spark_step_per_executor_s": BIGDL_JOBS_PER_ITERATION * job.get("per_task"),
            "spark_executors": ";".join(map(str, job.worlds)), "spark_points": job.points,
            "spark_rmse_s": math.nan, "spark_rel_rmse": job.rel_rmse, "spark_residuals_s": "",
        }  # fmt: skip
    shuffle = cal.fits.get("shuffle")
    return {
        **empty, "spark_source": "library-runs" if cal.source == "runs" else "commbench-shuffle", "spark_step_s": shuffle.get("c") if shuffle else math.nan,
        "spark_step_per_executor_s": 0.0, "spark_executors": ";".join(map(str, cal.world_sizes)),
        "spark_residuals_s": "",
    }  # fmt: skip


# --- compute ----------------------------------------------------------------------------------


def compute_baselines(measured: pd.DataFrame) -> pd.DataFrame:
    """Per set-up, model and batch per rank: the median ``compute_s`` at the smallest world
    (any network: compute moves no gradient; a 1-rank ring run's whole step where unsplit)."""
    columns = [
        "setup",
        "model",
        "dataset",
        "batch_per_rank",
        "world_size",
        "ranks_per_node",
        "compute_s",
        "run_id",
    ]
    if measured.empty:
        return pd.DataFrame(columns=columns)
    frame = measured.copy()
    lone_ring = frame["pattern"].eq(RING) & frame["world_size"].eq(1)
    frame["compute"] = frame["compute_s"].where(frame["compute_s"].notna() | ~lone_ring, frame["step_s"])
    frame = frame[frame["compute"].notna()]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    keys = ["setup", "model", "batch_per_rank"]
    at = frame[frame["world_size"].eq(frame.groupby(keys)["world_size"].transform("min"))]
    table = at.groupby(keys, as_index=False).agg(
        dataset=("dataset", "first"),
        world_size=("world_size", "first"),
        ranks_per_node=("ranks_per_node", "min"),
        compute_s=("compute", "median"),
        run_id=("run_id", lambda ids: ";".join(sorted(ids))),
    )
    return table[columns]


# --- validation -------------------------------------------------------------------------------


def prediction_error(predicted: float, measured: float) -> float:
    """Relative error ``predicted / measured - 1`` (+0.1: the model predicts 10% too slow)."""
    if not measured or math.isnan(measured) or math.isnan(predicted):
        return math.nan
    return predicted / measured - 1.0


def validate(
    runs: pd.DataFrame,
    calibrations: Mapping[str, Calibration],
    fits: Mapping[tuple[str, str, str], Fit] | None = None,
    num_ps: int = 1,
) -> pd.DataFrame:
    """Predicted against measured step time of every held-out run (on an emulated network).

    Calibration never sees these runs: library terms come from the micro-benchmarks (or
    host runs), offsets from host runs. Two predictions per run:

    * ``predicted_s`` (``error``): everything predicted; compute from the host runs at the
      same layout when the study has them, else the smallest world's (``compute_source``;
      ``compute_error`` is that compute against the run's own);
    * ``predicted_given_compute_s`` (``error_given_compute``): the run's own measured
      compute plus the predicted communication, for runs that synchronise (a one-rank
      ring run's step is its compute: no prediction). On a shared host compute varies between
      runs (up to 3x seen), which says nothing about the model, whose job is the
      communication and the scaling: this is the model's error.

    The link's bucket holds what the compute before the synchronisation refilled
    (``Link.refilled``: the predicted compute, resp. the measured one). A run that cannot be
    predicted is a row with a note.
    """
    fits = fits or {}
    measured = measured_runs(runs)
    emulated = measured[measured["network"].ne(HOST)]
    if emulated.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in VALIDATION_COLUMNS})
    baselines = compute_baselines(measured).set_index(["setup", "model", "batch_per_rank"])
    host = measured[measured["network"].eq(HOST) & measured["compute_s"].notna()]
    same_layout = host.groupby(["setup", "model", "batch_per_rank", "nodes", "ranks_per_node"])[
        "compute_s"
    ].median()
    rows = []
    for run in emulated.itertuples(index=False):
        row: dict[str, Any] = {name: getattr(run, name, math.nan) for name in VALIDATION_COLUMNS}
        row.update(
            measured_s=run.step_s, measured_compute_s=run.compute_s, measured_exposed_s=run.exposed_s,
            predicted_s=math.nan, predicted_compute_s=math.nan, predicted_comm_s=math.nan, error=math.nan,
            comm_error=math.nan, offset_s=math.nan, compute_source="", note="", compute_error=math.nan,
            predicted_given_compute_s=math.nan, error_given_compute=math.nan, link_scale=math.nan,
        )  # fmt: skip
        try:
            link = emulated_link(run.network, fits)
        except KeyError:
            row["note"] = f"unknown network {run.network!r}"
            rows.append(row)
            continue
        row["link_alpha_s"], row["link_beta_Bps"] = link.alpha_s, link.beta_Bps
        layout = (run.setup, run.model, run.batch_per_rank, run.nodes, run.ranks_per_node)
        key = (run.setup, run.model, run.batch_per_rank)
        if layout in same_layout.index:
            row["predicted_compute_s"] = float(same_layout.loc[layout])
            row["compute_source"] = f"host runs at n{run.nodes}x{run.ranks_per_node}"
        elif key in baselines.index:
            entry = baselines.loc[key]
            row["predicted_compute_s"] = float(entry["compute_s"])
            row["compute_source"] = f"smallest world ({int(entry['world_size'])})"
        own_compute = float(run.compute_s) if pd.notna(run.compute_s) else math.nan
        row["compute_error"] = prediction_error(row["predicted_compute_s"], own_compute)
        cal = calibrations.get(run.setup)
        if cal is None:
            row["note"] = f"no micro-benchmarks or host-network runs of {run.setup} to calibrate from"
            rows.append(row)
            continue
        cores = cal.host_cores or None
        main = cal.fits.get({RING: "allreduce", PS: "pushpull", BIGDL: "shuffle"}[cal.pattern])
        row["link_scale"] = link_scale(main)
        offset = float(cal.offset([run.nodes], run.ranks_per_node, nbytes=gradient_bytes(run.model))[0])

        def comm_after(idle_s: float, link=link, cal=cal, run=run, cores=cores, offset=offset) -> float:
            refilled = link.refilled(idle_s if math.isfinite(idle_s) else 0.0)
            return offset + float(
                library_comm(cal, run.model, [run.nodes], run.ranks_per_node, refilled, cores, num_ps,
                             run.batch_per_rank, run.dataset)[0]
            )  # fmt: skip

        comm = comm_after(row["predicted_compute_s"])
        row["predicted_comm_s"], row["offset_s"] = comm, offset
        if pd.notna(run.exposed_s) and run.exposed_s > 0:
            row["comm_error"] = comm_after(own_compute) / run.exposed_s - 1.0
        talks = run.world_size > 1 or cal.pattern != RING
        if math.isfinite(own_compute) and talks:  # (a lone ring rank: nothing to predict)
            row["predicted_given_compute_s"] = own_compute + comm_after(own_compute)
            row["error_given_compute"] = prediction_error(row["predicted_given_compute_s"], run.step_s)
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


def validation_cells(validation: pd.DataFrame) -> pd.DataFrame:
    """The held-out runs by cell (``VALIDATION_CELL``): medians over the cell's repeats of
    what was measured and predicted, and the errors of those medians."""
    if validation.empty:
        return pd.DataFrame()
    numeric = [
        "measured_s", "predicted_s", "measured_compute_s", "predicted_compute_s", "measured_exposed_s",
        "predicted_comm_s", "predicted_given_compute_s",
    ]  # fmt: skip
    frame = validation.copy()
    for name in numeric:
        frame[name] = pd.to_numeric(frame[name], errors="coerce")
    keys = list(VALIDATION_CELL)
    cells = frame.groupby(keys, as_index=False, sort=True).agg(
        framework=("framework", "first"),
        repeats=("run_id", "size"),
        run_ids=("run_id", lambda ids: ";".join(sorted(ids))),
        **{name: (name, "median") for name in numeric},
    )

    def err(predicted: pd.Series, measured: pd.Series) -> pd.Series:
        return (predicted / measured.where(measured > 0) - 1.0).astype("float64")

    cells["error"] = err(cells["predicted_s"], cells["measured_s"])
    cells["compute_error"] = err(cells["predicted_compute_s"], cells["measured_compute_s"])
    cells["error_given_compute"] = err(cells["predicted_given_compute_s"], cells["measured_s"])
    communicating = frame[pd.to_numeric(frame["comm_error"], errors="coerce").notna()]
    comm = (
        communicating.groupby(keys)["comm_error"].median() if len(communicating) else pd.Series(dtype=float)
    )
    cells["comm_error"] = [comm.get(tuple(row), math.nan) for row in cells[keys].itertuples(index=False)]
    cells["cell"] = [
        f"{r.setup}/{r.model}/n{r.nodes}x{r.ranks_per_node}/{r.network}"
        for r in cells.itertuples(index=False)
    ]
    return cells


def validation_summary(validation: pd.DataFrame, target: float = VALIDATION_TARGET) -> pd.DataFrame:
    """Per set-up, over its held-out cells (``validation_cells``: medians of repeats):
    median and worst |error| of the step as wholly predicted, of the compute alone, of the
    step given the run's own compute (the model's error: ``*_given_compute``), and of the
    communication alone (``comm_error``: predicted against the exposed time, cells that
    communicate); ``within_target*``: that median at most ``target``."""
    if validation.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in SUMMARY_COLUMNS})
    cells = validation_cells(validation)
    rows = []
    for setup, group in cells.groupby("setup", sort=True):
        runs = validation[validation["setup"].eq(setup)]

        def stats(column: str, group=group) -> tuple[float, float, float, str]:
            values = pd.to_numeric(group[column], errors="coerce").dropna()
            if values.empty:
                return math.nan, math.nan, math.nan, ""
            worst = str(group.loc[values.abs().idxmax(), "cell"])
            return float(values.abs().median()), float(values.abs().max()), float(values.median()), worst

        step, compute = stats("error"), stats("compute_error")
        given, comm = stats("error_given_compute"), stats("comm_error")
        rows.append(
            {
                "setup": setup, "framework": group["framework"].iloc[0], "runs": len(runs),
                "predicted": int(pd.to_numeric(runs["error"], errors="coerce").notna().sum()),
                "cells": len(group), "median_abs_error": step[0], "max_abs_error": step[1],
                "median_error": step[2], "worst_cell": step[3],
                "networks": ";".join(sorted(group["network"].astype(str).unique())),
                "within_target": bool(step[0] <= target),
                "median_abs_compute_error": compute[0], "max_abs_compute_error": compute[1],
                "median_abs_error_given_compute": given[0], "max_abs_error_given_compute": given[1],
                "median_error_given_compute": given[2], "within_target_given_compute": bool(given[0] <= target),
                "worst_cell_given_compute": given[3],
                "communicating": int(pd.to_numeric(group["comm_error"], errors="coerce").notna().sum()),
                "median_abs_comm_error": comm[0], "max_abs_comm_error": comm[1],
            }
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


# --- projection -------------------------------------------------------------------------------


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


def step_times(
    cal: Calibration, curve: Curve, nodes: np.ndarray, ranks_per_node: int, link: Link, num_ps: int = 1
) -> np.ndarray:
    """Projected step time at each node count (nodes with their own cores: no contention)."""
    comm = library_comm(
        cal, curve.model, nodes, ranks_per_node, link, None, num_ps, curve.batch_per_rank, curve.dataset
    )
    offset = cal.offset(nodes, ranks_per_node, projected=True, nbytes=gradient_bytes(curve.model))
    return curve.compute_s + np.maximum(comm + offset, 0.0)


def first_below_half(nodes: np.ndarray, efficiency: np.ndarray) -> float:
    """The smallest node count whose efficiency is below 0.5 (inf when none is)."""
    below = np.nonzero(efficiency < 0.5)[0]
    return float(nodes[below[0]]) if len(below) else math.inf


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
) -> dict[tuple[str, str], tuple[np.ndarray, float]]:
    """Per curve: step times at ``counts`` and the 50%-efficiency node count (all integers
    up to ``max_nodes`` searched)."""
    every = np.arange(1, int(max_nodes) + 1, dtype="float64")
    out = {}
    for curve in items:
        cal = calibrations.get(curve.setup)
        if cal is None:
            continue
        steps_all = step_times(cal, curve, every, ranks_per_node, link, num_ps)
        efficiency = steps_all[0] / steps_all
        steps = steps_all[np.asarray(counts, dtype="int64") - 1]
        out[(curve.setup, curve.model)] = (steps, first_below_half(every, efficiency))
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
    samples: dict[tuple[str, str], list[tuple[np.ndarray, float]]] = {key: [] for key in point}
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
        steps, n50 = point[key]
        cal = calibrations[curve.setup]
        world = counts_arr * ranks_per_node
        throughput = world * curve.batch_per_rank / steps
        speedup = throughput / throughput[0]
        band: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        reps = samples[key]
        if reps:
            rep_steps = np.vstack([r[0] for r in reps])
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
        rep50 = np.array([r[1] for r in reps]) if reps else np.array([])
        e50.append(efficiency50_row(curve, network.name, n50, rep50, max_nodes))
    table = pd.DataFrame(rows, columns=list(PROJECTION_COLUMNS))
    return Projection(
        table,
        pd.DataFrame(e50, columns=list(EFFICIENCY50_COLUMNS)),
        len(replicates),
        {k: np.array([r[1] for r in v]) for k, v in samples.items()},
    )


def efficiency50_row(
    curve: Curve, network: str, n50: float, replicates: np.ndarray, max_nodes: int
) -> dict[str, Any]:
    """One row of ``efficiency50.csv``: the point estimate and the 95% band (NaN: beyond
    ``max_nodes``; ``above_max_share`` is the share of replicates that never drop below 50%)."""

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
    return {
        "setup": curve.setup, "framework": curve.setup.split("-")[0], "model": curve.model, "network": network,
        "nodes50": finite(n50), "nodes50_lo": finite(lo), "nodes50_hi": finite(hi),
        "above_max_share": share, "max_nodes": max_nodes, "summary": summary,
    }  # fmt: skip


# --- uncertainty: the bootstrap ------------------------------------------------------------------


_CELL_KEYS = ["library", "op", "network", "world", "nbytes", "parts", "model", "algorithm"]


class CellSampler:
    """Bootstrap draws of the micro-benchmark cells: within every (library, op, network,
    world, model, algorithm) stratum, cells drawn with replacement, and within each drawn
    cell its repeats, whose median is the cell's time. Built once; ``draw`` per replicate."""

    def __init__(self, raw: pd.DataFrame):
        self.cells = commbench_cells(raw)
        frame = _normalised(raw)
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


# --- latency -----------------------------------------------------------------------------------


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
        for (setup, model), (steps, n50) in point.items():
            rows.append(
                {
                    "setup": setup, "framework": setup.split("-")[0], "model": model, "network": network.name,
                    "latency_us": float(latency), "nodes": max_nodes, "efficiency": float(steps[0] / steps[-1]),
                    "nodes50": n50 if math.isfinite(n50) else math.nan,
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SENSITIVITY_COLUMNS))


__all__ = (
    "BIGDL",
    "CALIBRATION_COLUMNS",
    "CHECK_COLUMNS",
    "EFFICIENCY50_COLUMNS",
    "FIT_COLUMNS",
    "LOOPBACK",
    "PARAMETERS",
    "PROJECTION_COLUMNS",
    "PS",
    "RING",
    "SENSITIVITY_COLUMNS",
    "SETUP_PATTERN",
    "SUMMARY_COLUMNS",
    "VALIDATION_COLUMNS",
    "Calibration",
    "Curve",
    "Fit",
    "Link",
    "Projection",
    "commbench_checks",
    "CellSampler",
    "bootstrap",
    "calibrate",
    "calibrate_measured",
    "calibration_table",
    "fit_spark_step",
    "spark_step_cost",
    "spark_step_columns",
    "with_spark_step",
    "SPARK_STEP",
    "commbench_cells",
    "compute_baselines",
    "contention",
    "emulated_link",
    "fit_commbench",
    "design",
    "fit_curves",
    "fit_library",
    "fit_overlap",
    "fit_hops",
    "hops",
    "combine",
    "with_latency",
    "predict_fit",
    "fits_table",
    "gradient_bytes",
    "latency_sensitivity",
    "library_comm",
    "measured_runs",
    "mpi_algorithm_terms",
    "nnls_fit",
    "node_counts",
    "openmpi_allreduce_algorithm",
    "peers_of",
    "prediction_error",
    "preset_named",
    "project",
    "ring_terms",
    "setup_of",
    "validate",
    "validation_summary",
)
