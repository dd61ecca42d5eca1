"""One step's communication from a set-up's calibration: each pattern's fixed, per-byte and
wire parts, combined, plus the runner's offset (``Calibration.offset``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlscale.commbench.blobs import blob_bytes
from dlscale.perfmodel.fits import Fit
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.patterns import (
    BIGDL,
    BIGDL_JOBS_PER_ITERATION,
    BIGDL_WIRE_BYTES_PER_PARAMETER,
    PATTERN_OP,
    PS,
    RING,
    SAMPLE_BYTES,
    SPARK_BLOCK_LOOKUP_S,
    SPARK_STEP,
    bigdl_block_lookups,
    contention,
    gradient_bytes,
    mpi_algorithm_terms,
    openmpi_allreduce_algorithm,
    ring_terms,
)


def hops(fit: Fit | None) -> float:
    """Network latencies a library pays per message of its pattern (``fit_hops``; 1 unfitted)."""
    return 1.0 if fit is None else float(fit.coefficients.get("hops", 1.0))


def link_scale(fit: Fit | None) -> float:
    """What a library's bytes take through an emulated link relative to its rate (1 unfitted)."""
    return 1.0 if fit is None else float(fit.coefficients.get("link_scale", 1.0))


@dataclass(frozen=True)
class Gradient:
    """What one step synchronises when it is not a catalog model's (a published system's):
    the gradient's bytes and the blobs Caffe-MPI would all-reduce one by one (one flat blob
    where the model's layers are not known)."""

    nbytes: float
    blobs: tuple[float, ...]
    #: Bytes of the largest variable, which a parameter server holds whole (0: not known,
    #: the servers share the gradient evenly; ``ps_parts``).
    largest: float = 0.0

    @classmethod
    def flat(cls, nbytes: float, largest: float = 0.0) -> Gradient:
        return cls(float(nbytes), (float(nbytes),), float(largest))

    @classmethod
    def of_model(cls, model: str, bytes_per_parameter: float = 4.0) -> Gradient:
        """A catalog model's gradient at ``bytes_per_parameter`` (its blobs scaled alike)."""
        scale = bytes_per_parameter / 4.0
        blobs = tuple(float(b) * scale for b in blob_bytes(model))
        return cls(float(gradient_bytes(model)) * scale, blobs, max(blobs))


def gradient_size(model: str | Gradient) -> float:
    """Bytes of one full gradient of a catalog model (by name) or of a ``Gradient``."""
    return model.nbytes if isinstance(model, Gradient) else float(gradient_bytes(model))


def largest_variable(model: str | Gradient) -> float:
    """Bytes of the largest variable (a catalog model's largest blob; 0 where not known)."""
    return model.largest if isinstance(model, Gradient) else float(max(blob_bytes(model)))


def server_share(nbytes: float, num_ps: Any, largest: float = 0.0) -> np.ndarray:
    """Bytes the busiest of ``num_ps`` parameter servers holds: an even share ``S/n_ps``, but
    never less than the largest variable, which is placed whole on one server (TensorFlow's
    ``replica_device_setter`` places variables, it does not split them; ``docs/perfmodel.md``)."""
    return np.maximum(nbytes / np.asarray(num_ps, dtype="float64"), float(largest))


#: ``Calibration.source`` of a calibration with no fitted software cost: the pattern's
#: network-level model alone (the replay of a published system without a study).
NETWORK_ONLY = "network"


@dataclass(frozen=True)
class Calibration:
    """Everything that predicts one set-up's communication (``docs/perfmodel.md``)."""

    setup: str
    pattern: str
    library: str
    source: str  # "commbench", "runs" or NETWORK_ONLY
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


