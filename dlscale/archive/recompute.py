"""Recompute a study's tables from its recorded events and compare them with the stored ones.

The second of verify's checks (``dlscale.archive.verify``, which opens the study and checks
the checksums first): the tables are made again with the code the workflow runs (what the
aggregate rule runs: ``dlscale.analysis.aggregate.aggregate`` and ``write_outputs``, every
table of ``OUTPUT_FILES``, the events given by the same relative paths) and compared with
the stored ones: the CSV tables cell by cell as text (the same formatting, so floats must
match to the last digit), ``runs.parquet`` and ``iterations.parquet`` value by value,
exactly. Paths read from the study (runs.csv's ``events_path``) are hostile input, held to
dlscale.archive.safety's rules.
"""

from __future__ import annotations

import contextlib
import csv
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dlscale import runid
from dlscale.archive.artifact import analysis_outputs
from dlscale.archive.safety import Refused, confined, safe_relative
from dlscale.base.foreign import read_json

#: The host's matmul peak (results/host/matmul_peak.json) is a few hundred bytes.
MAX_PEAK_BYTES = 1 << 20
#: At most this many differences are listed per file (then how many more there are).
MAX_PER_FILE = 12
#: Where a run's events file is, relative to the results folder.
EVENTS_GLOB = "runs/**/events.jsonl"
#: A run's events path as runs.csv records it: ``<prefix>runs/<run id>/events.jsonl``.
_EVENTS_PATH_RE = runid.events_path_pattern()


class Report:
    """Differences found, by file, in the order found."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []
        self.notes: list[str] = []
        self.checked: list[str] = []
        #: Columns left out of the table comparison (see recompute).
        self.ignored_columns: set[str] = set()

    def add(self, name: str, what: str) -> None:
        self.problems.append((name, what))

    def add_many(self, name: str, items: list[str]) -> None:
        for what in items[:MAX_PER_FILE]:
            self.add(name, what)
        if len(items) > MAX_PER_FILE:
            self.add(name, f"... and {len(items) - MAX_PER_FILE} more differences")

    @property
    def ok(self) -> bool:
        return not self.problems

    def files(self) -> list[str]:
        return list(dict.fromkeys(name for name, _ in self.problems))

    def lines(self) -> list[str]:
        return [f"{name}: {what}" for name, what in self.problems]


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return (rows[0], rows[1:]) if rows else ([], [])


def recorded_events_paths(runs_csv: Path, label: str) -> list[tuple[str, str]]:
    """``(where, events_path)`` of every row of runs.csv, each checked: a path with a
    ``..`` component (or a NUL, or a relative one that is not a plain relative path) is
    ``Refused``, as verify would otherwise make it under its own folder and follow it
    outside. An unreadable table gives none (its comparison then says so)."""
    found: list[tuple[str, str]] = []
    try:
        with open(runs_csv, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            if "events_path" not in header:
                return []
            column = header.index("events_path")
            for row in reader:
                value = row[column] if column < len(row) else ""
                where = f"file {label!r} line {reader.line_num}"
                if value:
                    # An absolute path (tables made outside the workflow) is never followed
                    # (see recompute), but held to the same rules.
                    safe_relative(value.lstrip("/"), where, f"the events_path {value!r}")
                found.append((where, value))
    except (csv.Error, UnicodeDecodeError):
        return []
    return found


def _events_order(results: Path, name_prefix: str = "results/") -> tuple[str, list[str]]:
    """``(path prefix, run ids)``: the events files in the order the workflow passed them
    (runs.csv's ``events_path`` order), then any others found, sorted; and the prefix the
    workflow's paths had (``results/``), so that recomputed paths read the same."""
    # Hidden folders (a failed run's .work) are neither archived nor checked (check_tree).
    found = sorted(
        path.parent.relative_to(results / "runs").as_posix()
        for path in results.glob(EVENTS_GLOB)
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(results).parts)
    )
    prefix, ordered = "results/", []
    runs_csv = results / "runs.csv"
    if runs_csv.is_file():
        for _, value in recorded_events_paths(runs_csv, f"{name_prefix}runs.csv"):
            match = _EVENTS_PATH_RE.match(value)
            if match:
                prefix = match["prefix"]
                ordered.append(match["run_id"])
    present = set(found)
    order = [run_id for run_id in dict.fromkeys(ordered) if run_id in present]
    order += [run_id for run_id in found if run_id not in set(order)]
    return prefix, order


