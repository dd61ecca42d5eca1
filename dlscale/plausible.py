"""What a measurement from elsewhere may claim: physical bounds, and a runs table's rows held
to them before anything is compared.

A study's tables and a published system file are foreign input: ``nodes: 1.5`` was truncated
to 1 and merged two cells, ``nodes: 1e308`` became a negative cell, an infinite throughput
made its row vanish, a run whose every row appeared twice doubled its repeats and
manufactured significance, ``step_s: 1e-300`` gave a throughput of 1e302, ``compute_s`` five
times ``step_s`` clipped its exposed communication to 0 (a run that would win "best
communication"). Each is refused here with the file, the line and the rule.

The bounds are physical, each far outside what any honest run or published system reaches
(docs/verify.md, "Plausibility bounds", has the measurements):

* ``MIN_STEP_S``: a synchronous training step runs a forward and backward pass and an update,
  each at least one operation a framework dispatches (microseconds each); the fastest step
  measured here is 5.4 ms.
* ``MAX_RANK_FLOPS``: the roofline's ceiling for one rank, above every processor's peak
  (a 2026 accelerator's dense low-precision peak is ~1e16 FLOP/s at most; a CPU rank here
  reaches 1.8e11): throughput x FLOPs per sample over the ranks may not pass it.
* ``MAX_COMPUTE_OVER_STEP``: compute is timed inside the step; a rank's clock may jitter past
  it (the analysis clips exposed communication at 0 for that), but compute twice its step
  is no jitter (the demo: at most 1.000 in every iteration event and every run).
* ``MAX_NODES``: the largest machine has 158,976 nodes (Fugaku); the system files' node
  counts stop at 9,999,999 (schemas/system.schema.yaml).
* ``MAX_PARAMETERS``: 1e15, some 600 times the largest published model (1.6e12).
* ``MIN_BANDWIDTH_GBIT``/``MAX_BANDWIDTH_GBIT``: 1 Mbit/s (a tenth of 10BASE-T) to
  100 Tbit/s (125 times a 2026 800 Gbit/s adapter); ``MAX_LATENCY_S``: one second (a
  geostationary satellite hop is 0.25 s).

Standard library only.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dlscale.base.foreign import Refused
from dlscale.events import STATUSES

MIN_STEP_S = 1e-6
MAX_RANK_FLOPS = 1e16
MAX_COMPUTE_OVER_STEP = 2.0
MAX_NODES = 9_999_999
MAX_PARAMETERS = 10**15
MIN_BANDWIDTH_GBIT = 1e-3
MAX_BANDWIDTH_GBIT = 1e5
MAX_LATENCY_S = 1.0
#: The largest integer every float holds exactly: a count beyond it is no count a file of
#: measurements carries (and ``float()`` of 10**400 overflows).
MAX_EXACT_INT = 2**53

#: A runs table's integer columns (every row: the cell it belongs to).
INTEGER_COLUMNS: tuple[str, ...] = ("nodes", "ranks_per_node", "batch_per_rank", "world_size", "global_batch")
#: Measurements an ok run must have, finite and above zero.
POSITIVE_COLUMNS: tuple[str, ...] = ("throughput", "step_s")
#: Measurements that, where given, are finite and at least zero.
NONNEGATIVE_COLUMNS: tuple[str, ...] = (
    "compute_s",
    "comm_s",
    "exposed_comm_s",
    "exposed_comm_share",
    "input_s",
    "throughput_min",
    "throughput_max",
    "step_s_min",
    "step_s_max",
    "step_drift",
    "step_drift_p",
    "speedup",
    "efficiency",
    "time_to_target_s",
    "flops_per_sample",
)

#: Counts a run row carries, where given: whole numbers from 0.
COUNT_COLUMNS: tuple[str, ...] = (
    "repeat",
    "iteration_events",
    "timed_iterations",
    "partial_iterations",
    "evals",
)
#: Quality columns whose metric is a share (top-1, top-5: of held-out samples; mse: of pixels
#: on [0, 1], ``dlscale.quality``): from 0 to 1 where the row's metric is one of SHARE_METRICS.
SHARE_COLUMNS: tuple[str, ...] = ("final_quality", "target_value")
SHARE_METRICS: tuple[str, ...] = ("top1", "top5", "mse")
#: A float's relative rounding over the few operations between two of a row's columns.
ROUNDING = 1e-9

_INTEGER = re.compile(r"[0-9]+(?:\.0*)?")


def _number(text: str) -> float | None:
    """A cell as a float (None: empty); ValueError for text that is no number."""
    if text.strip() == "":
        return None
    return float(text)


def check_runs_table(text: str, where: str) -> int:
    """A runs table (CSV text of ``runs.csv``) row by row; ``Refused`` naming ``where``,
    the line and the rule at the first row that breaks one: a run id given twice, a status
    that is not one of ``STATUSES``, a cell key that is not an integer from 1 to
    ``MAX_NODES`` (``MAX_EXACT_INT`` for batches), a measurement that is not a finite
    number, an ok run without a positive throughput and step, a step below ``MIN_STEP_S``,
    compute longer than twice its step, a throughput past the roofline's ``MAX_RANK_FLOPS``,
    a count that is not a whole number from 0, a share (top-1, top-5, mse) outside 0 to 1,
    or columns that contradict each other (``_check_consistent``). Returns the number of rows."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    seen: dict[str, int] = {}
    rows = 0
    try:
        for row in reader:
            rows += 1
            _check_row(row, f"{where} line {reader.line_num}", seen, reader.line_num)
    except csv.Error as err:
        raise Refused(f"{where} line {reader.line_num}", f"not CSV ({err})") from None
    return rows