def ring_parts(
    fit: Fit, ranks: Any, nbytes: Any, link: Link, cores: int | None, ranks_per_node: int = 1
) -> tuple[np.ndarray, ...]:
    """(fixed, per-byte, wire) of a ring all-reduce (gloo, TensorFlow's ring); 0 at one rank.

    One flat ring of all ranks, ordered by node, so each node's link carries one rank's
    ``2(P-1)/P·S`` (NCCL's ring over GPUs; ``docs/perfmodel.md``); with
    ``link.local_ranks_off_link`` a ring within one node does not touch the link."""
    p = np.asarray(ranks, dtype="float64")
    m, b = ring_terms(p, nbytes)
    rho = contention(p, cores)
    alone = p <= 1
    off_link = alone | (link.local_ranks_off_link & (p <= ranks_per_node))
    return (
        np.where(alone, 0.0, rho * (fit.get("c") + m * fit.get("alpha"))),
        np.where(alone, 0.0, rho * b * fit.get("gamma")),
        np.where(off_link, 0.0, link.wire(m, b)),
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
    largest: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """(fixed, per-byte, wire) of one parameter-server step: ``workers`` pull and push
    ``nbytes`` through ``num_ps`` servers on node 0 (and the chief there ships each remote
    worker ``data_bytes`` of input); the busiest server holds ``server_share`` of it (at
    least the ``largest`` variable)."""
    p = np.asarray(workers, dtype="float64")
    share = server_share(nbytes, num_ps, largest)
    fixed = fit.get("c") + p * fit.get("per_worker")
    per_byte = nbytes * fit.get("gamma_worker") + p * share * fit.get("gamma_server") + 0 * p
    remote = np.maximum(p - ranks_per_node, 0.0)
    pull = remote * (share + data_bytes)
    push = remote * share if link.ingress_shaped else np.where(remote > 0, ranks_per_node * nbytes, 0.0)
    # pulls leave the server's node, pushes cross the workers' links (emulated) or the
    # server's ingress (real): each link has its own budget (and bucket), paid in turn
    talks = np.where(remote > 0, 1.0, 0.0)
    if link.full_duplex and link.ingress_shaped:
        # pushes and pulls pipelined on a full-duplex link: each direction of a server's
        # node carries its share for the remote workers and its own workers' traffic to
        # the other servers (egress: pulls served + own pushes; ingress: the mirror)
        own = np.where(
            remote > 0, ranks_per_node * nbytes * (1.0 - 1.0 / np.asarray(num_ps, dtype="float64")), 0.0
        )
        return fixed, per_byte, link.wire(talks, pull + own)
    return fixed, per_byte, link.wire(talks, pull) + link.wire(talks, push)


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
    model: str | Gradient,
    nodes: Any,
    ranks_per_node: int,
    link: Link,
    cores: int | None,
    num_ps: int = 1,
    batch_per_rank: int = 0,
    dataset: str | None = None,
) -> np.ndarray:
    """The library's time of one step of ``cal``'s set-up at each node count (no offset).

    ``model``: a catalog model by name, or a ``Gradient`` (a published system's). ``cores``:
    the host's cores when the ranks share one host (validation, host fit), None for nodes
    with cores of their own (projection). The network's part is ``link.wire(messages,
    bytes)`` of the busiest node's traffic in the step.
    """
    n = np.asarray(nodes, dtype="float64")
    p = n * ranks_per_node
    size = gradient_size(model)
    main = cal.fits.get(PATTERN_OP[cal.pattern])
    link = dataclasses.replace(
        link, alpha_s=link.alpha_s * hops(main), wire_scale=link_scale(main) if link.emulated else 1.0
    )
    if cal.pattern == RING and cal.library == "mpi" and cal.source in ("commbench", NETWORK_ONLY):
        fit = cal.fits["allreduce"]
        blobs = model.blobs if isinstance(model, Gradient) else blob_bytes(model)
        return combine(*mpi_parts(fit, p, blobs, link, cores), fit.get("overlap"))
    if cal.pattern == RING:  # (Caffe fitted on runs: one flat ring stands in)
        fit = cal.fits["allreduce"]
        return combine(*ring_parts(fit, p, size, link, cores, ranks_per_node), fit.get("overlap"))
    if cal.pattern == PS:
        fit = cal.fits["pushpull"]
        data = batch_per_rank * SAMPLE_BYTES.get(dataset or "", 0)
        parts = ps_parts(fit, p, size, link, ranks_per_node, num_ps, data, largest_variable(model))
        return combine(*parts, fit.get("overlap"))
    if cal.pattern == BIGDL:
        shuffle = cal.fits["shuffle"]
        exchange = combine(*exchange_parts(shuffle, n, size, link, cores), shuffle.get("overlap"))
        return spark_step_cost(cal, n) + exchange
    raise ValueError(f"unknown synchronisation pattern {cal.pattern!r}")


def spark_step_cost(cal: Calibration, executors: Any) -> np.ndarray:
    """BigDL's per-iteration Spark cost (the driver scheduling, launching and collecting one
    task per executor for each of the iteration's jobs, and serving the executors' block
    lookups) at each of ``executors``.

    The scheduling line from the set-up's host runs where they pin it (``fit_spark_step``:
    two or more executor counts), else from the micro-benchmark's JVM-only jobs,
    ``2·(j_0 + j_1·N)``, else (library fitted on runs, ``source = runs``) the shuffle fit's
    constant; plus the driver's ``2N(N-1)`` block-location lookups in a row,
    ``SPARK_BLOCK_LOOKUP_S`` each (``spark_lookup_cost``; ``docs/perfmodel.md``).
    """
    n = np.asarray(executors, dtype="float64")
    step, job = cal.fits.get(SPARK_STEP), cal.fits.get("job")
    if step is not None:
        line = step.get("c") + n * step.get("per_executor")
    elif job is not None:
        line = BIGDL_JOBS_PER_ITERATION * (job.get("c") + n * job.get("per_task"))
    else:
        line = np.full_like(n, cal.fits["shuffle"].get("c"))
    return line + spark_lookup_cost(n)


def spark_lookup_cost(executors: Any) -> np.ndarray:
    """The Spark driver's block-location lookups of one BigDL iteration, served one at a
    time: ``SPARK_BLOCK_LOOKUP_S·2N(N-1)`` (0 at one executor)."""
    return SPARK_BLOCK_LOOKUP_S * bigdl_block_lookups(executors)
