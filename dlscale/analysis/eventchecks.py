"""Checks of every event against its run: what no real run can write is an ``EventError``.

A runner writes its events file atomically, so a line that breaks the contract is a bug to
fix, not a run to skip: each check raises ``EventError`` naming ``FILE:LINE``. The schema
(``dlscale.events.EVENT_SCHEMAS``) is checked by jsonschema; what a schema cannot say (a
run id against its own fields and its folder, ranks within the world, samples of the run's
shape) is checked here by hand, on whole columns for the iteration events. What a failing
run can leave (a rank that reported no iteration N, ``missing_reports``) is a reason for a
failed row, not an error. The runs table (``dlscale.analysis.tables``) calls these.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import numpy as np
import pandas as pd

from dlscale.events import EVENT_SCHEMAS, EventError
from dlscale.networks import HOST
from dlscale.plausible import MAX_COMPUTE_OVER_STEP, MIN_STEP_S
from dlscale.runid import RUN_ID_PATTERN, Run

if TYPE_CHECKING:
    from dlscale.analysis.readevents import RunEvents


def _strict_integer(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _finite(validator: Any, wanted: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    is_number = isinstance(instance, (int, float)) and not isinstance(instance, bool)
    if wanted and is_number and not math.isfinite(instance):
        yield jsonschema.ValidationError(f"{instance!r} is not a finite number")


#: jsonschema's draft 2020-12 validator with the events schema's two rules
#: (``dlscale.events.SCHEMA_KEYWORDS``): ``integer`` is an integer literal, ``finite``.
EventValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={"finite": _finite},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)
_VALIDATORS = {kind: EventValidator(schema) for kind, schema in EVENT_SCHEMAS.items()}


def check_schema(path: str | os.PathLike[str], line: int, event: dict[str, Any]) -> None:
    """Validate one event against ``EVENT_SCHEMAS`` with jsonschema; EventError names
    ``FILE:LINE``, the field and what is wrong with it."""
    kind = event.get("event")
    validator = _VALIDATORS.get(kind) if isinstance(kind, str) else None
    if validator is None:
        raise EventError(f"{path}:{line}: unknown event type {kind!r}")
    error = jsonschema.exceptions.best_match(validator.iter_errors(event))
    if error is None:
        return
    where = "".join(
        f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p))
        for i, p in enumerate(error.absolute_path)
    )
    raise EventError(f"{path}:{line}: {kind} event: {where or '(event)'}: {error.message}")


def _path_run_id(path: str | os.PathLike[str]) -> str | None:
    """The run id the file's folder names (``<runs>/<run id>/events.jsonl``), if it names one."""
    parts = Path(os.path.abspath(path)).parent.parts[-5:]
    candidate = "/".join(parts)
    return candidate if len(parts) == 5 and RUN_ID_PATTERN.match(candidate) else None


def check_run_start(path: str | os.PathLike[str], line: int, start: dict[str, Any]) -> None:
    """What a schema cannot say about a run_start (it has passed ``check_schema``): its run
    id is a run id, names the run's own fields and the folder the file lies in, and its
    world, global batch, hosts and spec agree with it. EventError names ``FILE:LINE``."""
    where = f"{path}:{line}: run_start event"
    run_id = start["run_id"]
    try:
        run = Run.from_run_id(run_id)
    except ValueError as err:
        raise EventError(f"{where}: {err}") from None
    own = {**start, "network": start.get("network") or HOST}
    for name in ("framework", "model", "nodes", "ranks_per_node", "batch", "repeat", "network"):
        if getattr(run, name) != own[name]:
            raise EventError(
                f"{where}: run_id {run_id} says {name}={getattr(run, name)!r}, the event says"
                f" {name}={own[name]!r}: the run would be mislabelled"
            )
    folder = _path_run_id(path)
    if folder is not None and folder != run_id:
        raise EventError(
            f"{where}: run_id {run_id} is not the run of the folder the file lies in ({folder}):"
            " the run would be mislabelled"
        )
    world = start["world_size"]
    if world != run.world_size:
        raise EventError(
            f"{where}: world_size={world} is not nodes x ranks_per_node ({run.nodes} x {run.ranks_per_node})"
        )
    global_batch = start.get("global_batch")
    if global_batch is not None and global_batch != run.batch * world:
        raise EventError(
            f"{where}: global_batch={global_batch} is not batch x world_size ({run.batch} x {world})"
        )
    if len(start["hosts"]) != world:
        raise EventError(f"{where}: hosts lists {len(start['hosts'])} host(s), the world has {world} rank(s)")
    spec_id = (start.get("spec") or {}).get("run_id")
    if spec_id is not None and spec_id != run_id:
        raise EventError(f"{where}: spec.run_id={spec_id!r} is not the run_id {run_id}")


