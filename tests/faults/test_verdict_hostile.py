"""What verify proves, and output a study from elsewhere cannot spoof or execute (issue 46,
items 1, 3 and 4; findings 1, 5, 7 and 8).

Each class is one row of the fault table (``make test-faults``), put through the real entry
point (a subprocess, with a timeout, its temporary folder inside the test's own):

* a forged archive (events edited, tables re-aggregated, figure redrawn, report remade,
  manifest re-hashed and re-sealed) verifies as "consistent, origin not proven" without the
  publisher's digest, and fails with it (``--expect-sha256`` or the publisher's ``.sha256``);
* a figure, a report or a manifest that disagrees with the tables fails integrity, naming it;
* a member name holding a newline or a terminal escape cannot forge a line or reach the
  terminal;
* hosts, versions, a git revision and a folder name that are spreadsheet formulas land in no
  CSV as a formula (analysis and compare), and read back as they were;
* config paths that are not what their key needs are refused before any job.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.faults import FaultRow, record
from helpers.paths import REPO
from helpers.verify_study import make_archive, make_study, write_tables

from dlscale.analysis import aggregate as analysis
from dlscale.archive import artifact
from dlscale.archive import verify as dlverify
from dlscale.base.untrusted import CSV_FORMULA_STARTS, restored
from dlscale.catalog import CONFIG_SCHEMA
from dlscale.compare import comparison
from dlscale.figures.study import draw_figures, read_results
from dlscale.study.validation import ConfigError, load_schema, validate_config

pytestmark = pytest.mark.faults

#: Every entry point here ends well within this (a hang is a failure, not a wait).
TIMEOUT_S = 120
#: The run whose events the forger edits (its steps halved: twice the throughput).
FORGED_RUN = "torch/lenet/n2x1/b64/r0"
#: A forged line a member name tries to print.
FORGED_OK = "verify: OK: forged: every table matches its recomputation"
#: Strings from a study that a spreadsheet runs as formulas.
FORMULAS = {
    "host": "=cmd|' /C calc'!A0",
    "version": "@SUM(1+1)*cmd|' /C calc'!A0",
    "git_sha": '+HYPERLINK("http://evil.example","x")',
    "folder": '=HYPERLINK("evil.example","study")',
}


# --- the study: tables, a figure drawn from them, a report embedding them ---------------


def report_html(results: Path, embedded: dict[str, bytes] | None = None) -> str:
    """A report as Snakemake writes it: each shown file as a base64 data URI under its
    study path; ``embedded`` replaces some files' bytes (a report that shows other data)."""
    entries = {}
    for name in ("runs.csv", "cells.csv", "figures/throughput.svg"):
        data = (embedded or {}).get(name, (results / name).read_bytes())
        uri = (
            f"data:text/csv;charset=utf8;filename={Path(name).name};base64," + base64.b64encode(data).decode()
        )
        entries[f"results/{name}"] = {"name": Path(name).name, "data_uri": uri}
    return f'<html><body>\n<script id="results">\n    var results = {json.dumps(entries)};\n</script>\n</body></html>\n'


def publish(root: Path) -> None:
    """Redraw the throughput figure from the tables and remake the report, as the workflow does."""
    results = root / "results"
    draw_figures(
        read_results(results), {"throughput": {"html": str(results / "figures" / "throughput.html")}}
    )
    (results / "report.html").write_text(report_html(results))


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An honest study (helpers.verify_study) with its throughput figure and a report."""
    root = make_study(tmp_path_factory.mktemp("honest"))
    publish(root)
    return root


@pytest.fixture(scope="module")
def published(honest: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The honest study's archive, as its publisher made it, and the publisher's digest."""
    where = tmp_path_factory.mktemp("publisher")
    return archive_of(Path(shutil.copytree(honest, where / "study")), where)


@pytest.fixture
def study(honest: Path, tmp_path: Path) -> Path:
    shutil.copytree(honest, tmp_path / "study")
    return tmp_path / "study"


def archive_of(root: Path, where: Path) -> tuple[Path, str]:
    """``root`` archived (make_artifact, which writes its .sha256 beside it), moved to
    ``where/artifact.tar.gz`` without the .sha256; and the digest ``make artifact`` gave."""
    made = make_archive(root)
    digest = made.with_name(made.name + ".sha256").read_text().split()[0]
    made.with_name(made.name + ".sha256").unlink()
    where.mkdir(parents=True, exist_ok=True)
    return Path(shutil.move(made, where / made.name)), digest


