"""Check a handed-over study: ``python -m dlscale.archive.verify ARCHIVE_OR_RESULTS_DIR``.

Two checks, and every difference is reported by file name with what differs:

1. Checksums (an archive from ``make artifact``, or a folder it was unpacked into): every
   file listed in ``MANIFEST.json`` must be there with its sha256 and size, nothing may
   be there that the manifest does not list, and every run the study's config expands to
   must have its events file.
2. Recomputation: the tables are made again from the recorded events with the code the
   workflow runs (what the aggregate rule runs: ``dlscale.analysis.aggregate.aggregate`` and
   ``write_outputs``, every table of ``OUTPUT_FILES``, the events given by the same
   relative paths) and compared with the stored ones: the CSV tables (runs, findings, ...)
   cell by cell as text (the same formatting, so floats must match to the last digit),
   ``runs.parquet`` and ``iterations.parquet`` (the figures' data) value by value,
   exactly. The scaling model's tables, the figures and the report are covered by the
   checksums.

Exit status 0 when everything matches, 1 when anything differs (each difference one line,
``FILE: what``), 2 when the argument is not a study or is refused as hostile (one line on
stderr, ``verify: refused: member 'NAME': the rule it broke``).

Archives come from elsewhere and are hostile input (dlscale.archive.safety): every member's
name, type and size is checked before anything is unpacked (no absolute name, no ``..``, no
link, device or FIFO, sizes within ``--max-unpacked-bytes``, ``--max-member-bytes``,
``--max-ratio`` and ``--max-members``), everything lands in one temporary folder, and every
path read from inside the study (the manifest's names and run ids, runs.csv's
``events_path``) must stay inside it. A folder given directly is held to the same rules.

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
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dlscale.archive import safety
from dlscale.archive.artifact import (
    EXCLUDED_DIRS,
    MANIFEST,
    MAX_FILE_BYTES,
    analysis_code_sha256,
    analysis_outputs,
    sha256_file,
)
from dlscale.archive.safety import Limits, Member, Refused, check_tree, confined, member, safe_relative

#: At most this many differences are listed per file (then how many more there are).
MAX_PER_FILE = 12
#: Where a run's events file is, relative to the results folder.
EVENTS_GLOB = "runs/**/events.jsonl"
_EVENTS_PATH_RE = re.compile(r"^(?P<prefix>.*?)runs/(?P<run_id>.+)/events\.jsonl$")
#: What an archive may unpack to unless the command line says otherwise (docs/verify.md):
#: a member as large as dlscale.archive.artifact archives at most.
DEFAULT_LIMITS = Limits(max_member_bytes=MAX_FILE_BYTES)


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
def opened(target: str | Path, limits: Limits = DEFAULT_LIMITS) -> Iterator[tuple[Path, Path]]:
    """``(study root, results folder)`` of an archive (checked, then unpacked into a
    temporary folder), an unpacked archive (a folder with MANIFEST.json) or a results
    folder. ``Refused`` for hostile content, ``NotAStudy`` for anything else."""
    target = Path(target)
    if target.is_file():
        members = safety.inspect(target, limits)
        top = _top_folder(members)
        with tempfile.TemporaryDirectory(prefix="dlscale-verify-") as tmp:
            safety.extract(target, Path(tmp), members, limits)
            root = Path(tmp) / top
            check_tree(root, hard_links=False)
            yield root, root / "results"
        return
    if not target.is_dir():
        raise NotAStudy(f"{target}: no such file or folder")
    if (target / MANIFEST).is_file():
        check_tree(target, hard_links=False)
        yield target, target / "results"
    elif (target / "runs").is_dir() or (target / "runs.csv").is_file():
        if (target.parent / MANIFEST).is_file():  # an unpacked archive's results folder
            check_tree(target.parent, hard_links=False)
        else:
            check_tree(target, f"{target.name}/", skip=EXCLUDED_DIRS, hidden=False)
        yield target.parent, target
    elif (target / "results").is_dir():
        check_tree(target / "results", "results/", skip=EXCLUDED_DIRS, hidden=False)
        yield target, target / "results"
    else:
        raise NotAStudy(f"{target}: no {MANIFEST}, runs/ or runs.csv here")


def _top_folder(members: Sequence[Member]) -> str:
    """The archive's study folder ('' for the archive's top): where its one MANIFEST.json
    is. A member outside it is refused (the unlisted-file check would not see it)."""
    paths = {found.path for found in members if not found.is_dir}
    if MANIFEST in paths:
        return ""
    found = sorted(path for path in paths if path.count("/") == 1 and path.endswith(f"/{MANIFEST}"))
    if len(found) != 1:
        raise NotAStudy(f"the archive has {len(found)} {MANIFEST} files in its top folders, not one")
    top = found[0].rpartition("/")[0]
    for entry in members:
        if entry.path != top and not entry.path.startswith(f"{top}/"):
            raise Refused(member(entry.name), f"outside the study's top folder {top + '/'!r}")
    return top


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


# --- checksums ------------------------------------------------------------------------


def load_manifest(root: Path) -> dict[str, Any]:
    """``root``'s MANIFEST.json, its shape checked before any name in it is used: a JSON
    object whose ``files`` map names to objects, whose ``study`` and ``provenance`` are
    objects, and whose every name and run id stays inside the study (a name such as
    ``../../etc/passwd`` is refused, never read). ``Refused`` otherwise."""
    where = f"file {MANIFEST!r}"
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise Refused(where, f"not JSON ({type(err).__name__}: {err})") from None
    if not isinstance(manifest, dict):
        raise Refused(where, f"not a JSON object but a JSON {type(manifest).__name__}")
    for key in ("files", "study", "provenance"):
        if not isinstance(manifest.get(key) or {}, dict):
            raise Refused(where, f"{key!r} is not a JSON object")
    for name, entry in (manifest.get("files") or {}).items():
        confined(root, name, where, f"the files entry {name!r}")
        if not isinstance(entry, dict):
            raise Refused(where, f"the files entry {name!r} is not a JSON object")
    run_ids = (manifest.get("study") or {}).get("run_ids") or []
    if not isinstance(run_ids, list):
        raise Refused(where, "study.run_ids is not a list")
    for run_id in run_ids:
        confined(root, f"results/runs/{safe_relative(run_id, where, f'the run id {run_id!r}')}", where)
    return manifest


def check_manifest(root: Path, manifest: dict[str, Any], report: Report) -> None:
    """Every listed file present with its checksum and size, nothing unlisted (the names
    checked by ``load_manifest``)."""
    listed: dict[str, dict[str, Any]] = manifest.get("files") or {}
    for name, entry in sorted(listed.items()):
        path = confined(root, name, f"file {MANIFEST!r}", f"the files entry {name!r}")
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


def _recorded_events_paths(runs_csv: Path, label: str) -> list[tuple[str, str]]:
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
        for _, value in _recorded_events_paths(runs_csv, f"{name_prefix}runs.csv"):
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
    from dlscale.events import EventError, check_file

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
            peak = json.loads(peak_file.read_text()) if peak_file.is_file() else None
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


# --- entry point ----------------------------------------------------------------------


def verify(target: str | Path, config: str | Path | None = None, limits: Limits = DEFAULT_LIMITS) -> Report:
    """Check an archive, an unpacked archive or a results folder; see the module doc.
    ``Refused`` for hostile input, ``NotAStudy`` for what is no study at all."""
    report = Report()
    with opened(target, limits) as (root, results):
        manifest_path = root / MANIFEST
        prefix = _rel(results, root) + "/" if results != root else ""
        manifest = load_manifest(root) if manifest_path.is_file() else None
        if (results / "runs.csv").is_file():
            # Hostile paths are refused before anything is hashed or recomputed.
            _recorded_events_paths(results / "runs.csv", f"{prefix}runs.csv")
        if manifest is not None:
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
            from dlscale.archive.artifact import _expand, load_study

            check_study_runs(
                results, [run.run_id for run in _expand(load_study([Path(config)]))], report, prefix
            )
        check_tables(results, report, prefix)
    return report


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_count(text: str) -> int:
    """``4G``, ``64M``, ``500K`` or a plain number of bytes (binary units)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)i?B?\s*", text, flags=re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or with K, M, G or T)")
    return int(match[1]) * _UNITS[match[2].upper()]


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.archive.verify", description=__doc__.splitlines()[0]
    )
    parser.add_argument("target", help="an archive (make artifact), an unpacked archive, or a results folder")
    parser.add_argument("--config", help="the study's config: check that every run of it has its events")
    limits = parser.add_argument_group("limits on an archive (docs/verify.md)")
    default = DEFAULT_LIMITS
    limits.add_argument(
        "--max-unpacked-bytes",
        type=byte_count,
        metavar="BYTES",
        default=default.max_unpacked_bytes,
        help="all members together (default: %(default)s bytes; K, M, G suffixes allowed)",
    )
    limits.add_argument(
        "--max-member-bytes",
        type=byte_count,
        metavar="BYTES",
        default=default.max_member_bytes,
        help="one member (default: %(default)s bytes, the largest file dlscale.archive.artifact archives)",
    )
    limits.add_argument(
        "--max-ratio",
        type=_positive,
        metavar="RATIO",
        default=default.max_ratio,
        help="unpacked bytes over the archive's bytes (default: %(default)s)",
    )
    limits.add_argument(
        "--max-members",
        type=lambda text: int(_positive(text)),
        metavar="N",
        default=default.max_members,
        help="files and folders (default: %(default)s)",
    )
    return parser


def _main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    limits = Limits(
        max_unpacked_bytes=args.max_unpacked_bytes,
        max_ratio=args.max_ratio,
        max_member_bytes=args.max_member_bytes,
        max_members=args.max_members,
    )
    try:
        report = verify(args.target, args.config, limits)
    except Refused as err:
        print(f"verify: refused: {_one_line(err)}", file=sys.stderr)
        return 2
    except NotAStudy as err:
        print(f"verify: {_one_line(err)}", file=sys.stderr)
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


def _one_line(err: Exception) -> str:
    """A message on one line, whatever a name in it held."""
    return str(err).replace("\r", "\\r").replace("\n", "\\n")


if __name__ == "__main__":
    sys.exit(_main())
