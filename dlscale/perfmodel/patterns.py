"""What each set-up moves and how: gradient sizes, the host's contention, the message and
byte counts of the synchronisation patterns (ring, Open MPI's all-reduce algorithms).

The ground floor of the model: numbers from the catalog and the patterns' published
algorithms, nothing fitted (see ``docs/perfmodel.md`` for the derivation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from dlscale import catalog

#: Learnable parameters per model (the same architecture in every framework, tested).
PARAMETERS: Mapping[str, int] = catalog.PARAMETERS
BYTES_PER_PARAMETER = 4
RING, PS, BIGDL = catalog.RING, catalog.PS, catalog.BIGDL
#: Synchronisation pattern of each set-up (a framework, or a framework and its strategy).
SETUP_PATTERN: Mapping[str, str] = catalog.SETUP_PATTERNS
#: The library operation whose fit carries each pattern's synchronisation.
PATTERN_OP: Mapping[str, str] = MappingProxyType({RING: "allreduce", PS: "pushpull", BIGDL: "shuffle"})


#: Spark jobs per BigDL iteration (DistriOptimizer: compute + put, then aggregate + update).
BIGDL_JOBS_PER_ITERATION = 2
#: The op under which BigDL's per-iteration Spark cost fitted on its host runs is kept
#: (``fit_spark_step``; beside the micro-benchmark's ``job`` and ``shuffle``).
SPARK_STEP = "step"
#: Seconds the Spark driver spends on one block-location lookup (``GetLocations``), paid
#: in a row: each BigDL iteration, every executor fetches its ``N-1`` remote weight slices
#: and ``N-1`` remote gradient slices through ``BlockManager.getRemoteBytes``, which asks the
#: driver's ``BlockManagerMasterEndpoint`` (a ``ThreadSafeRpcEndpoint``: one message at a
#: time) where each block is (``bigdl_block_lookups``). Not measured by any source found:
#: fitted on the BigDL white paper's Cray Urika-XC points at 16-96 nodes (least squares of
#: the step ``N·batch/throughput`` on ``2N(N-1)``) and checked held out at 128-256 nodes
#: (median |error| 0.037, worst 0.067; ``docs/perfmodel.md``).
SPARK_BLOCK_LOOKUP_S = 2.2e-5
#: Bytes of one input sample as the ps chief ships it to a worker (uint8 pixels).
SAMPLE_BYTES: Mapping[str, int] = {"mnist": 28 * 28, "fashion-mnist": 28 * 28, "imagenet": 3 * 224 * 224}


#: Bytes BigDL puts on the wire per parameter in its block exchange: its AllReduceParameter
#: stores and fetches gradient and weight slices as ``FP16CompressedTensor`` (BigDL's
#: ``parameters.AllReduceParameter``; ``SerializerInstance``'s default ``"fp16"``), half the
#: float32 gradient's bytes.
BIGDL_WIRE_BYTES_PER_PARAMETER = 2


def bigdl_block_lookups(executors: Any) -> np.ndarray:
    """Block-location lookups the Spark driver serves per BigDL iteration: ``2N(N-1)``
    (``AllReduceParameter.getWeights`` and ``aggregateGradientPartition``: each of ``N``
    executors fetches one slice from each of the ``N-1`` others, twice; 0 at one)."""
    n = np.asarray(executors, dtype="float64")
    return 2.0 * n * np.maximum(n - 1.0, 0.0)


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