@contextlib.contextmanager
def _as_workflow_saw_it(results: Path, prefix: str, where: str = "file 'results/runs.csv'") -> Iterator[None]:
    """cwd where ``<prefix>runs/...`` names the events under ``results``, as in the study
    folder: the workflow gives the analysis paths relative to it (``results/runs/...``),
    and runs.csv records them. The prefix comes from runs.csv: the link is made only
    where it stays inside this function's own temporary folder."""
    if not prefix.strip("/"):
        with contextlib.chdir(results):
            yield
        return
    with tempfile.TemporaryDirectory(prefix="dlscale-verify-cwd-") as tmp:
        link = confined(Path(tmp), prefix, where, f"the events_path prefix {prefix!r}")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(results.resolve(), target_is_directory=True)
        with contextlib.chdir(tmp):
            yield


def recompute(
    results: Path, out: Path, report: Report, name_prefix: str = "results/"
) -> dict[str, Path] | None:
    """Every table of the aggregate rule, made again from ``results``' events into ``out``."""
    from dlscale.analysis import aggregate
    from dlscale.events import EventError, RefusedEvents, check_file

    prefix, run_ids = _events_order(results, name_prefix)
    if os.path.isabs(prefix):
        # Tables made outside the workflow, from absolute paths that need not exist here:
        # the events are read where they are now, and events_path is not compared.
        report.notes.append(
            f"runs.csv names its events by absolute paths ({prefix}...): events_path not compared"
        )
        report.ignored_columns.add("events_path")
        prefix = str(results.resolve()) + "/"
    paths = []
    for run_id in run_ids:
        path = f"{prefix}runs/{run_id}/events.jsonl"
        try:
            check_file(results / "runs" / run_id / "events.jsonl")  # streamed: bounded memory
        except RefusedEvents as err:  # hostile, not a broken run: the study is refused
            raise _refused_events(
                err, results / "runs" / run_id / "events.jsonl", name_prefix + "runs/" + run_id
            ) from None
        except (EventError, ValueError, OSError) as err:
            where = str(err).replace(str(results / "runs"), f"{name_prefix}runs")
            report.add(
                f"{name_prefix}runs/{run_id}/events.jsonl",
                f"unreadable, left out of the recomputation: {where}",
            )
            continue
        paths.append(path)
    tables = {name: out / filename for name, filename in analysis_outputs().items()}
    try:
        with _as_workflow_saw_it(
            results, "" if os.path.isabs(prefix) else prefix, f"file {name_prefix + 'runs.csv'!r}"
        ):
            # What the aggregate rule runs (scripts/aggregate.py), with the host's matmul
            # peak (rules/tune.smk) when the study measured one.
            peak_file = results / "host" / "matmul_peak.json"
            peak = read_json(peak_file, MAX_PEAK_BYTES) if peak_file.is_file() else None
            aggregate.write_outputs(aggregate.aggregate(paths, peak), tables)
    except Refused:
        raise
    except Exception as err:  # noqa: BLE001 - whatever stops the analysis is the finding
        report.add(
            f"{name_prefix}runs",
            f"the tables cannot be recomputed from the events: {type(err).__name__}: {err}",
        )
        return None
    report.checked.append(f"{len(paths)} runs recomputed")
    return tables


def _refused_events(err: Exception, path: Path, label: str) -> Refused:
    """An events file refused as hostile (``RefusedEvents``), named as in the study, with
    its line where the message has one."""
    text = str(err).removeprefix(str(path))
    line, _, rule = text.lstrip(":").partition(": ")
    where = f"file {label + '/events.jsonl'!r}"
    return Refused(f"{where} line {line}", rule) if line.isdigit() else Refused(where, text.lstrip(": "))


def _key(
    stored: Sequence[str], recomputed: Sequence[str], rows: Sequence[Sequence[dict[str, Any]]]
) -> list[str]:
    """Columns that name a row: a run's id (with rank and iteration where a table has
    them), else the shortest run of leading columns unique in both tables; [] for none."""
    common = [c for c in recomputed if c in stored]
    if "run_id" in common:
        return ["run_id", *(c for c in ("rank", "iteration") if c in common)]
    for width in range(1, min(4, len(common)) + 1):
        columns = common[:width]
        if all(len({tuple(str(r.get(c)) for c in columns) for r in table}) == len(table) for table in rows):
            return columns
    return []


