"""Check a handed-over study: ``python -m dlscale.archive.verify ARCHIVE_OR_RESULTS_DIR``.

Two results, always both printed (docs/verify.md, "What verify proves"):

* integrity: the study is consistent with itself (the checks below);
* authenticity: the archive is the one its publisher made, judged only against a digest
  from the publisher (``--expect-sha256 HEX``, the ``ARCHIVE.sha256`` beside it;
  ``dlscale.archive.origin``). Without one the verdict says "consistent, origin not
  proven": a forger can make an archive consistent.

The integrity checks, every difference reported by file name with what differs:

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
   exactly. The scaling model's tables are covered by the checksums.
3. What a reader sees (``dlscale.archive.published``): each study figure's embedded data
   against its tables, and every file the report embeds against the study's own.

The manifest itself carries a seal (the sha256 of the rest of it), so that its provenance
(host, platform, versions) is covered as the data are: an edit that does not redo the seal
fails integrity, one that does is caught by the publisher's digest alone.

Exit status 0 when everything matches (with or without proof of origin: the verdict says
which), 1 when anything differs or the publisher's digest does not match (each difference
one line, ``FILE: what``), 2 when the argument is not a study or is refused as hostile (one line on
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
import json
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dlscale.archive import published, safety
from dlscale.archive.artifact import (
    EXCLUDED_DIRS,
    FORMAT,
    MANIFEST,
    MANIFEST_SEAL,
    MAX_FILE_BYTES,
    manifest_seal,
    read_study_config,
    sha256_file,
)
from dlscale.archive.codehash import analysis_code_sha256
from dlscale.archive.origin import FAILED, NOT_PROVEN, VERDICT, Origin, check_origin
from dlscale.archive.recompute import Report, check_tables, recorded_events_paths
from dlscale.archive.safety import Limits, Member, Refused, check_tree, confined, member, safe_relative
from dlscale.base.untrusted import shown
from dlscale.study.matrix import expand_runs

#: What an archive may unpack to unless the command line says otherwise (docs/verify.md):
#: a member as large as dlscale.archive.artifact archives at most.
DEFAULT_LIMITS = Limits(max_member_bytes=MAX_FILE_BYTES)


class NotAStudy(ValueError):
    """The argument is neither an archive nor a folder with results."""


class Verdict(Report):
    """The integrity report (``Report``: its problems are integrity's) and the
    authenticity result (``origin``)."""

    def __init__(self) -> None:
        super().__init__()
        self.origin = Origin(NOT_PROVEN, "not checked")

    @property
    def authentic_or_unproven(self) -> bool:
        """No digest from the publisher contradicts the archive."""
        return self.origin.status != FAILED

    @property
    def words(self) -> str:
        """The verdict in words: "consistent, origin not proven" and the like."""
        if not self.ok:
            return "inconsistent: " + ", ".join(self.files())
        return VERDICT[self.origin.status]


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
    check_seal(manifest, report)


def check_seal(manifest: dict[str, Any], report: Report) -> None:
    """The manifest's own content (its provenance: host, platform, versions) against its
    seal; a manifest of this format without one fails, an older one is noted."""
    recorded = manifest.get(MANIFEST_SEAL)
    if recorded is None:
        if manifest.get("format") == FORMAT:
            report.add(
                MANIFEST, f"no {MANIFEST_SEAL} (its format {FORMAT!r} has one): edited after it was made?"
            )
        else:
            report.notes.append(
                f"{MANIFEST} has no seal (format {shown(manifest.get('format'))}, made before seals):"
                " its provenance is checked by the publisher's digest alone"
            )
        return
    if recorded != manifest_seal(manifest):
        report.add(
            MANIFEST,
            f"its content differs from its seal ({MANIFEST_SEAL} {str(recorded)[:16]}...): edited after"
            " it was made (provenance: host, platform, versions, or another field)",
        )
        return
    report.checked.append("the manifest's seal")


def check_study_runs(results: Path, run_ids: Sequence[str], report: Report, prefix: str = "results/") -> None:
    """Every run of the study has its events file."""
    missing = [run_id for run_id in run_ids if not (results / "runs" / run_id / "events.jsonl").is_file()]
    for run_id in missing:
        report.add(
            f"{prefix}runs/{run_id}/events.jsonl", f"missing: run {run_id} of the study has no events file"
        )
    report.checked.append(f"{len(run_ids)} runs of the study present" if not missing else "runs of the study")


# --- entry point ----------------------------------------------------------------------


def verify(
    target: str | Path,
    config: str | Path | None = None,
    limits: Limits = DEFAULT_LIMITS,
    expect_sha256: str | None = None,
) -> Verdict:
    """Check an archive, an unpacked archive or a results folder; see the module doc.
    ``Refused`` for hostile input, ``NotAStudy`` for what is no study at all."""
    report = Verdict()
    if Path(target).exists():
        report.origin = check_origin(Path(target), expect_sha256)
    with opened(target, limits) as (root, results):
        manifest_path = root / MANIFEST
        prefix = _rel(results, root) + "/" if results != root else ""
        manifest = load_manifest(root) if manifest_path.is_file() else None
        if (results / "runs.csv").is_file():
            # Hostile paths are refused before anything is hashed or recomputed.
            recorded_events_paths(results / "runs.csv", f"{prefix}runs.csv")
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
            study = read_study_config([Path(config)])
            check_study_runs(results, [run.run_id for run in expand_runs(study)], report, prefix)
        check_tables(results, report, prefix)
        published.check_figures(results, report, prefix)
        published.check_report(root, results, report, prefix)
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
    parser.add_argument(
        "--expect-sha256",
        metavar="HEX",
        help="the archive's sha256 as its publisher gave it (make artifact prints it): proves its origin;"
        " without it (or the publisher's ARCHIVE.sha256 beside the archive) the verdict is"
        " 'consistent, origin not proven'",
    )
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    limits = Limits(
        max_unpacked_bytes=args.max_unpacked_bytes,
        max_ratio=args.max_ratio,
        max_member_bytes=args.max_member_bytes,
        max_members=args.max_members,
    )
    try:
        report = verify(args.target, args.config, limits, args.expect_sha256)
    except Refused as err:
        print(f"verify: refused: {_one_line(err)}", file=sys.stderr)
        return 2
    except NotAStudy as err:
        print(f"verify: {_one_line(err)}", file=sys.stderr)
        return 2
    for line in result_lines(str(args.target), report):
        print(line)
    return 0 if report.ok and report.authentic_or_unproven else 1


def result_lines(target: str, report: Verdict) -> list[str]:
    """What verify prints, every line with the names from input escaped (``shown``: a
    name holding a newline or a terminal escape prints as ``\\n``, ``\\x1b``): the notes,
    the differences, then the integrity result, the authenticity result and the verdict."""
    lines = [f"note: {note}" for note in report.notes] + report.lines()
    name = shown(target)
    if report.ok:
        lines.append(
            f"verify: integrity: OK: {name}: {', '.join(report.checked)}; every table matches its"
            " recomputation and the figures and report show the tables"
        )
    else:
        lines.append(
            f"verify: integrity: FAILED: {name}: {len(report.problems)} differences in"
            f" {len(report.files())} files: {', '.join(report.files())}"
        )
    lines.append(f"verify: authenticity: {report.origin.status.upper()}: {report.origin.detail}")
    ok = report.ok and report.authentic_or_unproven
    lines.append(f"verify: {'OK' if ok else 'FAILED'}: {name}: {report.words}")
    return [shown(line) for line in lines]


def _one_line(err: Exception) -> str:
    """A message on one line, whatever a name in it held (control characters escaped)."""
    return shown(err)


if __name__ == "__main__":
    sys.exit(main())
