"""Published scaling measurements replayed through the study's own projection.

The 1024-node projection is checked on this host's 8 emulated ranks at most; published
tables of synchronous data-parallel training from 2 to 128+ nodes on named networks are
the test it never had. A system file (``dlscale.perfmodel.systems``) gives a system's
pattern, gradient, network, batch per node and measured throughputs; the replay derives
the compute step at the smallest measured count (its step less the modelled
communication there) and predicts every other count with ``projection.throughput_at``,
the very function that makes the study's projection.

Two calibrations: none (the pattern's network-level model alone: every library software
cost 0, the offset 0), or a study's ``calibration.csv`` (its library fits, offset and
BigDL's Spark line, as the projection uses them; ``commbench_fits.csv`` beside it gives
every fitted coefficient, ``commbench.csv`` beside it the micro-benchmark cells whose
bootstrap gives the band). ``replay.csv`` says which in its ``calibration`` column.

    python -m dlscale.perfmodel.replay SYSTEM.yaml [MORE.yaml ...] --out DIR \\
        [--calibration results/perfmodel/calibration.csv] [--bootstrap N] [--seed S]

The derivation, the published record and what the replay shows: ``docs/perfmodel.md``
("Against the published record").
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlscale import thresholds
from dlscale.base import atomic, foreign
from dlscale.base.untrusted import shown, write_csv
from dlscale.commbench import LIBRARIES, RAW_COLUMNS
from dlscale.networks import HOST
from dlscale.perfmodel.bootstrap import CellSampler
from dlscale.perfmodel.calibration import CALIBRATION_COLUMNS
from dlscale.perfmodel.comm import NETWORK_ONLY, Calibration
from dlscale.perfmodel.fits import FIT_COLUMNS, LIBRARY_OPS, Fit
from dlscale.perfmodel.library import fit_commbench
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.patterns import BIGDL, PATTERN_OP, PS, RING, SETUP_PATTERN, SPARK_STEP
from dlscale.perfmodel.projection import BAND, step_at, throughput_at
from dlscale.perfmodel.systems import System, SystemFileError, load

REPLAY_COLUMNS: tuple[str, ...] = (
    "name", "nodes", "measured", "predicted", "lower", "upper", "measured_efficiency",
    "predicted_efficiency", "error", "efficiency_lower", "efficiency_upper", "calibration", "setup",
    "pattern", "network", "latency_s", "bandwidth_Bps", "num_ps", "full_duplex", "ranks_per_node", "anchor",
    "compute_step_s", "compute_source", "replicates",
)  # fmt: skip
SUMMARY_COLUMNS: tuple[str, ...] = (
    "pattern", "communication", "systems", "points", "median_abs_error", "max_abs_error", "worst", "median_target",
    "max_target", "meets",
)  # fmt: skip
#: The bar of the replay: median and worst |predicted - measured| efficiency per
#: communication pattern, over every measured count but the anchors.
MEDIAN_ERROR = thresholds.threshold("replay_median_error")
MAX_ERROR = thresholds.threshold("replay_max_error")
#: Each communication pattern as the report names it.
PATTERN_NAMES: Mapping[str, str] = {RING: "ring all-reduce", PS: "parameter server", BIGDL: "BigDL shuffle"}
#: The columns of a study's micro-benchmark cells the band is refitted on (``latency_us``, the
#: emulated link's delay, may be absent: the fit then takes 0, as for the host).
CELL_COLUMNS: tuple[str, ...] = tuple(c for c in RAW_COLUMNS if c != "latency_us")
#: ``calibration`` of a row predicted by the network-level model alone.
NETWORK_LABEL = "network-only"


def network_calibration(setup: str) -> Calibration:
    """The pattern's network-level model alone: the set-up's pattern with every library
    software cost and the offset 0, so a step's communication is what its messages and
    bytes take on the link (Caffe keeps Open MPI's per-blob algorithms, BigDL its two
    rounds of block fetches and no Spark scheduling cost)."""
    pattern = SETUP_PATTERN[setup]
    library = LIBRARIES[setup]
    op = PATTERN_OP[pattern]
    return Calibration(
        setup, pattern, library, NETWORK_ONLY, {op: Fit(library, op, {})}, note="network-level model alone"
    )


# --- a study's calibration, read back -----------------------------------------------------------


#: A study's calibration tables are a few kB (one row per set-up, fit or commbench cell);
#: a file far larger is not one (and is not parsed).
MAX_TABLE_BYTES = 64 << 20


class CalibrationFileError(ValueError):
    """A study's table that cannot calibrate the replay; the message names the file and what is wrong."""