def check_iterations(iterations: pd.DataFrame, run_info: pd.DataFrame) -> pd.Series:
    """Check every iteration event against its run; return per run whether it has the
    global shape (rank 0 alone reports the global batch).

    Raises EventError naming ``FILE:LINE`` of the first event (in file order) whose rank
    is outside the world or whose samples are not the run's: each rank its batch, or,
    where the run's first iteration event is rank 0 reporting the global batch (a
    framework whose log reports one number for the whole run, BigDL, TensorFlow ps),
    rank 0 alone with the global batch on every event.
    """
    world = run_info["world_size"].to_numpy()[iterations["_run"].to_numpy()]
    batch = run_info["batch_per_rank"].to_numpy()[iterations["_run"].to_numpy()]
    glob = run_info["global_batch"].to_numpy()[iterations["_run"].to_numpy()]
    rank = iterations["rank"].to_numpy()
    samples = iterations["samples"].to_numpy()
    outside = rank >= world
    if outside.any():
        at = int(np.flatnonzero(outside)[0])
        raise EventError(
            f"{_where(iterations, run_info, at)}: iteration event of rank {rank[at]} in a world of"
            f" {world[at]} (ranks are 0 <= rank < {world[at]})"
        )
    first = iterations.groupby("_run", sort=False).head(1)
    shape = pd.Series(False, index=run_info.index)
    shape[first["_run"].to_numpy()] = (
        first["rank"].eq(0).to_numpy()
        & (first["samples"].to_numpy() == glob[first.index])
        & (glob[first.index] != batch[first.index])
    )
    _check_times(iterations, run_info)
    global_shape = shape.to_numpy()[iterations["_run"].to_numpy()]
    bad = np.where(global_shape, (rank != 0) | (samples != glob), samples != batch)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        run = int(iterations["_run"].iat[at])
        where = _where(iterations, run_info, at)
        shapes = (
            f"a run is every rank reporting its batch ({batch[at]}) or rank 0 alone reporting"
            f" the global batch ({glob[at]})"
        )
        if not global_shape[at]:
            raise EventError(
                f"{where}: rank {rank[at]} reports samples={samples[at]}, not its batch of {batch[at]}: {shapes}"
            )
        first_line = int(first.loc[first["_run"].eq(run), "_line"].iat[0])
        what = f"rank {rank[at]} reports an iteration" if rank[at] != 0 else f"samples={samples[at]}"
        raise EventError(
            f"{where}: {what}, but rank 0 reports the global batch for the whole run (line"
            f" {first_line}): {shapes}"
        )
    return shape


def _check_times(iterations: pd.DataFrame, run_info: pd.DataFrame) -> None:
    """Each iteration event's times as a clock can measure them (``dlscale.plausible``): a
    step shorter than ``MIN_STEP_S`` is no training step (0, a timer too coarse to see it,
    gets no throughput instead), and compute, timed inside the step by the same rank, may
    pass it by a clock's jitter (exposed communication is then clipped at 0) but not reach
    ``MAX_COMPUTE_OVER_STEP`` times it, which would win "best communication" from nothing.
    EventError naming ``FILE:LINE`` of the first such event."""
    step = iterations["step_s"].to_numpy()
    compute = iterations["compute_s"].to_numpy()
    fleeting = (step > 0) & (step < MIN_STEP_S)
    if fleeting.any():
        at = int(np.flatnonzero(fleeting)[0])
        raise EventError(
            f"{_where(iterations, run_info, at)}: step_s={step[at]!r} is below {MIN_STEP_S:g} s, shorter"
            " than any training step (dlscale.plausible.MIN_STEP_S)"
        )
    longer = (step > 0) & (compute > step * MAX_COMPUTE_OVER_STEP)
    if longer.any():
        at = int(np.flatnonzero(longer)[0])
        raise EventError(
            f"{_where(iterations, run_info, at)}: compute_s={compute[at]!r} is more than"
            f" {MAX_COMPUTE_OVER_STEP:g} x the step_s={step[at]!r} it is timed inside"
            " (dlscale.plausible.MAX_COMPUTE_OVER_STEP)"
        )


def _where(iterations: pd.DataFrame, run_info: pd.DataFrame, at: int) -> str:
    run = int(iterations["_run"].iat[at])
    return f"{run_info['events_path'].iat[run]}:{int(iterations['_line'].iat[at])}"


