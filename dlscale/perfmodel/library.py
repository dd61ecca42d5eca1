"""The library model from the micro-benchmarks: host fits of every library operation, the
emulated links' ``overlap``, ``link_scale`` and ``hops``, and checks on held-out cells.

The emulated micro-benchmarks fit only those three parameters per library; the training
runs on emulated networks (the validation's held-out set) are never fitted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, minimize_scalar

from dlscale.networks import HOST
from dlscale.perfmodel.comm import combine, hops, link_scale, mpi_comm, mpi_parts, ps_parts, ring_parts
from dlscale.perfmodel.fits import (
    LIBRARY_OPS,
    WEIGHT_FLOOR_S,
    Fit,
    FitKey,
    Fits,
    design,
    fit_cells,
    host_cells,
    predict_fit,
)
from dlscale.perfmodel.links import Link, emulated_link


def fit_commbench(cells: pd.DataFrame) -> dict[FitKey, Fit]:
    """Every library operation on every network it was measured on: ``(library, op, network)``.

    Library costs are fitted on the host only (cells on emulated networks are the checks'
    held-out data, ``commbench_checks``); TCP on every network (the links themselves).
    """
    fits: dict[FitKey, Fit] = {}
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
            group = group.assign(seconds=np.maximum(group["seconds"].to_numpy() - wire, WEIGHT_FLOOR_S))
        fits[(str(library), str(op), str(network))] = fit_cells(str(library), str(op), group, *made)
    return fit_overlap(cells, fits)


CHECK_COLUMNS: tuple[str, ...] = (
    "check", "library", "op", "network", "world", "nbytes", "model", "measured_s", "predicted_s", "error",
)  # fmt: skip


def emulated_parts(
    cells: pd.DataFrame, fits: Fits, latency_scale: float | None = None
) -> list[tuple[Any, Fit, tuple[float, ...]]]:
    """Every emulated-network cell the model can predict from a host fit: (cell, host fit,
    (fixed, per-byte, wire)). Parameter-server cells only with every worker active (which
    workers take fewer closures is not known, so neither are their links). The link's
    latency counts ``hops`` times per message (``latency_scale`` instead, when given).

    A cell whose node sends more than the bucket holds is taken as drained
    (``Link.refilled(0)``): a benchmark repeats its operation back to back, so after the
    first repeats such a node sends at the link's rate; a cell within the bucket as full
    (the loop's gaps refill what it spends). Between the two, how much the gaps refill is not known,
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
        elif row.op == "allreduce" and "allreduce" in LIBRARY_OPS.get(row.library, ()):
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
#: (``tc tbf``'s) are not fitted: how full the loop's gaps leave the bucket decides their
#: time. At 8 buckets a full and an empty bucket differ by at most an eighth of the wire time.
LOOP_FIT_MIN_BUCKETS = 8.0
#: Bounds of the fitted wire scale (``fit_overlap``): a library cannot beat the link's
#: rate by more than the bucket lets it, nor is a 5x slowdown a rate any more.
LINK_SCALE_BOUNDS = (0.5, 5.0)


def fit_overlap(cells: pd.DataFrame, fits: Fits) -> dict[FitKey, Fit]:
    """``fits`` with each library's ``overlap`` (0-1, see ``combine``) and ``link_scale``
    (its time per byte through ``tc tbf`` relative to the link's rate, ``Link.wire_scale``)
    fitted on its cells on emulated networks that send at least ``LOOP_FIT_MIN_BUCKETS``
    buckets per node (relative least squares, ``scipy.optimize.least_squares``); a library
    without such cells keeps 0 and 1. The only parameters the emulated micro-benchmarks fit:
    the rest of the model never sees them, and the training runs on emulated networks (the
    validation's held-out set) are never fitted.

    Why a scale: through the same shaped links some libraries move their bytes slower
    than the rate (Open MPI: its rendezvous for messages above the TCP BTL's eager limit
    waits for a reply queued behind the peer's own data in ``tc tbf``'s deep egress queue;
    measured in ``docs/perfmodel.md``). That is the emulator's queue, not the network's
    rate: a projection to a real network uses 1.
    """
    out = dict(fits)
    by_library: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for row, host, (fixed, per_byte, wire) in emulated_parts(cells, fits):
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


def fit_hops(cells: pd.DataFrame, fits: Fits) -> dict[FitKey, Fit]:
    """``fits`` with each library's ``hops``: how many network latencies it pays per message
    of its pattern (a ring step that waits for an acknowledgement pays two), fitted on its
    cells on links with an added delay (``dlscale.commbench.latency``), 1 without them."""
    out = dict(fits)
    delayed = cells[cells["network"].str.contains(r"\+", regex=True)] if len(cells) else cells
    if delayed.empty:
        return out
    with_latency = emulated_parts(delayed, out, latency_scale=1.0)
    without = emulated_parts(delayed, out, latency_scale=0.0)
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


def commbench_checks(cells: pd.DataFrame, fits: Fits) -> pd.DataFrame:
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
        for row in host_cells(cells, "mpi", "allreduce-blobs").itertuples(index=False):
            predicted = float(
                mpi_comm(mpi, row.model, np.array([row.world]), Link.host(), mpi.host_cores or None)[0]
            )
            rows.append(_check("blobs", row, predicted))
    for row, host, (fixed, per_byte, wire) in emulated_parts(cells, fits):
        predicted = combine(fixed, per_byte, link_scale(host) * wire, host.get("overlap"))
        rows.append(_check("emulated", row, float(predicted)))
    return pd.DataFrame(rows, columns=list(CHECK_COLUMNS))


def _check(kind: str, row: Any, predicted: float) -> dict[str, Any]:
    return {
        "check": kind, "library": row.library, "op": row.op, "network": row.network, "world": int(row.world),
        "nbytes": int(row.nbytes), "model": row.model, "measured_s": float(row.seconds), "predicted_s": predicted,
        "error": predicted / float(row.seconds) - 1.0,
    }  # fmt: skip