def compare_csv(name: str, stored: Path, recomputed: Path, report: Report) -> None:
    """Cell-by-cell text comparison, rows matched by their key columns (see ``_key``)."""
    if not stored.is_file():
        report.add(name, "missing (it cannot be compared with the recomputed table)")
        return
    if stored.read_bytes() == recomputed.read_bytes():
        return
    try:
        s_head, s_rows = _read_csv(stored)
    except (csv.Error, UnicodeDecodeError) as err:
        report.add(name, f"unreadable: {type(err).__name__}: {err}")
        return
    r_head, r_rows = _read_csv(recomputed)
    problems: list[str] = []
    if s_head != r_head:
        missing = [c for c in r_head if c not in s_head]
        extra = [c for c in s_head if c not in r_head]
        what = "; ".join(
            part
            for part in (
                f"columns missing: {', '.join(missing)}" if missing else "",
                f"columns not recomputed: {', '.join(extra)}" if extra else "",
                "columns in another order" if not missing and not extra else "",
            )
            if part
        )
        problems.append(f"header differs ({what})")
    usable = _key(
        s_head,
        r_head,
        [
            [dict(zip(head, row, strict=False)) for row in rows]
            for head, rows in ((s_head, s_rows), (r_head, r_rows))
        ],
    )

    def keyed(head: list[str], rows: list[list[str]]) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for number, row in enumerate(rows, start=2):
            record = dict(zip(head, row, strict=False))
            label = ", ".join(f"{c}={record.get(c, '')}" for c in usable) if usable else f"line {number}"
            while label in out:
                label += "'"
            out[label] = record
        return out

    s_map, r_map = keyed(s_head, s_rows), keyed(r_head, r_rows)
    events = "events_path"
    for label in s_map:
        if label not in r_map:
            source = s_map[label].get(events)
            problems.append(
                f"row {label}: in the table but not recomputed from the events"
                + (f" ({source} missing or unreadable)" if source else "")
            )
    for label in r_map:
        if label not in s_map:
            problems.append(
                f"row {label}: recomputed from {r_map[label].get(events) or 'the events'} but not in the table"
            )
    for label, s_rec in s_map.items():
        r_rec = r_map.get(label)
        if r_rec is None:
            continue
        for column in r_head:
            if column in report.ignored_columns:
                continue
            if column in s_rec and s_rec[column] != r_rec.get(column):
                source = f" (from {r_rec[events]})" if r_rec.get(events) and column != events else ""
                problems.append(
                    f"row {label}: {column} is {s_rec[column]!r} in the table, {r_rec[column]!r} recomputed{source}"
                )
    if not problems:
        if list(s_map) != list(r_map):
            problems.append("rows in another order than the recomputed table")
        elif not report.ignored_columns:
            problems.append("differs from the recomputed table in formatting only (quoting, line ends)")
    report.add_many(name, problems)


def _exact(column: Any) -> list[str]:
    """A column's values as exact text: repr (floats round-trip to the last bit), every
    kind of missing value as one token."""
    import pandas as pd

    out = []
    for value in column.tolist():
        missing = value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))
        out.append("<missing>" if missing else repr(value))
    return out


def compare_parquet(name: str, stored: Path, recomputed: Path, report: Report) -> None:
    """Exact comparison of two parquet tables: columns, types, and every value."""
    import pandas as pd

    if not stored.is_file():
        report.add(name, "missing (it cannot be compared with the recomputed table)")
        return
    try:
        s_df = pd.read_parquet(stored)
    except Exception as err:  # noqa: BLE001
        report.add(name, f"unreadable: {type(err).__name__}: {err}")
        return
    r_df = pd.read_parquet(recomputed)
    problems: list[str] = []
    if list(s_df.columns) != list(r_df.columns):
        problems.append(f"columns differ: table {list(s_df.columns)}, recomputed {list(r_df.columns)}")
    if len(s_df) != len(r_df):
        problems.append(f"{len(s_df)} rows in the table, {len(r_df)} recomputed")
    if not problems:
        key = _key(list(s_df.columns), list(r_df.columns), [])
        labels = (
            s_df[key].astype(str).agg(", ".join, axis=1)
            if key
            else pd.Series([f"row {i}" for i in range(len(s_df))])
        )
        for column in r_df.columns:
            if column in report.ignored_columns:
                continue
            s_col, r_col = s_df[column], r_df[column]
            if s_col.dtype != r_col.dtype:
                problems.append(f"column {column}: type {s_col.dtype} in the table, {r_col.dtype} recomputed")
                continue
            s_vals, r_vals = _exact(s_col), _exact(r_col)
            differs = [i for i, (a, b) in enumerate(zip(s_vals, r_vals, strict=True)) if a != b]
            for index in differs[:3]:
                problems.append(
                    f"{labels.iloc[index]}: {column} is {s_col.iloc[index]!r} in the table,"
                    f" {r_col.iloc[index]!r} recomputed"
                )
            if len(differs) > 3:
                problems.append(f"column {column}: {len(differs) - 3} more rows differ")
    report.add_many(name, problems)


def check_tables(results: Path, report: Report, name_prefix: str = "results/") -> None:
    """Every table the analysis makes, recomputed and compared with the stored one."""
    with tempfile.TemporaryDirectory(prefix="dlscale-verify-tables-") as tmp:
        tables = recompute(results, Path(tmp), report, name_prefix)
        if tables is None:
            return
        for made in tables.values():
            compare = compare_parquet if made.suffix == ".parquet" else compare_csv
            compare(f"{name_prefix}{made.name}", results / made.name, made, report)
    report.checked.append(f"{len(tables)} tables compared")