def missing_reports(iterations: pd.DataFrame, run_info: pd.DataFrame) -> pd.Series:
    """Per run, the first report it lacks, as "rank k reported no iteration N" (None if none).

    Every reporting rank (all ranks, or rank 0 alone in the global shape) must report every
    iteration from 0 to the last one (the spec's warm-up + iterations where the run_start
    carries its spec, else the last one any rank reported). A killed rank leaves exactly
    this gap, so it makes the run failed (``dlscale.analysis.runstats.decide_status``), not an error.
    """
    reporters = np.where(run_info["_global_shape"], 1, run_info["world_size"]).astype("int64")
    unique = iterations[["_run", "rank", "iteration"]].drop_duplicates()
    per_run = unique.groupby("_run")["iteration"].agg(["size", "max"]).reindex(run_info.index)
    reported = per_run["size"].fillna(0).to_numpy()
    last = np.fmax(per_run["max"].to_numpy(dtype="float64"), run_info["_spec_iterations"].to_numpy() - 1)
    expected = np.where(np.isnan(last), 0, last + 1) * reporters
    missing = pd.Series(None, index=run_info.index, dtype=object)
    for run in np.flatnonzero(reported < expected):
        mine = unique[unique["_run"].eq(run)]
        have = set(zip(mine["iteration"], mine["rank"], strict=True))
        gap = next(
            (i, r)
            for i in range(int(last[run]) + 1)
            for r in range(int(reporters[run]))
            if (i, r) not in have
        )
        missing.iat[run] = f"rank {gap[1]} reported no iteration {gap[0]}"
    return missing


def check_run_times(path: str | os.PathLike[str], run: RunEvents) -> None:
    """A run's events in the order a run writes them, on the wall its run_start and run_end
    bracket (the launcher's clock; rank 0's clock for its steps and evaluations): run_end
    not before run_start, every evaluation and rank 0's first step inside that span, and
    rank 0's steps and evaluations, which it runs one after another, not longer together
    than the run. Without these the wall split (``dlscale.analysis.wallsplit``) makes
    negative start-ups and "other" time from an edited or merged file. EventError names
    ``FILE:LINE``."""
    (start_line, start), (end_line, end) = run.start, run.end
    began, ended = float(start["time"]), float(end["time"])
    if ended < began:
        raise EventError(
            f"{path}:{end_line}: run_end at {ended!r} is before its run_start at {began!r} (line {start_line})"
        )
    for line, event in run.evals:
        finished, seconds = float(event["time"]), float(event["eval_s"])
        if finished - seconds < began or finished > ended:
            raise EventError(
                f"{path}:{line}: eval event: the evaluation from {finished - seconds!r} to {finished!r} lies"
                f" outside its run, from {began!r} to {ended!r}"
            )
    rank0 = run.columns["rank"] == 0
    first = run.first_step or {}
    stepped, step = first.get("time"), first.get("step_s")
    if isinstance(stepped, (int, float)) and isinstance(step, (int, float)):
        finished = float(stepped)
        if finished - step < began or finished > ended:
            line = int(run.columns["_line"][rank0][0])
            raise EventError(
                f"{path}:{line}: iteration event: rank 0's first step, from {finished - step!r}"
                f" to {finished!r}, lies outside its run, from {began!r} to {ended!r}"
            )
    busy = float(np.nansum(run.columns["step_s"][rank0])) + sum(float(e["eval_s"]) for _, e in run.evals)
    if busy > ended - began:
        raise EventError(
            f"{path}:{end_line}: rank 0's steps and evaluations take {busy:.6g} s, longer than the run's"
            f" {ended - began:.6g} s from run_start (line {start_line}) to run_end: it runs them one after another"
        )
    _check_step_order(path, run, ended)


def _check_step_order(path: str | os.PathLike[str], run: RunEvents, ended: float) -> None:
    """Each rank's steps end in the order it wrote them (on its own clock: a rank's steps
    run one after another, and a rank writes its events in order), and rank 0's last step
    ends by run_end. A step without a time (null) is not compared. EventError naming
    ``FILE:LINE`` of the first step out of order."""
    ranks, times, lines = run.columns["rank"], run.columns["time"], run.columns["_line"]
    order = np.argsort(ranks, kind="stable")  # each rank's events, in file order
    ranks, times, lines = ranks[order], times[order], lines[order]
    known = ~np.isnan(times)
    ranks, times, lines = ranks[known], times[known], lines[known]
    back = np.flatnonzero((ranks[1:] == ranks[:-1]) & (times[1:] < times[:-1]))
    if back.size:
        at = int(back[0]) + 1
        raise EventError(
            f"{path}:{int(lines[at])}: iteration event: rank {int(ranks[at])}'s step ends at {float(times[at])!r},"
            f" before its step of line {int(lines[at - 1])} ended ({float(times[at - 1])!r}): a rank's steps run"
            " one after another"
        )
    last = np.flatnonzero(ranks == 0)
    if last.size and times[last[-1]] > ended:
        raise EventError(
            f"{path}:{int(lines[last[-1]])}: iteration event: rank 0's step ends at {float(times[last[-1]])!r},"
            f" after its run's run_end at {ended!r}"
        )