def read_study_table(
    path: str | Path, columns: Sequence[str], what: str, dtype: Mapping[str, type] | None = None
) -> pd.DataFrame:
    """``path`` read as the study wrote it (empty cells as missing), refused unless it is a CSV
    with every column of ``columns``: a table from another tool, or cut short, is never
    read as a calibration."""
    try:
        with foreign.open_regular(path, MAX_TABLE_BYTES, str(path)) as handle:
            table = pd.read_csv(handle, keep_default_na=False, na_values=[""], dtype=dtype)
    except foreign.Refused as err:
        raise CalibrationFileError(str(err)) from None
    except pd.errors.EmptyDataError:
        raise CalibrationFileError(f"{path}: empty, not {what}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise CalibrationFileError(f"{path}: not {what} (not CSV: {err})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise CalibrationFileError(f"{path}: not {what}: no column {', '.join(missing[:5])}{more}")
    return table


def read_fits(path: str | Path) -> dict[tuple[str, str], Fit]:
    """The host fits of ``commbench_fits.csv`` by (library, op), every coefficient as fitted
    (the derived ``beta_Bps*`` rows left out: they are ``1/gamma``)."""
    table = read_study_table(path, FIT_COLUMNS, "a study's commbench_fits.csv")
    out: dict[tuple[str, str], Fit] = {}
    host = table[table["network"].astype(str).eq(HOST)]
    try:
        for (library, op), group in host.groupby(["library", "op"], sort=True):
            rows = group[~group["coefficient"].astype(str).str.startswith("beta_Bps")]
            coefficients = {str(r.coefficient): _finite(r.value) for r in rows.itertuples(index=False)}
            identified = tuple(
                str(r.coefficient) for r in rows.itertuples(index=False) if _truthy(r.identified)
            )
            cores = int(pd.to_numeric(group["host_cores"]).max()) if group["host_cores"].notna().any() else 0
            out[(str(library), str(op))] = Fit(
                str(library), str(op), coefficients, identified, host_cores=cores
            )
    except (TypeError, ValueError) as err:
        raise CalibrationFileError(f"{path}: a value is not a number: {err}") from None
    return out


def read_calibration(path: str | Path) -> dict[str, Calibration]:
    """Each set-up's ``Calibration`` from a study's ``calibration.csv``, as its projection
    used it: library fits from ``commbench_fits.csv`` beside it where there (every
    coefficient, ``hops`` and ``overlap`` included), else from the table's own columns;
    BigDL's Spark line where its runs fitted it; the offsets."""
    path = Path(path)
    table = read_study_table(path, CALIBRATION_COLUMNS, "a study's calibration.csv")
    beside = fits_beside(path)
    fits = read_fits(beside) if beside.exists() else {}
    out: dict[str, Calibration] = {}
    for row in table.itertuples(index=False):
        setup, pattern = str(row.setup), str(row.pattern)
        if SETUP_PATTERN.get(setup) != pattern or str(row.library) != LIBRARIES[setup]:
            raise CalibrationFileError(
                f"{path}: set-up {setup!r} with pattern {pattern!r} and library {row.library!r} is not a"
                f" study's (known: {', '.join(f'{k} {v} {LIBRARIES[k]}' for k, v in SETUP_PATTERN.items())})"
            )
        if setup in out:
            raise CalibrationFileError(f"{path}: set-up {setup!r} is calibrated twice")
        try:
            out[setup] = _calibration_of(row, fits)
        except (TypeError, ValueError) as err:
            raise CalibrationFileError(f"{path}: set-up {setup!r}: a value is not a number: {err}") from None
    return out


def fits_beside(path: str | Path) -> Path:
    """The ``commbench_fits.csv`` a study writes beside its ``calibration.csv``."""
    return Path(path).with_name("commbench_fits.csv")


def _calibration_of(row: Any, fits: Mapping[tuple[str, str], Fit]) -> Calibration:
    library, pattern = str(row.library), str(row.pattern)
    own: dict[str, Fit] = {}
    if row.source == "commbench":
        own = {op: fits[(library, op)] for op in LIBRARY_OPS.get(library, ()) if (library, op) in fits}
    if PATTERN_OP[pattern] not in own:
        own = _fits_of_columns(row, library, pattern)
    if pattern == BIGDL and row.spark_source == "runs":
        own[SPARK_STEP] = Fit(
            library,
            SPARK_STEP,
            {"c": _num(row.spark_step_s), "per_executor": _num(row.spark_step_per_executor_s)},
        )
    return Calibration(
        setup=str(row.setup), pattern=pattern, library=library, source=str(row.source), fits=own,
        offset_s=_num(row.offset_s), offset_per_contention_s=_num(row.offset_per_contention_s),
        offset_per_byte_s=_num(row.offset_per_byte_s), host_runs=int(_num(row.host_runs)),
        projection_offset_s=_num(row.projection_offset_s),
        projection_offset_per_byte_s=_num(row.projection_offset_per_byte_s),
        host_rel_rmse=float(row.host_rel_rmse) if pd.notna(row.host_rel_rmse) else math.nan,
        note=str(row.note) if pd.notna(row.note) else "",
    )  # fmt: skip


def _fits_of_columns(row: Any, library: str, pattern: str) -> dict[str, Fit]:
    """The library terms as ``calibration.csv`` prints them (no ``hops``, no ``overlap``:
    a study without ``commbench_fits.csv`` beside its table, or fitted on runs)."""
    gamma = _gamma(row.beta_Bps)
    if pattern == RING:
        return {
            "allreduce": Fit(
                library, "allreduce", {"c": _num(row.c_s), "alpha": _num(row.alpha_s), "gamma": gamma}
            )
        }
    if pattern == PS:
        coefficients = {
            "c": _num(row.c_s), "per_worker": _num(row.per_worker_s), "gamma_worker": gamma,
            "gamma_server": _gamma(row.server_beta_Bps),
        }  # fmt: skip
        return {"pushpull": Fit(library, "pushpull", coefficients)}
    out = {
        "shuffle": Fit(library, "shuffle", {"c": _num(row.c_s), "alpha": _num(row.alpha_s), "gamma": gamma})
    }
    if pd.notna(row.job_s):
        out["job"] = Fit(library, "job", {"c": _num(row.job_s), "per_task": _num(row.job_per_executor_s)})
    return out


def _num(value: Any) -> float:
    return _finite(value) if pd.notna(value) else 0.0


def _finite(value: Any) -> float:
    """``value`` as a finite float; anything else (text, inf) is refused: a fitted cost is a number."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not finite")
    return number


def _gamma(beta: Any) -> float:
    """Seconds per byte of a bandwidth as printed (inf or none: 0)."""
    beta = float(beta) if pd.notna(beta) else math.inf
    return 0.0 if not math.isfinite(beta) or beta <= 0 else 1.0 / beta


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1")


def calibration_replicates(
    path: str | Path, calibrations: Mapping[str, Calibration], replicates: int, seed: int = 0
) -> list[dict[str, Calibration]]:
    """Bootstrap replicates of ``calibrations``' library fits, refitted on the micro-benchmark
    cells of ``commbench.csv`` beside ``path`` drawn as the study's bootstrap draws them
    (``CellSampler``); the offsets and BigDL's Spark line (fitted on the study's runs, which
    ``calibration.csv`` does not carry) stay at their point values. None without the file."""
    raw_path = Path(path).with_name("commbench.csv")
    if replicates <= 0 or not raw_path.exists():
        return []
    if raw_path.stat().st_size == 0:  # a study without micro-benchmarks: no band
        return []
    # (the model column is text, empty on most rows: read as such, as the rule wrote it)
    raw = read_study_table(raw_path, CELL_COLUMNS, "a study's commbench.csv", dtype={"model": str})
    if raw.empty:
        return []
    try:
        sampler, rng = CellSampler(raw), np.random.default_rng(seed)
        refits = [fit_commbench(sampler.draw(rng)) for _ in range(int(replicates))]
    except (TypeError, ValueError) as err:
        raise CalibrationFileError(f"{raw_path}: a cell is not a measurement: {err}") from None
    out = []
    for fits in refits:
        rep = {}
        for setup, cal in calibrations.items():
            drawn = {op: fits[(cal.library, op, HOST)] for op in cal.fits if (cal.library, op, HOST) in fits}
            rep[setup] = (
                dataclasses.replace(cal, fits={**cal.fits, **drawn}) if cal.source == "commbench" else cal
            )
        out.append(rep)
    return out


# --- the replay -----------------------------------------------------------------------------------


def system_link(system: System) -> Link:
    """The system's network as the projection's ``Link`` (full duplex where the file says so;
    a node's ranks off the link where it has several)."""
    return dataclasses.replace(
        Link.of_preset(system.network),
        full_duplex=system.full_duplex,
        local_ranks_off_link=system.ranks_per_node > 1,
    )


def anchor_compute(system: System, cal: Calibration, link: Link) -> float:
    """The compute step: the anchor's step time (its batch per node over its throughput per
    node) less the modelled communication there (``step_at`` with no compute)."""
    if system.compute_step_s is not None:
        return system.compute_step_s
    anchor = system.anchor
    step = anchor * system.batch_per_node / float(system.measured[anchor])
    comm = float(
        step_at(
            cal,
            0.0,
            system.gradient,
            [anchor],
            system.ranks_per_node,
            link,
            system.num_ps[anchor],
            system.batch_per_node // system.ranks_per_node,
        )[0]
    )
    if comm >= step:
        raise SystemFileError(
            f"{system.path}: key 'measured.{anchor}': the modelled communication at the anchor ({comm:.4g} s)"
            f" is at least its step ({step:.4g} s): give 'compute_step_s'"
        )
    return step - comm


def predicted_throughputs(system: System, cal: Calibration) -> tuple[float, np.ndarray]:
    """The compute step and the predicted global throughput at each measured count, in
    order (``projection.throughput_at``: a node's ranks share its batch per node)."""
    link = system_link(system)
    compute = anchor_compute(system, cal, link)
    counts = sorted(system.measured)
    values = [
        float(
            throughput_at(
                cal,
                compute,
                system.gradient,
                [n],
                system.ranks_per_node,
                link,
                system.num_ps[n],
                system.batch_per_node // system.ranks_per_node,
            )[0]
        )
        for n in counts
    ]
    return compute, np.asarray(values)


def replay_system(
    system: System, cal: Calibration, label: str, replicates: Sequence[Calibration] = ()
) -> pd.DataFrame:
    """One system's rows of ``replay.csv``: each measured count's throughput predicted, its
    efficiency against the anchor's (measured against measured, predicted against
    predicted; measured against the predicted anchor where the source prints none there),
    the error, and the band of the replicates' predictions."""
    counts = np.asarray(sorted(system.measured), dtype="float64")
    anchor = system.anchor
    compute, predicted = predicted_throughputs(system, cal)
    measured = np.asarray(
        [np.nan if system.measured[n] is None else system.measured[n] for n in sorted(system.measured)]
    )
    # against the anchor's measured throughput, or its predicted one where the source
    # prints none there (its compute step then came from ``compute_step_s``)
    reference = measured[0] if np.isfinite(measured[0]) else predicted[0]
    measured_eff = (measured / counts) / (reference / anchor)
    predicted_eff = (predicted / counts) / (predicted[0] / anchor)
    drawn = []
    for rep in replicates:
        try:
            drawn.append(predicted_throughputs(system, rep)[1])
        except SystemFileError:
            continue  # a draw whose communication alone outlasts the anchor's step
    band = np.full((2, len(counts)), np.nan)
    eff_band = np.full((2, len(counts)), np.nan)
    if drawn:
        values = np.vstack(drawn)
        eff = (values / counts) / (values[:, :1] / anchor)
        band = np.percentile(values, BAND, axis=0)
        eff_band = np.percentile(eff, BAND, axis=0)
    rows = []
    for i, nodes in enumerate(sorted(system.measured)):
        rows.append(
            {
                "name": system.name, "nodes": nodes, "measured": measured[i], "predicted": predicted[i],
                "lower": band[0][i], "upper": band[1][i], "measured_efficiency": measured_eff[i],
                "predicted_efficiency": predicted_eff[i], "error": predicted_eff[i] - measured_eff[i],
                "efficiency_lower": eff_band[0][i], "efficiency_upper": eff_band[1][i], "calibration": label,
                "setup": system.setup, "pattern": system.pattern, "network": system.network.name,
                "latency_s": system.network.latency_s, "bandwidth_Bps": system.network.bandwidth_Bps,
                "num_ps": system.num_ps[nodes], "full_duplex": system.full_duplex, "ranks_per_node": system.ranks_per_node, "anchor": anchor, "compute_step_s": compute,
                "compute_source": "compute_step_s" if system.compute_step_s is not None else f"anchor {anchor}",
                "replicates": len(drawn),
            }
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(REPLAY_COLUMNS))


def replay(
    systems: Iterable[System],
    calibrations: Mapping[str, Calibration] | None = None,
    replicates: Sequence[Mapping[str, Calibration]] = (),
    source: str = "",
) -> pd.DataFrame:
    """``replay.csv``: every system replayed, with the study's ``calibrations`` where given
    (a set-up the study did not calibrate falls back to the network-level model, and its
    rows say so), else with the network-level model alone."""
    frames = []
    for system in systems:
        cal = (calibrations or {}).get(system.setup)
        if cal is None:
            label = (
                NETWORK_LABEL if calibrations is None else f"{NETWORK_LABEL} ({system.setup} not in {source})"
            )
            frames.append(replay_system(system, network_calibration(system.setup), label))
            continue
        reps = [r[system.setup] for r in replicates if system.setup in r]
        frames.append(replay_system(system, cal, f"{source} ({cal.source})", reps))
    if not frames:
        return pd.DataFrame(columns=list(REPLAY_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per communication pattern: the median and worst |error| of efficiency over every
    measured count but the anchors (their error is 0 by construction), against the bar."""
    rows = []
    scored = table[table["nodes"].ne(table["anchor"]) & table["error"].notna()]
    for pattern, group in scored.groupby("pattern", sort=True):
        errors = group["error"].abs()
        worst = group.loc[errors.idxmax()]
        median, largest = float(errors.median()), float(errors.max())
        rows.append(
            {
                "pattern": pattern, "communication": PATTERN_NAMES.get(str(pattern), str(pattern)),
                "systems": group["name"].nunique(), "points": len(group),
                "median_abs_error": median, "max_abs_error": largest,
                "worst": f"{worst['name']} at {int(worst['nodes'])}", "median_target": MEDIAN_ERROR.value,
                "max_target": MAX_ERROR.value, "meets": MEDIAN_ERROR.passes(median) and MAX_ERROR.passes(largest),
            }
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def points_to_check(system: System) -> list[int]:
    """The node counts of ``system`` whose prediction is checked: every measured count but
    its anchor (a file measured at its anchor alone replays to efficiency 1 and checks nothing)."""
    return [n for n, value in sorted(system.measured.items()) if n != system.anchor and value is not None]


def load_systems(paths: Iterable[str | Path]) -> list[System]:
    """Every system file of ``paths``, read and checked; a name given by two files is refused."""
    systems = [load(path) for path in paths]
    names = [s.name for s in systems]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SystemFileError(f"system name {repeated[0]!r} is given by more than one file")
    return systems


def _replicates(text: str) -> int:
    """``--bootstrap``: a whole number of replicates, 0 for none."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} replicates: give 0 or more")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: replay system files, write ``DIR/replay.csv`` and ``DIR/replay_summary.csv``."""
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.perfmodel.replay",
        description="Replay published scaling measurements through the study's projection.",
    )
    parser.add_argument("systems", nargs="+", help="system files (schemas/system.schema.yaml)")
    parser.add_argument("--out", required=True, help="folder for replay.csv and replay_summary.csv")
    parser.add_argument(
        "--calibration", help="a study's calibration.csv (commbench_fits.csv and commbench.csv beside it)"
    )
    parser.add_argument(
        "--bootstrap", type=_replicates, default=100, help="replicates of the band (with --calibration)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the band's bootstrap")
    args = parser.parse_args(argv)
    try:
        systems = load_systems(args.systems)
        calibrations = replicates = None
        if args.calibration:
            calibrations = read_calibration(args.calibration)
            if not fits_beside(args.calibration).exists():
                print(
                    shown(
                        f"replay: no {fits_beside(args.calibration)}: the library fits as {args.calibration}"
                        " prints them (without hops and overlap)"
                    ),
                    file=sys.stderr,
                )
            replicates = calibration_replicates(args.calibration, calibrations, args.bootstrap, args.seed)
        table = replay(systems, calibrations, replicates or (), str(args.calibration or ""))
    except (SystemFileError, OSError, KeyError, ValueError) as err:
        print(shown(f"replay: {err}"), file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic.replace_with(out / "replay.csv", lambda tmp: write_csv(table, tmp))
        atomic.replace_with(out / "replay_summary.csv", lambda tmp: write_csv(summary(table), tmp))
    except OSError as err:
        print(
            shown(f"replay: --out {out}: cannot write the tables there: {err.strerror or err}"),
            file=sys.stderr,
        )
        return 2
    for system in systems:
        if not points_to_check(system):
            print(
                shown(
                    f"replay: {system.name}: measured at its anchor ({system.anchor} nodes) alone: nothing to check"
                ),
                file=sys.stderr,
            )
    for row in summary(table).itertuples(index=False):
        print(
            shown(
                f"{row.pattern}: {row.systems} systems, {row.points} points, median |error| {row.median_abs_error:.3f},"
                f" worst {row.max_abs_error:.3f} ({row.worst}); bar {row.median_target}/{row.max_target}:"
                f" {'met' if row.meets else 'missed'}"
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
