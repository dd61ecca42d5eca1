"""What filled a Snakemake invocation's time between the study's runs: its jobs' start and
end times from Snakemake's own log (``.snakemake/log/*.snakemake.log``).

``wall_split.csv`` (``dlscale.analysis.wallsplit``) measures the runs from their events,
and between them only a gap; the log says which jobs ran in it (the environments, data,
tuning races, parity references, the analysis) and when none ran at all. The log is the
invocation's, so this reads a finished one (``python -m dlscale.analysis.snakelog LOG``):
the aggregation that runs inside the invocation cannot read its own log to the end.

Snakemake stamps each job's start and each "Finished jobid" to the second
(``[Fri Dec  4 15:06:16 2026]``, local time), so every figure here is whole seconds.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?rule (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_MESSAGE = re.compile(r"^Job (\d+): ")
_FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")

#: The rule whose jobs are the study's runs (rules/train.smk).
TRAIN_RULE = "train"
#: A rule that only collects targets (no work of its own).
ALL_RULE = "all"


@dataclass(frozen=True)
class Job:
    jobid: int
    rule: str
    start: float
    end: float


def _seconds(stamp: str) -> float:
    return datetime.strptime(" ".join(stamp.split()), "%a %b %d %H:%M:%S %Y").timestamp()


def jobs(lines: Iterable[str]) -> list[Job]:
    """Every job of the log that started and finished in it, in the order they finished."""
    stamp: float | None = None
    started: dict[int, float] = {}
    pending_rule: float | None = None  # a "rule X:" block waits for its jobid line
    done: list[Job] = []
    for raw in lines:
        line = raw.rstrip("\n")
        if match := _STAMP.match(line):
            stamp = _seconds(match.group(1))
        elif _RULE.match(line) and stamp is not None:
            pending_rule = stamp
        elif (match := _JOBID.match(line)) and pending_rule is not None:
            started[int(match.group(1))] = pending_rule
            pending_rule = None
        elif (match := _MESSAGE.match(line)) and stamp is not None:
            started[int(match.group(1))] = stamp
        elif (match := _FINISHED.match(line)) and stamp is not None:
            jobid = int(match.group(1))
            if jobid in started:
                done.append(Job(jobid, match.group(2), started.pop(jobid), stamp))
    return done


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: Iterable[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def time_split(done: Sequence[Job]) -> pd.DataFrame:
    """One row per rule (``jobs``, ``busy_s``: the sum of its jobs' durations, and
    ``outside_runs_s``: the time its jobs ran while no run did), then the invocation's rows:
    ``runs`` (time some run ran), ``other jobs`` (time only other jobs ran), ``no job`` (time
    nothing ran: Snakemake's own scheduling and checks) and ``invocation`` (first job's start
    to the last one's end, the sum of the three before it)."""
    work = [job for job in done if job.rule != ALL_RULE]
    if not work:
        return pd.DataFrame(columns=["rule", "jobs", "busy_s", "outside_runs_s"])
    runs = _union((job.start, job.end) for job in work if job.rule == TRAIN_RULE)
    everything = _union((job.start, job.end) for job in work)
    rows = []
    for rule in sorted({job.rule for job in work}):
        mine = [job for job in work if job.rule == rule]
        covered = _union((job.start, job.end) for job in mine)
        overlap = _length(
            (max(a, c), min(b, d)) for a, b in covered for c, d in runs if max(a, c) < min(b, d)
        )
        rows.append(
            {
                "rule": rule,
                "jobs": len(mine),
                "busy_s": sum(job.end - job.start for job in mine),
                "outside_runs_s": _length(covered) - overlap,
            }
        )
    wall = max(job.end for job in work) - min(job.start for job in work)
    some_job = _length(everything)
    rows += [
        {"rule": "runs", "jobs": sum(j.rule == TRAIN_RULE for j in work), "busy_s": _length(runs)},
        {
            "rule": "other jobs",
            "jobs": sum(j.rule != TRAIN_RULE for j in work),
            "busy_s": some_job - _length(runs),
        },
        {"rule": "no job", "jobs": 0, "busy_s": wall - some_job},
        {"rule": "invocation", "jobs": len(work), "busy_s": wall},
    ]
    return pd.DataFrame.from_records(rows, columns=["rule", "jobs", "busy_s", "outside_runs_s"])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dlscale.analysis.snakelog LOG``: the table of ``time_split`` as CSV."""
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.analysis.snakelog", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("log", help="a finished invocation's log (.snakemake/log/*.snakemake.log)")
    args = parser.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8") as handle:
            table = time_split(jobs(handle))
    except (OSError, UnicodeDecodeError) as err:
        print(f"python -m dlscale.analysis.snakelog: {args.log}: {err}", file=sys.stderr)
        return 2
    if table.empty:
        print(f"python -m dlscale.analysis.snakelog: {args.log}: no finished job in it", file=sys.stderr)
        return 2
    table.to_csv(sys.stdout, index=False, float_format="%.0f")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