def _check_row(row: dict[str, Any], at: str, seen: dict[str, int], line: int) -> None:
    if None in row:
        raise Refused(at, f"{len(row[None]) + len(row) - 1} cells in a row of {len(row) - 1} columns")
    run_id = (row.get("run_id") or "").strip()
    if not run_id:
        raise Refused(at, "no run_id: every row is one run")
    if run_id in seen:
        raise Refused(
            at, f"run id {run_id!r} is also on line {seen[run_id]}: a run is one row (rows given twice?)"
        )
    seen[run_id] = line
    status = row.get("status")
    if status is not None and status not in STATUSES:
        raise Refused(
            at, f"status {status!r} is not one of {', '.join(STATUSES)} (dlscale writes them in lower case)"
        )
    values: dict[str, float | None] = {}
    for column in INTEGER_COLUMNS:
        text = row.get(column)
        if text is None or (text.strip() == "" and column in ("world_size", "global_batch")):
            continue
        bound = MAX_NODES if column in ("nodes", "ranks_per_node") else MAX_EXACT_INT
        if not _INTEGER.fullmatch(text.strip()) or not 1 <= float(text) <= bound:
            raise Refused(at, f"{column} {text!r} is not a whole number from 1 to {bound:,}")
        values[column] = float(text)
    for column in (*POSITIVE_COLUMNS, *NONNEGATIVE_COLUMNS):
        text = row.get(column)
        if text is None:
            continue
        try:
            value = _number(text)
        except ValueError:
            raise Refused(at, f"{column} {text!r} is not a number") from None
        if value is not None and (not math.isfinite(value) or value < 0):
            raise Refused(at, f"{column} {text!r} is not a finite number >= 0")
        values[column] = value
    for column in COUNT_COLUMNS:
        text = (row.get(column) or "").strip()
        if text and (not _INTEGER.fullmatch(text) or float(text) > MAX_EXACT_INT):
            raise Refused(at, f"{column} {text!r} is not a whole number from 0 to {MAX_EXACT_INT:,}")
    _check_shares(row, at)
    if status != "ok":
        return
    for column in POSITIVE_COLUMNS:
        if column in row and not (values.get(column) or 0) > 0:
            raise Refused(at, f"an ok run with {column} {row[column]!r}: an ok run has one above 0")
    step, compute = values.get("step_s"), values.get("compute_s")
    if step is not None and step < MIN_STEP_S:
        raise Refused(
            at,
            f"step_s {step:g} is below {MIN_STEP_S:g} s, shorter than any training step (dlscale.plausible)",
        )
    if step is not None and compute is not None and compute > step * MAX_COMPUTE_OVER_STEP:
        raise Refused(
            at,
            f"compute_s {compute:g} is longer than {MAX_COMPUTE_OVER_STEP:g} x the step ({step:g} s) it is part of"
            " (dlscale.plausible.MAX_COMPUTE_OVER_STEP)",
        )
    check_roofline(values, at)
    _check_consistent(values, at)


