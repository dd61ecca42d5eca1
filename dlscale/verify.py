"""Check a handed-over study: ``python -m dlscale.verify ARCHIVE_OR_RESULTS_DIR``.

Two checks, and every difference is reported by file name with what differs:

1. Checksums (an archive from ``make artifact``, or a folder it was unpacked into): every
   file listed in ``MANIFEST.json`` must be there with its sha256 and size, nothing may
   be there that the manifest does not list, and every run the study's config expands to
   must have its events file.
2. Recomputation: the tables are made again from the recorded events with the code the
   workflow runs (what the aggregate rule runs: ``dlscale.analysis.aggregate`` and
   ``write_outputs``, every table of ``OUTPUT_FILES``, the events given by the same
   relative paths) and compared with the stored ones: the CSV tables (runs, findings, ...)
   cell by cell as text (the same formatting, so floats must match to the last digit),
   ``runs.parquet`` and ``iterations.parquet`` (the figures' data) value by value,
   exactly. The scaling model's tables, the figures and the report are covered by the
   checksums.

Exit status 0 when everything matches, 1 when anything differs (each difference one line,
``FILE: what``), 2 when the argument is not a study.

A results folder without a manifest gets the recomputation only (``--config FILE`` adds
the check that every run of the study has its events).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dlscale.artifact import MANIFEST, analysis_code_sha256, analysis_outputs, sha256_file

#: At most this many differences are listed per file (then how many more there are).
MAX_PER_FILE = 12
#: Where a run's events file is, relative to the results folder.
EVENTS_GLOB = "runs/**/events.jsonl"
_EVENTS_PATH_RE = re.compile(r"^(?P<prefix>.*?)runs/(?P<run_id>.+)/events\.jsonl$")


class NotAStudy(ValueError):
    """The argument is neither an archive nor a folder with results."""


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


@contextlib.contextmanager
def opened(target: str | Path) -> Iterator[tuple[Path, Path]]:
    """``(study root, results folder)`` of an archive (unpacked into a temporary folder),
    an unpacked archive (a folder with MANIFEST.json) or a results folder."""
    target = Path(target)
    if target.is_file():
        with tempfile.TemporaryDirectory(prefix="dlscale-verify-") as tmp:
            if zipfile.is_zipfile(target):
                with zipfile.ZipFile(target) as archive:
                    archive.extractall(tmp)
            elif tarfile.is_tarfile(target):
                with tarfile.open(target) as archive:
                    archive.extractall(tmp, filter="data")
            else:
                raise NotAStudy(f"{target}: neither a .tar(.gz) nor a .zip archive")
            root = _find_root(Path(tmp))
            yield root, root / "results"
        return
    if not target.is_dir():
        raise NotAStudy(f"{target}: no such file or folder")
    if (target / MANIFEST).is_file():
        yield target, target / "results"
    elif (target / "runs").is_dir() or (target / "runs.csv").is_file():
        yield target.parent, target
    elif (target / "results").is_dir():
        yield target, target / "results"
    else:
        raise NotAStudy(f"{target}: no {MANIFEST}, runs/ or runs.csv here")


def _find_root(unpacked: Path) -> Path:
    if (unpacked / MANIFEST).is_file():
        return unpacked
    found = sorted(unpacked.glob(f"*/{MANIFEST}"))
    if len(found) != 1:
        raise NotAStudy(f"the archive has {len(found)} {MANIFEST} files in its top folders, not one")
    return found[0].parent


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


# --- checksums ------------------------------------------------------------------------


def check_manifest(root: Path, manifest: dict[str, Any], report: Report) -> None:
    """Every listed file present with its checksum and size, nothing unlisted."""
    listed: dict[str, dict[str, Any]] = manifest.get("files") or {}
    for name, entry in sorted(listed.items()):
        path = root / name
        if not path.is_file():
            report.add(name, f"listed in {MANIFEST} but missing")
            continue
        size, digest = path.stat().st_size, sha256_file(path)
        if digest != entry.get("sha256"):
            report.add(
                name,
                f"content differs from {MANIFEST} (sha256 recorded {str(entry.get('sha256'))[:16]}...,"
                f" found {digest[:16]}...; {entry.get('bytes')} -> {size} bytes)",
            )
    present = {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and path.name != MANIFEST
    }
    for name in sorted(present - set(listed)):
        report.add(name, f"not listed in {MANIFEST} (added after the archive was made?)")
    report.checked.append(f"{len(listed)} checksums")


def check_study_runs(results: Path, run_ids: Sequence[str], report: Report, prefix: str = "results/") -> None:
    """Every run of the study has its events file."""
    missing = [run_id for run_id in run_ids if not (results / "runs" / run_id / "events.jsonl").is_file()]
    for run_id in missing:
        report.add(
            f"{prefix}runs/{run_id}/events.jsonl", f"missing: run {run_id} of the study has no events file"
        )
    report.checked.append(f"{len(run_ids)} runs of the study present" if not missing else "runs of the study")


# --- recomputation --------------------------------------------------------------------


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return (rows[0], rows[1:]) if rows else ([], [])


def _events_order(results: Path) -> tuple[str, list[str]]:
    """``(path prefix, run ids)``: the events files in the order the workflow passed them
    (runs.csv's ``events_path`` order), then any others found, sorted; and the prefix the
    workflow's paths had (``results/``), so that recomputed paths read the same."""
    found = sorted(
        path.parent.relative_to(results / "runs").as_posix()
        for path in results.glob(EVENTS_GLOB)
        if path.is_file()
    )
    prefix, ordered = "results/", []
    runs_csv = results / "runs.csv"
    if runs_csv.is_file():
        header, rows = _read_csv(runs_csv)
        if "events_path" in header:
            column = header.index("events_path")
            for row in rows:
                match = _EVENTS_PATH_RE.match(row[column]) if column < len(row) else None
                if match:
                    prefix = match["prefix"]
                    ordered.append(match["run_id"])
    present = set(found)
    order = [run_id for run_id in dict.fromkeys(ordered) if run_id in present]
    order += [run_id for run_id in found if run_id not in set(order)]
    return prefix, order


@contextlib.contextmanager
def _as_workflow_saw_it(results: Path, prefix: str) -> Iterator[None]:
    """cwd where ``<prefix>runs/...`` names the events under ``results``, as in the study
    folder: the workflow gives the analysis paths relative to it (``results/runs/...``),
    and runs.csv records them."""
    if not prefix.strip("/"):
        with contextlib.chdir(results):
            yield
        return
    with tempfile.TemporaryDirectory(prefix="dlscale-verify-cwd-") as tmp:
        link = Path(tmp) / prefix.rstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(results.resolve(), target_is_directory=True)
        with contextlib.chdir(tmp):
            yield


def recompute(
    results: Path, out: Path, report: Report, name_prefix: str = "results/"
) -> dict[str, Path] | None:
    """Every table of the aggregate rule, made again from ``results``' events into ``out``."""
    from dlscale import analysis
    from dlscale.events import EventError, read_events

    prefix, run_ids = _events_order(results)
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
            read_events(results / "runs" / run_id / "events.jsonl")
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
        with _as_workflow_saw_it(results, "" if os.path.isabs(prefix) else prefix):
            # What the aggregate rule runs (scripts/aggregate.py), with the host's matmul
            # peak (rules/tune.smk) when the study measured one.
            peak_file = results / "host" / "matmul_peak.json"
            peak = json.loads(peak_file.read_text()) if peak_file.is_file() else None
            analysis.write_outputs(analysis.aggregate(paths, peak), tables)
    except Exception as err:  # noqa: BLE001 - whatever stops the analysis is the finding
        report.add(
            f"{name_prefix}runs",
            f"the tables cannot be recomputed from the events: {type(err).__name__}: {err}",
        )
        return None
    report.checked.append(f"{len(paths)} runs recomputed")
    return tables


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
    s_head, s_rows = _read_csv(stored)
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


# --- entry point ----------------------------------------------------------------------


def verify(target: str | Path, config: str | Path | None = None) -> Report:
    """Check an archive, an unpacked archive or a results folder; see the module doc."""
    report = Report()
    with opened(target) as (root, results):
        manifest_path = root / MANIFEST
        prefix = _rel(results, root) + "/" if results != root else ""
        if manifest_path.is_file():
            try:
                manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as err:
                report.add(MANIFEST, f"not JSON: {err}")
                manifest = {}
            check_manifest(root, manifest, report)
            run_ids = (manifest.get("study") or {}).get("run_ids")
            if run_ids:
                check_study_runs(results, run_ids, report, prefix)
            recorded = (manifest.get("provenance") or {}).get("analysis_sha256")
            if recorded and recorded != analysis_code_sha256():
                report.notes.append(
                    "this dlscale's analysis code differs from the one that made the tables (git "
                    f"{(manifest.get('provenance') or {}).get('git_sha')}): table differences may come"
                    " from the code, not the data; check out that revision to compare like with like"
                )
        if config is not None:
            from dlscale.artifact import _expand, load_study

            check_study_runs(
                results, [run.run_id for run in _expand(load_study([Path(config)]))], report, prefix
            )
        check_tables(results, report, prefix)
    return report


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlscale.verify", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="an archive (make artifact), an unpacked archive, or a results folder")
    parser.add_argument("--config", help="the study's config: check that every run of it has its events")
    args = parser.parse_args(argv)
    try:
        report = verify(args.target, args.config)
    except NotAStudy as err:
        print(f"verify: {err}", file=sys.stderr)
        return 2
    for note in report.notes:
        print(f"note: {note}")
    for line in report.lines():
        print(line)
    if report.ok:
        print(
            f"verify: OK: {args.target}: {', '.join(report.checked)}; every table matches its recomputation"
        )
        return 0
    print(
        f"verify: FAILED: {args.target}: {len(report.problems)} differences in {len(report.files())} files:"
        f" {', '.join(report.files())}"
    )
    return 1


if __name__ == "__main__":
    sys.exit(_main())
