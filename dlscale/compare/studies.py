"""The studies a comparison reads (``dlscale.compare.comparison``): found, verified, schema-checked,
and what each ran with.

An argument is a results folder (``runs.csv`` with ``runs/`` beside it), the study folder
above one, or an archive from ``make artifact`` (or a folder one was unpacked into). An
archive is checked with ``dlscale.archive.verify`` first and refused unless every check passes. The
tables carry no schema version of their own (their bytes are pinned by the golden test), so
``table_schema`` derives it from the runs table's columns. ``study_facts`` collects what a
study recorded of how it ran (tables, run_start events, the archive's manifest), so that
``differences`` can state what differs between studies.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dlscale import plausible
from dlscale.analysis import cells as cell_summary
from dlscale.analysis import claims, findings
from dlscale.archive import verify
from dlscale.archive.artifact import EXCLUDED_DIRS, MAX_FILE_BYTES
from dlscale.archive.safety import Refused, check_tree
from dlscale.base import foreign, untrusted
from dlscale.events import MAX_LINE_CHARS

#: The host's matmul peak (results/host/matmul_peak.json) is a few hundred bytes.
MAX_PEAK_BYTES = 1 << 20

# --- the tables' schema -------------------------------------------------------------------

#: What compare says of a study it read without verify (a results folder, not an archive).
NOT_VERIFIED = "not an archive: read as it is, origin not proven"

#: The runs table's columns this comparison cannot do without (every dlscale version's
#: runs.csv has them, the legacy one before cells and claims included).
REQUIRED_RUNS_COLUMNS: tuple[str, ...] = (
    "run_id",
    "framework",
    "model",
    "nodes",
    "ranks_per_node",
    "batch_per_rank",
    "status",
    "throughput",
)
#: The tables carry no version of their own (their bytes are pinned by the golden test):
#: the version is derived from the columns (``table_schema``). A runs table that one day
#: carries a ``schema_version`` column is read only at a version listed here.
SUPPORTED_SCHEMAS: tuple[int, ...] = (1, 2)


class CompareError(ValueError):
    """Input the comparison refuses; the message is one line naming what is wrong."""


def table_schema(runs: pd.DataFrame, name: str = "runs.csv") -> int:
    """The runs table's schema version: its ``schema_version`` column where it has one,
    else derived from its columns (1: the legacy table without dataset, network and the
    exposed share; 2: the current one). ``CompareError`` for a table this comparison
    cannot read (a required column missing, a version it does not know)."""
    if "schema_version" in runs:
        found = sorted({str(v) for v in runs["schema_version"].dropna().unique()})
        versions = [int(v) for v in found if v.isdigit()]
        if len(found) != 1 or len(versions) != 1 or versions[0] not in SUPPORTED_SCHEMAS:
            raise CompareError(
                f"{name}: tables of schema version {', '.join(found) or '(empty)'}, this comparison reads"
                f" version(s) {', '.join(map(str, SUPPORTED_SCHEMAS))}: compare with the dlscale that made them"
            )
        return versions[0]
    missing = [c for c in REQUIRED_RUNS_COLUMNS if c not in runs]
    if missing:
        raise CompareError(
            f"{name}: an incompatible table schema: no column(s) {', '.join(missing)} (not a dlscale runs"
            " table of a version this comparison reads)"
        )
    for column in ("throughput", "nodes", "ranks_per_node", "batch_per_rank"):
        if not pd.api.types.is_numeric_dtype(runs[column]) and runs[column].notna().any():
            raise CompareError(f"{name}: an incompatible table schema: column {column} is not numeric")
    current = ("dataset", "network", "exposed_comm_share", "efficiency")
    return 2 if all(c in runs for c in current) else 1


# --- a study ---------------------------------------------------------------------------------


@dataclass
class Study:
    """One study as the comparison reads it."""

    label: str
    source: str
    runs: pd.DataFrame
    findings: pd.DataFrame
    claims: pd.DataFrame
    #: What the study ran with (``study_facts``): key -> value.
    facts: dict[str, str] = field(default_factory=dict)
    verified: str = NOT_VERIFIED
    schema: int = 2


def results_folder(target: Path) -> tuple[Path, bool]:
    """``(results folder, is an archive or an unpacked one)`` for a comparison argument;
    ``CompareError`` when there is no study there or its runs table is missing."""
    if target.is_file():
        return target, True
    if not target.is_dir():
        raise CompareError(f"{target}: no such file or folder")
    if (target / verify.MANIFEST).is_file():
        return target / "results", True
    if (target.parent / verify.MANIFEST).is_file() and target.name == "results":
        return target, True
    for results in (target, target / "results"):
        if os.path.lexists(results / "runs.csv"):  # a FIFO or a link there is refused by opened
            return results, False
    for results in (target, target / "results"):
        if (results / "runs").is_dir() or (results / "cells.csv").is_file():
            raise CompareError(
                f"{results}: a results folder without its runs table (runs.csv): aggregate it first"
                f" (python -m dlscale.analysis {results / 'runs'} --out {results})"
            )
    raise CompareError(f"{target}: not a study (no runs.csv, results/runs.csv or {verify.MANIFEST})")


@contextlib.contextmanager
def opened(target: str | Path) -> Iterator[tuple[Path, Path, str]]:
    """``(study root, results folder, what verify said)``; an archive or unpacked archive
    is verified first and refused (``CompareError``) unless every check passes."""
    path = Path(target)
    results, archived = results_folder(path)
    if not archived:
        # Held to verify's rules where it reads (no link, FIFO, device or socket; a linked
        # results/ is not followed); its runs table is checked row by row (read_runs).
        try:
            check_tree(results, "results/", skip=EXCLUDED_DIRS, hidden=False)
        except Refused as err:
            raise CompareError(f"{path}: refused: {err}") from None
        yield results.parent, results, NOT_VERIFIED
        return
    try:
        report = verify.verify(path)
    except Refused as err:
        raise CompareError(f"{path}: refused by verify: {err}") from None
    except verify.NotAStudy as err:
        raise CompareError(f"{path}: {err}") from None
    if not report.ok:
        first = report.lines()[0]
        raise CompareError(
            f"{path}: the archive fails verify ({len(report.problems)} difference(s) in"
            f" {', '.join(report.files()[:3])}; first: {first}): refused"
        )
    if not report.authentic_or_unproven:
        raise CompareError(f"{path}: verify: {report.origin.detail}: refused")
    with verify.opened(path) as (root, unpacked):
        if not (unpacked / "runs.csv").is_file():
            raise CompareError(f"{path}: a study without its runs table (results/runs.csv)")
        # What verify proved, in its words: integrity, and origin only with the publisher's digest.
        yield root, unpacked, f"verified: {report.words} ({report.origin.detail})"


def _read_csv(path: Path, name: str) -> pd.DataFrame:
    """A table of the study, read strictly (``base.foreign``: a regular file of at most
    ``MAX_FILE_BYTES``, UTF-8); a runs table is checked row by row first
    (``dlscale.plausible.check_runs_table``: unique run ids, integer cell keys, finite and
    physically possible measurements)."""
    try:
        text = foreign.read_text(path, MAX_FILE_BYTES, name)
        if path.name == "runs.csv":
            plausible.check_runs_table(text, name)
    except Refused as err:
        raise CompareError(f"refused: {err}") from None
    try:  # cells a writer quoted against formula injection (base.untrusted) read back whole
        return untrusted.restored(pd.read_csv(io.StringIO(text), low_memory=False))
    except (ValueError, OSError, UnicodeDecodeError) as err:  # pandas' ParserError is a ValueError
        raise CompareError(f"{name}: unreadable ({type(err).__name__}: {err})") from None


def load_study_results(target: str | Path, label: str) -> Study:
    """Read one study (``opened``): its runs, findings and claims (made from the runs
    with ``dlscale.analysis.cells``, ``findings`` and ``claims`` where the folder has none) and what it ran with."""
    with opened(target) as (root, results, verified):
        runs = _read_csv(results / "runs.csv", f"{target}: runs.csv")
        schema = table_schema(runs, f"{target}: runs.csv")
        cells = None
        tables: dict[str, pd.DataFrame] = {}
        for name in ("findings", "claims"):
            path = results / f"{name}.csv"
            if path.is_file():
                tables[name] = _read_csv(path, f"{target}: {name}.csv")
                continue
            try:  # the verdicts of a runs table without them (a legacy analysis)
                cells = cell_summary.cells(runs) if cells is None else cells
                tables[name] = findings.findings(cells) if name == "findings" else claims.claims(cells)
            except (KeyError, ValueError, TypeError) as err:
                raise CompareError(
                    f"{target}: no {name}.csv, and none can be made from its runs.csv"
                    f" ({type(err).__name__}: {err}): an incompatible table schema"
                ) from None
        facts = study_facts(root, results, runs)
    return Study(label, str(target), runs, tables["findings"], tables["claims"], facts, verified, schema)


# --- what a study ran with ---------------------------------------------------------------------

#: Facts that describe the machine: when one differs, raw throughput compares machines.
HARDWARE_FACTS: tuple[str, ...] = ("cpu_cores", "platform", "host", "hosts", "matmul_peak_flops")
#: Most characters of one fact's value (a long host list is cut, with how many more).
MAX_FACT_CHARS = 300


def _joined(values: Any) -> str:
    found = sorted({str(v) for v in values if v is not None and str(v) not in ("", "nan", "None")})
    text = ";".join(found)
    return text if len(text) <= MAX_FACT_CHARS else text[:MAX_FACT_CHARS] + f"... ({len(found)} values)"


def _flat(prefix: str, value: Any, out: dict[str, set[str]]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        text = json.dumps(value, sort_keys=True) if isinstance(value, list) else str(value)
        out.setdefault(prefix, set()).add(text)


#: run_start's spec fields that name the run rather than configure it.
_RUN_FIELDS = {"run_id", "framework", "model", "nodes", "ranks_per_node", "batch", "repeat"}
_RUN_FIELDS |= {"world_size", "global_batch", "seed", "network", "dataset", "scaling"}
#: Most events files whose run_start is read for the facts.
MAX_RUN_STARTS = 5000


def _run_starts(results: Path) -> Iterator[dict[str, Any]]:
    """Each run's run_start (the first line of its events), the tuning stage's left out."""
    runs_dir = results / "runs"
    if not runs_dir.is_dir():
        return
    for count, path in enumerate(sorted(runs_dir.rglob("events.jsonl"))):
        parts = path.relative_to(runs_dir).parts
        if count >= MAX_RUN_STARTS or "tune" in parts or any(p.startswith(".") for p in parts):
            continue
        try:
            with foreign.open_text(path, None) as handle:
                line = handle.readline(MAX_LINE_CHARS)
        except Refused as err:  # a FIFO or a link: never waited on, never followed
            raise CompareError(f"refused: {err}") from None
        except (OSError, ValueError):
            continue
        try:
            start = foreign.loads_json(line, f"file {str(path)!r} line 1")
        except Refused as err:
            if "nested deeper" in err.rule:
                raise CompareError(f"refused: {err}") from None
            continue
        if isinstance(start, dict) and start.get("event") == "run_start":
            yield start


def study_facts(root: Path, results: Path, runs: pd.DataFrame) -> dict[str, str]:
    """What the study ran with, as far as it recorded it: per framework its versions, venv
    lock hash, CPU settings and threads per rank (runs.csv, run_start), each spec key (the
    config as the runs saw it), the launcher (the profile's mode), hosts and network, and
    from an archive's manifest the host, platform, CPU count, git revision and locks. The
    CPU model is recorded nowhere (no table, event or manifest field has it), so it is not
    among the facts."""
    facts: dict[str, str] = {}
    ok = runs[runs["status"].eq("ok")] if "status" in runs else runs
    for framework, mine in ok.groupby("framework", sort=True):
        versions: dict[str, set[str]] = {}
        for text in mine.get("versions", pd.Series(dtype=object)).dropna():
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                for package, version in json.loads(text).items():
                    versions.setdefault(str(package), set()).add(str(version))
        for package, found in versions.items():
            facts[f"version {framework}: {package}"] = _joined(found)
        for column, key in (("settings", "settings"), ("threads_per_rank", "threads_per_rank")):
            if column in mine:
                facts[f"{key} {framework}"] = _joined(mine[column])
    for column in ("git_sha", "network"):
        if column in ok:
            facts[column] = _joined(ok[column])
    if "config_sha256" in ok:
        # One hash per run spec: a digest of them all says whether the specs are the same.
        specs = sorted({str(v) for v in ok["config_sha256"].dropna()})
        digest = hashlib.sha256("\n".join(specs).encode()).hexdigest()[:16]
        facts["run specs (config_sha256)"] = f"{len(specs)} distinct, digest {digest}"
    if "hosts" in ok:
        facts["hosts"] = _joined(h for text in ok["hosts"].dropna() for h in str(text).split(";"))
    spec: dict[str, dict[str, set[str]]] = {}
    launchers: set[str] = set()
    for start in _run_starts(results):
        framework = str(start.get("framework"))
        env = start.get("env") if isinstance(start.get("env"), dict) else {}
        if env.get("lock_sha256"):
            facts.setdefault(f"lock_sha256 {framework}", "")
            facts[f"lock_sha256 {framework}"] = _joined(
                [*facts[f"lock_sha256 {framework}"].split(";"), env["lock_sha256"]]
            )
        if start.get("caffe_build_key"):
            facts["caffe_build_key"] = str(start["caffe_build_key"])
        if start.get("launcher"):
            launchers.add(str(start["launcher"]))
        mine = spec.setdefault(framework, {})
        if isinstance(start.get("spec"), dict):
            _flat("", {k: v for k, v in start["spec"].items() if k not in _RUN_FIELDS}, mine)
    if launchers:
        facts["launcher (profile)"] = _joined(launchers)
    for framework, keys in spec.items():
        for key, values in keys.items():
            facts[f"config {framework}: {key}"] = _joined(values)
    manifest_path = root / verify.MANIFEST
    if manifest_path.is_file():
        with contextlib.suppress(ValueError, OSError, Refused):
            manifest = verify.load_manifest(root)
            provenance = manifest.get("provenance") or {}
            for key in ("host", "platform", "git_sha", "git_dirty", "analysis_sha256"):
                if provenance.get(key) is not None:
                    facts[key] = str(provenance[key])
            if provenance.get("cpu_count") is not None:
                facts["cpu_cores"] = str(provenance["cpu_count"])
            for env, entry in (provenance.get("environments") or {}).items():
                if isinstance(entry, dict) and entry.get("lock_sha256"):
                    facts.setdefault(f"lock_sha256 {env}", str(entry["lock_sha256"]))
    peak = results / "host" / "matmul_peak.json"  # the tuning stage's measurement (dlscale.host.roofline)
    if peak.is_file():
        with contextlib.suppress(ValueError, OSError, AttributeError, TypeError):
            record = foreign.read_json(peak, MAX_PEAK_BYTES)
            if record.get("cores") is not None:
                facts["cpu_cores"] = str(record["cores"])
            if isinstance(record.get("peak_flops"), dict):
                facts["matmul_peak_flops"] = _joined(
                    f"{t}:{float(v):.3g}" for t, v in record["peak_flops"].items()
                )
    return facts


def differences(studies: Sequence[Study]) -> pd.DataFrame:
    """One row per fact that differs between the studies: ``fact``, ``hardware`` (a fact
    of the machine) and each study's value ("" where it did not record it)."""
    keys = sorted({k for s in studies for k in s.facts})
    rows = []
    for key in keys:
        values = [s.facts.get(key, "") for s in studies]
        if len(set(values)) > 1:
            rows.append(
                {
                    "fact": key,
                    "hardware": key in HARDWARE_FACTS,
                    **dict(zip(_labels(studies), values, strict=True)),
                }
            )
    return pd.DataFrame(rows, columns=["fact", "hardware", *_labels(studies)])


def _labels(studies: Sequence[Study]) -> list[str]:
    return [s.label for s in studies]


def hardware_differs(diffs: pd.DataFrame) -> list[str]:
    """The machine's facts that differ (raw throughput then compares machines)."""
    if diffs.empty:
        return []
    return [str(f) for f in diffs[diffs["hardware"].astype(bool)]["fact"]]


def unique_labels(targets: Sequence[str | Path]) -> list[str]:
    """A short label per study: its folder's name (the study folder above ``results``),
    or its archive's, numbered where two would read the same."""
    labels = []
    for target in targets:
        path = Path(target).resolve()
        name = path.name
        for suffix in (".gz", ".tgz", ".tar"):
            name = name.removesuffix(suffix)
        if name == "results" and path.parent.name:
            name = path.parent.name
        label, n = name or "study", 2
        while label in labels:
            label, n = f"{name}#{n}", n + 1
        labels.append(label)
    return labels


def check_distinct(targets: Sequence[str | Path]) -> None:
    """``CompareError`` when two arguments are the same study by path (a study folder and
    its results folder count as one)."""
    seen: dict[Path, str] = {}
    for target in targets:
        path = Path(target)
        try:
            where = results_folder(path)[0] if path.is_dir() else path
        except CompareError:
            where = path
        resolved = where.resolve()
        if resolved in seen:
            raise CompareError(
                f"{target}: the same study as {seen[resolved]} (both are {resolved}): compare two different studies"
            )
        seen[resolved] = str(target)


def check_out(out: str | Path, targets: Sequence[str | Path]) -> None:
    """``CompareError`` when the output folder lies inside a study compared: the comparison
    would change that study (an unpacked archive then fails verify, a results folder gains
    files its analysis did not make). Beside a plain study's results folder (its study
    folder, where the config lives) is outside it: nothing there is the study's record."""
    for target in targets:
        path = Path(target)
        if not path.is_dir():
            continue
        try:
            results, _ = results_folder(path)
        except CompareError:
            continue
        root = path if (path / verify.MANIFEST).is_file() else results
        if foreign.inside(out, root):
            raise CompareError(
                f"--out {out}: inside the study {target} ({root.resolve()}): writing there would change it;"
                " give a folder outside every study compared"
            )


def one_line(err: Exception) -> str:
    """A message on one line, whatever a name in it held (control characters escaped)."""
    return untrusted.shown(err)