def _check_shares(row: dict[str, Any], at: str) -> None:
    """A quality that is a share (SHARE_METRICS) lies from 0 to 1."""
    metrics = {"final_quality": row.get("quality_metric"), "target_value": row.get("target_metric")}
    for column in SHARE_COLUMNS:
        text = (row.get(column) or "").strip()
        if not text or (metrics[column] or "").strip() not in SHARE_METRICS:
            continue
        try:
            value = float(text)
        except ValueError:
            raise Refused(at, f"{column} {text!r} is not a number") from None
        if not 0.0 <= value <= 1.0:
            raise Refused(at, f"{column} {text!r} of metric {metrics[column]!r} is a share: from 0 to 1")


def _check_consistent(values: dict[str, float | None], at: str) -> None:
    """Columns one run's steps give together: the medians lie within their extremes, and no
    step carries more samples than the global batch, so the throughput (the median of each
    step's samples / its time) is at most ``global_batch / step_s_min``."""
    for median, low, high in (
        ("step_s", "step_s_min", "step_s_max"),
        ("throughput", "throughput_min", "throughput_max"),
    ):
        value, lowest, highest = values.get(median), values.get(low), values.get(high)
        if value is None:
            continue
        if lowest is not None and value < lowest * (1 - ROUNDING):
            raise Refused(
                at, f"{median} {value:g} is below its {low} {lowest:g}: a median within its extremes"
            )
        if highest is not None and value > highest * (1 + ROUNDING):
            raise Refused(
                at, f"{median} {value:g} is above its {high} {highest:g}: a median within its extremes"
            )
    throughput, batch, fastest = (
        values.get("throughput"),
        values.get("global_batch"),
        values.get("step_s_min"),
    )
    if throughput is not None and batch and fastest and throughput > batch / fastest * (1 + ROUNDING):
        raise Refused(
            at,
            f"throughput {throughput:g} samples/s is more than global_batch {batch:g} in its fastest step"
            f" ({fastest:g} s): {batch / fastest:g} samples/s at most",
        )


def check_roofline(values: Mapping[str, float | None], at: str) -> None:
    """Throughput x FLOPs per sample over the ranks within ``MAX_RANK_FLOPS`` (``values``:
    ``throughput``, ``flops_per_sample``, and ``world_size`` or ``nodes`` x ``ranks_per_node``)."""
    throughput, flops = values.get("throughput"), values.get("flops_per_sample")
    world = values.get("world_size") or (values.get("nodes") or 0) * (values.get("ranks_per_node") or 0)
    if throughput is None or not flops or not world:
        return
    per_rank = throughput * flops / world
    if per_rank > MAX_RANK_FLOPS:
        raise Refused(
            at,
            f"throughput {throughput:g} x {flops:g} FLOPs a sample is {per_rank:.3g} FLOP/s a rank, over"
            f" the {MAX_RANK_FLOPS:g} no processor reaches (dlscale.plausible.MAX_RANK_FLOPS)",
        )


def check_bounded_ints(value: Any, where: str, key: Sequence[str] = ()) -> None:
    """Every integer value in a loaded document within ``MAX_EXACT_INT`` (a YAML ``10**400``
    that ``float()`` overflows on is refused naming its key; keys are the schema's to check)."""
    if isinstance(value, dict):
        for name, inner in value.items():
            check_bounded_ints(inner, where, (*key, str(name)))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            check_bounded_ints(inner, where, (*key, str(index)))
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_EXACT_INT:
        digits = len(str(abs(value))) if abs(value) < 10**4000 else "4000+"
        raise Refused(
            where,
            f"key {'.'.join(key) or '(top)'!r}: an integer of {digits} digits, beyond {MAX_EXACT_INT:,}",
        )