def verify(tmp_path: Path, target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """verify's entry point as the dlscale command calls it (in this process: a new one
    would import pandas and Vega again for each case), within ``TIMEOUT_S``."""
    out, err = io.StringIO(), io.StringIO()
    with within(TIMEOUT_S), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = dlverify.main([str(target), *args])
    return subprocess.CompletedProcess(["verify", str(target), *args], code, out.getvalue(), err.getvalue())


def row(fault: str, outcome: str, seconds: float, detail: str, code: int | None) -> None:
    record(FaultRow(fault, "verify", outcome, round(seconds, 2), detail[-600:], exit_code=code))


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail (TimeoutError) where the block takes longer: an in-process check never hangs."""

    def expire(*_: object) -> None:
        raise TimeoutError(f"took over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --- forged archive ---------------------------------------------------------------------


def forge(root: Path) -> None:
    """What a forger does: the run's steps halved in its events, the tables made again by
    the analysis code, the figure redrawn and the report remade from them."""
    events = root / "results" / "runs" / FORGED_RUN / "events.jsonl"
    lines = []
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "iteration":
            for key in ("step_s", "compute_s", "comm_s"):
                event[key] = event[key] / 2
        lines.append(json.dumps(event))
    events.write_text("\n".join(lines) + "\n")
    runs = sorted(
        p.parent.relative_to(root / "results" / "runs").as_posix()
        for p in root.glob("results/runs/**/events.jsonl")
    )
    with contextlib.chdir(root):
        write_tables([f"results/runs/{run}/events.jsonl" for run in runs])
    publish(root)


def test_a_forged_archive_is_consistent_but_its_origin_not_proven_and_the_digest_fails_it(
    honest: Path, published: tuple[Path, str], tmp_path: Path
) -> None:
    _, digest = published
    forged_root = Path(shutil.copytree(honest, tmp_path / "forger"))
    forge(forged_root)
    forged, _ = archive_of(forged_root, tmp_path / "received")
    started = time.perf_counter()
    plain = verify(tmp_path, forged)
    with_digest = verify(tmp_path, forged, "--expect-sha256", digest)
    seconds = time.perf_counter() - started
    lines = {"plain": plain.stdout.strip().splitlines(), "digest": with_digest.stdout.strip().splitlines()}
    wrong = []
    if plain.returncode != 0 or not lines["plain"][-1].endswith(": consistent, origin not proven"):
        wrong.append(f"without a digest: exit {plain.returncode}, {plain.stdout[-400:]!r}")
    if not any(line.startswith("verify: integrity: OK: ") for line in lines["plain"]) or not any(
        line.startswith("verify: authenticity: NOT PROVEN: no digest from the publisher")
        for line in lines["plain"]
    ):
        wrong.append(f"without a digest, not both results: {lines['plain']}")
    if (
        with_digest.returncode != 1
        or not lines["digest"][-1].startswith("verify: FAILED: ")
        or not any(
            line.startswith("verify: authenticity: FAILED: the archive's sha256 is")
            for line in lines["digest"]
        )
    ):
        wrong.append(
            f"with the publisher's digest: exit {with_digest.returncode}, {with_digest.stdout[-400:]!r}"
        )
    outcome = "wrong result" if wrong else "rejected cleanly"
    detail = json.dumps(wrong) if wrong else f"{lines['plain'][-1]} | {lines['digest'][-1]}"
    row("forged archive (re-aggregated, re-hashed): digest", outcome, seconds, detail, with_digest.returncode)
    assert not wrong, wrong


# --- what a reader sees against the tables ---------------------------------------------


def halve_figure_runs(figure: Path) -> int:
    """The figure's embedded data edited: every run's throughput halved; how many rows."""
    text = figure.read_text()
    start = text.index("const spec = ") + len("const spec = ")
    spec, end = json.JSONDecoder().raw_decode(text, start)
    edited = 0
    for rows in spec["datasets"].values():
        for data in rows:
            if data.get("kind") == "run" and isinstance(data.get("value"), float):
                data["value"] /= 2
                edited += 1
    figure.write_text(text[:start] + json.dumps(spec) + text[end:])
    return edited


def integrity_failure(tmp_path: Path, target: Path, name: str, what: str) -> str | None:
    """None when verify fails integrity (exit 1) naming ``name`` with ``what``."""
    proc = verify(tmp_path, target)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 1 or "Traceback" in proc.stdout + proc.stderr:
        return f"exit {proc.returncode}: {proc.stdout[-300:]!r} {proc.stderr[-300:]!r}"
    if not any(line.startswith(f"{name}: ") and what in line for line in lines):
        return f"no line {name}: ...{what}...: {lines[-6:]}"
    if not lines[-3].startswith("verify: integrity: FAILED: ") or name not in lines[-3]:
        return f"the integrity line does not name {name}: {lines[-3]!r}"
    return None


def test_a_figure_or_report_that_disagrees_with_the_tables_fails_integrity_naming_it(
    study: Path, tmp_path: Path
) -> None:
    started = time.perf_counter()
    assert halve_figure_runs(study / "results" / "figures" / "throughput.html") == 4
    runs = (study / "results" / "runs.csv").read_bytes()
    (study / "results" / "report.html").write_text(
        report_html(study / "results", {"runs.csv": runs.replace(b",ok,", b",failed,", 1)})
    )
    archive, _ = archive_of(study, tmp_path / "made")  # the manifest re-hashed: checksums pass
    proc = verify(tmp_path, archive)
    lines = proc.stdout.strip().splitlines()
    expected = {
        "results/figures/throughput.html": "the figure disagrees with its tables: throughput: panel",
        "results/report.html": "its embedded 'results/runs.csv' differs from the study's",
    }
    wrong = [f"exit {proc.returncode}"] if proc.returncode != 1 else []
    for name, what in expected.items():
        if not any(line.startswith(f"{name}: ") and what in line for line in lines):
            wrong.append(f"no line {name}: ...{what}...")
        if not lines[-3].startswith("verify: integrity: FAILED: ") or name not in lines[-3]:
            wrong.append(f"the integrity line does not name {name}: {lines[-3]!r}")
    row(
        "figure / report disagreeing with the tables",
        "wrong result" if wrong else "rejected cleanly",
        time.perf_counter() - started,
        json.dumps(wrong) if wrong else lines[-3],
        proc.returncode,
    )
    assert not wrong, (wrong, lines[-8:])


@contextlib.contextmanager
def loopback_http(folder: Path) -> Iterator[tuple[int, Path]]:
    """``python -m http.server`` on a free loopback port serving the empty ``folder`` (every
    request a 404), in its own process (vl-convert holds the GIL while it fetches: a server
    thread here would never answer); ``(port, its request log)``; ended by PID on the way out."""
    folder.mkdir()
    log = folder.parent / "http.log"
    with open(log, "w") as sink:
        server = subprocess.Popen(
            [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(folder)],
            stdout=subprocess.PIPE, stderr=sink, text=True, start_new_session=True,
        )  # fmt: skip
    try:
        first = server.stdout.readline() if server.stdout else ""
        port = int(first.split(" port ")[1].split()[0])
        yield port, log
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if server.stdout:
            server.stdout.close()


def test_a_figure_vega_would_run_unsafely_is_not_run(study: Path, tmp_path: Path) -> None:
    """A figure from elsewhere is a program Vega runs: data from a URL would be fetched (a
    beacon, or a request inside the receiver's network), a generator of 3,000,000 rows ran
    V8 out of memory (verify died with a C stack trace). Both named, neither run."""
    figure = study / "results" / "figures" / "throughput.html"
    text = figure.read_text()
    start = text.index("const spec = ") + len("const spec = ")
    spec, end = json.JSONDecoder().raw_decode(text, start)
    started = time.perf_counter()
    results: dict[str, tuple[subprocess.CompletedProcess[str], str]] = {}
    with loopback_http(tmp_path / "served") as (port, log):
        cases = {
            "url": {"url": f"http://127.0.0.1:{port}/beacon.csv"},
            "sequence": {"sequence": {"start": 0, "stop": 3_000_000, "as": "value"}},
        }
        for name, data in cases.items():
            figure.write_text(text[:start] + json.dumps({**spec, "data": data}) + text[end:])
            proc = verify(tmp_path, study / "results")
            line = next(
                (x for x in proc.stdout.splitlines() if x.startswith("results/figures/throughput.html: ")), ""
            )
            results[name] = (proc, line)
    fetched = "beacon.csv" in log.read_text()
    wrong = {
        name: f"exit {proc.returncode}: {proc.stdout[-400:]!r}"
        for name, (proc, line) in results.items()
        if proc.returncode != 1 or "not read back: its data" not in line
    }
    if fetched:
        wrong["url"] = "fetched"
    row(
        "figure Vega would run unsafely (URL, generator)",
        "wrong result" if wrong else "rejected cleanly",
        time.perf_counter() - started,
        json.dumps(wrong) if wrong else " | ".join(line for _, line in results.values()),
        1,
    )
    assert not wrong, wrong


def test_the_manifests_provenance_is_covered_by_its_seal(published: tuple[Path, str], tmp_path: Path) -> None:
    started = time.perf_counter()
    with tarfile.open(published[0]) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    manifest_path = tmp_path / "unpacked" / "artifact" / artifact.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["provenance"]["host"] = "a-bigger-machine"
    manifest["provenance"]["platform"] = "Linux-9.9-x86_64"
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    proc = verify(tmp_path, manifest_path.parent)
    line = next((line for line in proc.stdout.splitlines() if line.startswith(f"{artifact.MANIFEST}: ")), "")
    ok = proc.returncode == 1 and "its content differs from its seal" in line
    row(
        "manifest host/platform edited, not resealed",
        "rejected cleanly" if ok else "wrong result",
        time.perf_counter() - started,
        line if ok else proc.stdout[-600:],
        proc.returncode,
    )
    assert ok, proc.stdout[-1500:]


# --- spoofed lines ------------------------------------------------------------------------


def test_a_member_name_cannot_forge_a_line_or_reach_the_terminal(
    published: tuple[Path, str], tmp_path: Path
) -> None:
    archive = published[0]
    hostile = tmp_path / "hostile" / "artifact.tar.gz"
    hostile.parent.mkdir()
    names = [f"artifact/results/x\n{FORGED_OK}", "artifact/results/\x1b]0;pwned\x07\x1b[2Jy"]
    with tarfile.open(archive) as src, tarfile.open(hostile, "w:gz", format=tarfile.PAX_FORMAT) as dst:
        for info in src.getmembers():
            dst.addfile(info, src.extractfile(info) if info.isfile() else None)
        for name in names:
            info = tarfile.TarInfo(name)
            info.size, info.mode = 1, 0o644
            dst.addfile(info, io.BytesIO(b"x"))
    started = time.perf_counter()
    proc = verify(tmp_path, hostile)
    out = proc.stdout + proc.stderr
    wrong = []
    if proc.returncode != 1:
        wrong.append(f"exit {proc.returncode}")
    if any(line.startswith("verify: OK") for line in out.splitlines()):
        wrong.append("a line starts with 'verify: OK'")
    if any(ord(char) < 32 and char != "\n" or char == "\x7f" for char in out):
        wrong.append("a control character reaches the terminal")
    if f"x\\n{FORGED_OK}" not in out or "\\x1b]0;pwned\\x07\\x1b[2Jy" not in out:
        wrong.append("the names are not shown escaped")
    if not proc.stdout.splitlines()[-1].startswith("verify: FAILED: "):
        wrong.append(f"last line {proc.stdout.splitlines()[-1]!r}")
    row(
        "member name spoofing a line / terminal escape",
        "wrong result" if wrong else "rejected cleanly",
        time.perf_counter() - started,
        json.dumps(wrong) if wrong else proc.stdout.splitlines()[-1],
        proc.returncode,
    )
    assert not wrong, (wrong, out[-1500:])


# --- spreadsheet formulas ----------------------------------------------------------------


def formula_cells(path: Path) -> list[str]:
    """Raw cells of a CSV that a spreadsheet would run as a formula (a number is none)."""
    found = []
    with open(path, newline="", encoding="utf-8") as handle:
        for cells in csv.reader(handle):
            for cell in cells:
                if cell.startswith(CSV_FORMULA_STARTS):
                    try:
                        float(cell)
                    except ValueError:
                        found.append(cell)
    return found


def hostile_study(study: Path, tmp_path: Path) -> Path:
    """``study`` whose runs recorded formula hosts, versions and git revision, aggregated
    by ``python -m dlscale.analysis``, in a folder whose name is a formula."""
    for events in study.glob("results/runs/**/events.jsonl"):
        lines = []
        for line in events.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "run_start":
                event["hosts"] = [FORMULAS["host"]] * len(event["hosts"])
                event["versions"] = {**event["versions"], "torch": FORMULAS["version"]}
                event["git_sha"] = FORMULAS["git_sha"]
            lines.append(json.dumps(event))
        events.write_text("\n".join(lines) + "\n")
    target = tmp_path / FORMULAS["folder"]
    study.rename(target)
    with within(TIMEOUT_S), contextlib.chdir(target):  # python -m dlscale.analysis's entry point
        assert analysis.main(["results/runs", "--out", "results"]) == 0
    return target


def test_formulas_from_a_study_land_in_no_csv_and_read_back_whole(
    study: Path, honest: Path, tmp_path: Path
) -> None:
    started = time.perf_counter()
    hostile = hostile_study(study, tmp_path)
    out = tmp_path / "compared"
    printed = io.StringIO()
    with within(TIMEOUT_S), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = comparison.main([str(honest / "results"), str(hostile / "results"), "--out", str(out)])
    wrong: dict[str, object] = {}
    if code != 0:
        wrong["compare"] = printed.getvalue()[-800:]
    written = [
        hostile / "results" / "runs.csv",
        *(out / n for n in ("differences.csv", "comparison.csv", "unmatched.csv")),
    ]
    for path in written:
        if not path.is_file():
            wrong[path.name] = "not written"
        elif formula_cells(path):
            wrong[path.name] = formula_cells(path)[:3]
    if not wrong:
        runs = restored(pd.read_csv(hostile / "results" / "runs.csv"))
        diffs = restored(pd.read_csv(out / "differences.csv", dtype=str, keep_default_na=False)).set_index(
            "fact"
        )
        if (
            set(runs["git_sha"]) != {FORMULAS["git_sha"]}
            or not runs["hosts"].str.startswith(FORMULAS["host"]).all()
        ):
            wrong["runs.csv read back"] = runs[["git_sha", "hosts"]].head(2).to_dict()
        if (
            diffs.loc["hosts", FORMULAS["folder"]] != FORMULAS["host"]
            or diffs.loc["git_sha", FORMULAS["folder"]] != FORMULAS["git_sha"]
        ):
            wrong["differences.csv read back"] = diffs.loc[["hosts", "git_sha"]].to_dict()
        if set(pd.read_csv(out / "comparison.csv")["study"].map(lambda v: v)) != {"'" + FORMULAS["folder"]}:
            wrong["comparison.csv study"] = "the folder's name not quoted"
    row(
        "formula hosts/versions/git/folder -> CSVs",
        "wrong result" if wrong else "rejected cleanly",
        time.perf_counter() - started,
        json.dumps(wrong)
        if wrong
        else "runs.csv, differences.csv, comparison.csv, unmatched.csv: quoted, restored whole",
        None,
    )
    assert not wrong, wrong


# --- config paths ------------------------------------------------------------------------


def test_config_paths_that_are_not_what_their_key_needs_are_refused_at_plan_time(
    honest: Path, tmp_path: Path
) -> None:
    schema = load_schema(CONFIG_SCHEMA)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    cases = {
        "compare_with /etc": ({"compare_with": "/etc"}, "config key 'compare_with': '/etc' is not a study"),
        "compare_with /etc/passwd": (
            {"compare_with": "/etc/passwd"},
            "config key 'compare_with': '/etc/passwd' is a file but not a study's archive",
        ),
        "compare_with own results": ({"compare_with": "results"}, "is this study's own results"),
        "compare_with itself": ({"compare_with": "."}, "is this study's own results"),
        "envs_dir /etc": ({"envs_dir": "/etc"}, "config key 'envs_dir': '/etc' is a system folder (/etc)"),
        "envs_dir under /usr": ({"envs_dir": "/usr/local/venvs"}, "is a system folder (/usr)"),
        "envs_dir open to all": ({"envs_dir": str(open_dir)}, "writable by every user (no sticky bit)"),
        "data.mnist.source /etc": (
            {"data": {"mnist": {"source": "/etc"}}},
            "config key 'data.mnist.source': '/etc' is not a MNIST dataset: no train-images-idx3-ubyte",
        ),
    }
    wrong, slowest = {}, 0.0
    for name, (config, expected) in cases.items():
        started = time.perf_counter()
        try:
            with within(30):
                validate_config(config, schema, honest)
            wrong[name] = "accepted"
        except ConfigError as err:
            if expected not in str(err) or "\n" in str(err):
                wrong[name] = str(err)
        slowest = max(slowest, time.perf_counter() - started)
    assert validate_config({"compare_with": str(honest)}, schema, tmp_path)["compare_with"] == str(honest)
    row(
        f"config paths at plan time ({len(cases)} cases)",
        "wrong result" if wrong else "rejected cleanly",
        slowest,
        json.dumps(wrong) if wrong else ", ".join(cases),
        None,
    )
    assert not wrong, wrong


def test_a_dry_run_with_compare_with_etc_fails_before_any_job(tmp_path: Path) -> None:
    (tmp_path / "study.yaml").write_text(
        yaml.safe_dump({"frameworks": ["torch"], "models": ["lenet"], "compare_with": "/etc"})
    )
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--dry-run", "--snakefile", str(REPO / "Snakefile"),
         "--directory", str(tmp_path), "--configfile", str(tmp_path / "study.yaml"), "--cores", "1"],
        capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    out = proc.stdout + proc.stderr
    ok = (
        proc.returncode != 0
        and "config key 'compare_with': '/etc' is not a study" in out
        and not (tmp_path / "results").exists()
    )
    row(
        "dry run with compare_with: /etc",
        "rejected cleanly" if ok else "wrong result",
        seconds,
        out[-300:],
        proc.returncode,
    )
    assert ok, out[-2000:]
