"""Tables and files from elsewhere read strictly (issue 46, item 2): compare, the analysis,
the replay and verify each refuse what the strict reader (``dlscale.base.foreign``,
``dlscale.plausible``) refuses, with exit status 2 and one line naming the file, the line or
row, and the rule, never a traceback, a hang or a silent merge.

Every case runs the real entry point (``main(argv)`` of ``python -m dlscale.compare``,
``python -m dlscale.analysis``, ``python -m dlscale.perfmodel.replay`` and
``python -m dlscale.archive.verify``) under a deadline (``DEADLINE_S``, SIGALRM: a FIFO that
blocks an ``open()`` is interrupted, and the case is "hung", not a stuck suite), and checks
that its ``--out`` folder was not made. Each class is one row of the fault table
(``make test-faults``; docs/verify.md lists them). The inputs are small hand-made studies
(a few runs of a few iterations): the whole file takes a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.events import every_rank, iteration, put, run_end, run_start, steady_run
from helpers.faults import judge
from helpers.verify_study import make_archive
from helpers.verify_study import make_study as make_verify_study

from dlscale.analysis import aggregate
from dlscale.archive import verify
from dlscale.compare import comparison
from dlscale.perfmodel import replay

pytestmark = pytest.mark.faults

#: Seconds a case may take before it counts as hung (each takes well under one).
DEADLINE_S = 20
#: What a host file read by mistake would show (the first line of /etc/passwd).
HOST_FILE = Path("/etc/passwd")
NESTED = "[" * 200_000 + "]" * 200_000


class Hung(BaseException):
    """A case past its deadline (a BaseException: no ``except OSError`` or ``except
    Exception`` of the code under test can take it for an error of its own)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise ``Hung`` in this (the main) thread after ``seconds``: a blocking open of a
    FIFO is interrupted, so a regression fails as 'hung' instead of stopping the suite."""

    def expired(signum: int, frame: Any) -> None:
        raise Hung(f"no answer in {seconds} s: hung")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused(
    main: Callable[[Sequence[str]], int], argv: Sequence[str | Path], *expected: str, out: Path | None = None
) -> str | None:
    """None when ``main(argv)`` ends in time with exit 2 and one line on stderr holding every
    ``expected`` text, no traceback, no host file's content and no ``out`` folder made;
    else what went wrong."""
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with deadline(DEADLINE_S), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main([str(a) for a in argv])
    except Hung as err:
        return str(err)
    except SystemExit as err:  # argparse
        code = err.code if isinstance(err.code, int) else 1
    text = stderr.getvalue().strip()
    if code != 2:
        return f"exit {code}, not 2: {text[-300:]!r} {stdout.getvalue()[-300:]!r}"
    if "\n" in text or "Traceback" in text:
        return f"not one line: {text[-500:]!r}"
    missing = [want for want in expected if want not in text]
    if missing:
        return f"{missing} not in {text!r}"
    if "root:x:" in text + stdout.getvalue():
        return "a host file's content shows"
    if out is not None and out.exists():
        return f"{out} was made"
    return None


def make_study(root: Path) -> Path:
    """A study folder: torch LeNet at 1 and 2 nodes, three repeats each, aggregated."""
    results = root / "results"
    for nodes in (1, 2):
        for repeat in range(3):
            steady_run(results / "runs", 400.0 * nodes + repeat, nodes=nodes, repeat=repeat, batch=64)
    with contextlib.chdir(results):
        aggregate.write_outputs(
            aggregate.aggregate(aggregate.find_events("runs")), dict(aggregate.OUTPUT_FILES)
        )
    return root


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_study(tmp_path_factory.mktemp("base") / "base")


def copied(base: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(base, target)
    return target


def fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def linked(path: Path, to: Path) -> Path:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.symlink_to(to)
    return path


# --- compare ---------------------------------------------------------------------------------


def edited_runs(study: Path, change: Callable[[list[str], list[str]], list[str]]) -> Path:
    """``study``'s runs.csv rewritten: ``change(header, lines)`` returns the new lines."""
    path = study / "results" / "runs.csv"
    header, *lines = path.read_text().splitlines()
    path.write_text("\n".join([header, *change(header.split(","), lines)]) + "\n")
    return study


def set_cell(
    column: str, value: str, framework_nodes: str = ""
) -> Callable[[list[str], list[str]], list[str]]:
    """Set ``column`` to ``value`` in every row (whose run id contains ``framework_nodes``)."""

    def change(header: list[str], lines: list[str]) -> list[str]:
        at = header.index(column)
        out = []
        for line in lines:
            cells = line.split(",")  # the test study's cells hold no commas before ``column``
            if framework_nodes in cells[0]:
                cells[at] = value
            out.append(",".join(cells))
        return out

    return change


def test_compare_refuses_a_runs_table_it_cannot_trust(base: Path, tmp_path: Path) -> None:
    """Findings 2, 3, 9 and 10 of issue 46 on a plain results folder: rows twice (6 v 6
    'repeats' made 4 regressions, p 0.0046), node counts that are no whole numbers, a
    negative or infinite throughput, an impossible step, compute longer than its step, a
    throughput past the roofline, a status written 'OK'."""

    def case(name: str, change: Callable[[list[str], list[str]], list[str]], *expected: str):
        def run() -> str | None:
            new = edited_runs(copied(base, tmp_path, name), change)
            out = tmp_path / f"out-{name}"
            return refused(comparison.main, [base, new, "--out", out], "runs.csv line", *expected, out=out)

        return run

    judge(
        "compare: a runs table with impossible rows (issue 46: 2, 3, 9, 10)",
        "compare",
        {
            "every row twice": case(
                "twice", lambda h, lines: lines + lines, "is also on line", "rows given twice"
            ),
            "nodes 1.5": case("half", set_cell("nodes", "1.5", "n2x1"), "nodes '1.5' is not a whole number"),
            "nodes 1e308": case(
                "huge", set_cell("nodes", "1e308", "n2x1"), "nodes '1e308' is not a whole number"
            ),
            "nodes -2": case("negative", set_cell("nodes", "-2", "n2x1"), "nodes '-2'"),
            "a negative throughput": case(
                "minus",
                set_cell("throughput", "-800.0", "n2x1"),
                "throughput '-800.0' is not a finite number",
            ),
            "an infinite throughput": case(
                "inf", set_cell("throughput", "inf", "n2x1"), "throughput 'inf' is not a finite number"
            ),
            "step_s 1e-300": case(
                "step", set_cell("step_s", "1e-300", "n2x1"), "step_s 1e-300 is below 1e-06"
            ),
            "compute_s five times step_s": case(
                "compute", set_cell("compute_s", "0.8", "n2x1"), "compute_s 0.8 is longer than 2 x the step"
            ),
            "a throughput past the roofline": case(
                "roofline", set_cell("throughput", "1e30", "n2x1"), "over the 1e+16"
            ),
            "status 'OK' (capitalised)": case(
                "status", set_cell("status", "OK", "n2x1"), "status 'OK' is not one of ok, failed"
            ),
        },
    )


def unpacked(study: Path, into: Path) -> Path:
    """``study`` packed as `make artifact` packs it, then unpacked into ``into``: its top folder."""
    with tarfile.open(make_archive(study)) as tar:
        tar.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def test_compare_refuses_files_that_are_not_files(base: Path, verify_study: Path, tmp_path: Path) -> None:
    """Finding 4 (a FIFO hung compare; a linked events file was read), 6 (200,000 nested
    '[' in a run_start) and 10 (--out inside BASE; a study whose results/ is a link; "no
    cell in common" saying that the runs' statuses are why)."""

    def case(name: str, harm: Callable[[Path], Any], *expected: str, where: Path | None = None):
        def run() -> str | None:
            new = copied(base, tmp_path, name)
            harm(new)
            out = tmp_path / f"out-{name}"
            return refused(comparison.main, [base, new, "--out", out], *expected, out=out)

        return run

    events = Path("results/runs/torch/lenet/n2x1/b64/r0/events.jsonl")

    def nested(study: Path) -> None:
        path = study / events
        path.write_text(f'{{"event": "run_start", "x": {NESTED}}}\n' + path.read_text().split("\n", 1)[1])

    def results_linked(study: Path) -> None:
        elsewhere = tmp_path / f"{study.name}-elsewhere"
        shutil.move(study / "results", elsewhere)
        (study / "results").symlink_to(elsewhere, target_is_directory=True)

    def out_inside_base() -> str | None:
        out = base / "results" / "comparison"
        new = copied(base, tmp_path, "other")
        return refused(comparison.main, [base, new, "--out", out], "--out", "inside the study", out=out)

    def out_inside_unpacked_base() -> str | None:
        archived = unpacked(copied(verify_study, tmp_path, "to-pack"), tmp_path / "unpacked-base")
        out = archived / "comparison"
        return refused(comparison.main, [archived, base, "--out", out], "--out", "inside the study", out=out)

    judge(
        "compare: files that are not files, nesting, --out inside a study (issue 46: 4, 6, 10)",
        "compare",
        {
            "events.jsonl a FIFO": case("fifo", lambda s: fifo(s / events), "a FIFO", "events.jsonl"),
            "runs.csv a FIFO": case(
                "fifo-runs", lambda s: fifo(s / "results" / "runs.csv"), "runs.csv", "a FIFO"
            ),
            "events.jsonl linked to /etc/passwd": case(
                "link", lambda s: linked(s / events, HOST_FILE), "a symbolic link", "/etc/passwd"
            ),
            "results/ a link": case("linked-results", results_linked, "a symbolic link", "results"),
            "200,000 nested '[' in run_start": case(
                "nested", nested, "nested deeper than 64", "events.jsonl"
            ),
            "--out inside BASE": out_inside_base,
            "--out inside an unpacked archive's BASE": out_inside_unpacked_base,
            "every run failed: 'no cell in common' says why": case(
                "failed",
                lambda s: edited_runs(s, set_cell("status", "failed")),
                "no cell in common",
                "has no ok, uncontended run",
                "6 'failed'",
            ),
        },
    )


# --- python -m dlscale.analysis ---------------------------------------------------------------


def test_the_analysis_refuses_hostile_events_in_one_line(tmp_path: Path) -> None:
    """Finding 4 (a FIFO hung it; a link was followed), 6 (a traceback for every EventError,
    for a folder named events.jsonl, for 200,000 nested '['), 9 (step 1e-300, compute five
    times the step) and 10 (--target twice for one model)."""

    def case(name: str, harm: Callable[[Path], Any], *expected: str, extra: Sequence[str] = ()):
        def run() -> str | None:
            runs = tmp_path / name / "runs"
            path = put(runs, [run_start(), *every_rank(1), run_end()])
            harm(path)
            out = tmp_path / f"out-{name}"
            return refused(aggregate.main, [runs, "--out", out, *extra], *expected, out=out)

        return run

    def lines(*events: dict[str, Any]) -> Callable[[Path], Any]:
        return lambda path: put(path.parents[5], [run_start(), *events, run_end()])

    def folder(path: Path) -> None:
        path.unlink()
        path.mkdir()

    def nested(path: Path) -> None:
        text = path.read_text().splitlines()
        text.insert(1, NESTED)
        path.write_text("\n".join(text) + "\n")

    judge(
        "analysis: hostile events files (issue 46: 4, 6, 9, 10)",
        "analysis",
        {
            "events.jsonl a FIFO": case("fifo", fifo, "events.jsonl", "a FIFO"),
            "events.jsonl linked to /etc/passwd": case(
                "link", lambda p: linked(p, HOST_FILE), "events.jsonl", "a symbolic link"
            ),
            "a folder named events.jsonl": case("folder", folder, "events.jsonl", "a folder where a file"),
            "200,000 nested '['": case("nested", nested, "events.jsonl:2:", "nested deeper than 64"),
            "an EventError (a wrong type)": case(
                "types", lambda p: put(p.parents[5], [{**run_start(), "nodes": "two"}, run_end()]), "events.jsonl:1:", "nodes"
            ),
            "step_s 1e-300": case(
                "step", lines(iteration(0, 0, 1e-300), iteration(0, 1, 1e-300)), "events.jsonl:2:", "below 1e-06"
            ),
            "compute_s five times step_s": case(
                "compute",
                lines(*(iteration(0, i, 0.1, compute=0.5, comm=0.0) for i in range(3))),
                "events.jsonl:2:",
                "more than 2 x the step_s",
            ),
            "--target twice for one model": case(
                "target",
                lambda p: None,
                "--target",
                "has a target already",
                extra=["--target", "lenet=top1:0.9", "--target", "lenet=top1:0.5"],
            ),
            "--peak a FIFO": case(
                "peak", lambda p: fifo(p.parents[6] / "peak.json"), "peak.json", "a FIFO",
                extra=["--peak", str(tmp_path / "peak" / "peak.json")],
            ),
        },
    )  # fmt: skip


# --- python -m dlscale.perfmodel.replay ---------------------------------------------------------


def ring_system(**changes: Any) -> dict[str, Any]:
    system = {
        "name": "hostile-ring", "source": "this test", "framework": "torch", "parameters": 10_000_000,
        "network": {"latency_s": 20e-6, "bandwidth_gbit": 25.0}, "batch_per_node": 256,
        "measured": {1: 500.0, 2: 950.0, 4: 1800.0},
    }  # fmt: skip
    return {**system, **changes}


def test_replay_refuses_hostile_system_files(tmp_path: Path) -> None:
    """Finding 4 (a FIFO hung it; a link was followed), 6 (nested YAML, 10**400 parameters,
    a non-UTF-8 error naming no file) and 9 (measured 1e308, bandwidth 1e-300, 10**9
    parameter servers at 2 nodes)."""

    def case(name: str, write: Callable[[Path], Any], *expected: str, calibration: bool = False):
        def run() -> str | None:
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump(ring_system()))
            write(path)
            out = tmp_path / f"out-{name}"
            extra = ["--calibration", str(tmp_path / f"{name}-calibration.csv")] if calibration else []
            return refused(replay.main, [path, "--out", out, *extra], *expected, out=out)

        return run

    def text(body: str) -> Callable[[Path], Any]:
        return lambda path: path.write_text(body)

    def system(**changes: Any) -> Callable[[Path], Any]:
        return lambda path: path.write_text(yaml.safe_dump(ring_system(**changes)))

    def not_utf8(path: Path) -> None:
        path.write_bytes(path.read_bytes().replace(b"this test", b"this t\xffst"))

    ps = {"framework": "tensorflow", "strategy": "ps"}
    judge(
        "replay: hostile system files (issue 46: 4, 6, 9)",
        "perfmodel",
        {
            "a FIFO": case("fifo", fifo, "fifo.yaml", "a FIFO"),
            "a link to /etc/passwd": case("link", lambda p: linked(p, HOST_FILE), "link.yaml", "a symbolic link"),
            "200 KB of nested YAML": case("nested", text("name: " + "[" * 100_000 + "]" * 100_000 + "\n"),
                                          "nested.yaml", "nested deeper than 64"),
            "parameters: 10**400": case("digits", text(yaml.safe_dump(ring_system()).replace(
                "parameters: 10000000", f"parameters: {10**400}")), "digits.yaml", "'parameters'", "401 digits"),
            "text that is not UTF-8": case("utf8", not_utf8, "utf8.yaml", "not UTF-8"),
            "measured 1e308": case("measured", system(measured={1: 500.0, 2: 1e308}), "'measured.2'",
                                   "shorter than 1e-06"),
            "bandwidth 1e-300": case("bandwidth", system(network={"latency_s": 20e-6, "bandwidth_gbit": 1e-300}),
                                     "'network.bandwidth_gbit'", "outside"),
            "num_ps 10**9 at 2 nodes": case("servers", system(**ps, num_ps=10**9, measured={1: 500.0, 2: 950.0}),
                                            "'num_ps'", "1,000,000,000 parameter servers"),
            "calibration.csv a FIFO": case("calibrated", lambda p: fifo(tmp_path / "calibrated-calibration.csv"),
                                           "calibrated-calibration.csv", "a FIFO", calibration=True),
        },
    )  # fmt: skip


# --- python -m dlscale.archive.verify -----------------------------------------------------------


@pytest.fixture(scope="module")
def verify_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_verify_study(tmp_path_factory.mktemp("verify"))


def test_verify_refuses_what_it_used_to_follow_or_crash_on(verify_study: Path, tmp_path: Path) -> None:
    """Finding 6 (200,000 nested '[' in an events line: a RecursionError, exit 1) and 10 (a
    study folder whose results/ is a link was followed; an unlisted empty folder passed)."""

    def nested() -> str | None:
        study = copied(verify_study, tmp_path, "nested")
        events = sorted((study / "results" / "runs").rglob("events.jsonl"))[0]
        body = events.read_text().splitlines()
        events.write_text("\n".join([body[0], NESTED, *body[1:]]) + "\n")
        return refused(verify.main, [study / "results"], "events.jsonl", "line 2", "nested deeper than 64")

    def results_linked() -> str | None:
        study = copied(verify_study, tmp_path, "linked")
        shutil.move(study / "results", tmp_path / "linked-elsewhere")
        (study / "results").symlink_to(tmp_path / "linked-elsewhere", target_is_directory=True)
        return refused(verify.main, [study], "results", "a symbolic link")

    def empty_folder() -> str | None:
        top = unpacked(copied(verify_study, tmp_path, "packed"), tmp_path / "unpacked")
        (top / "results" / "unlisted").mkdir()
        return refused(verify.main, [top], "results/unlisted", "an empty folder")

    judge(
        "verify: nesting, a linked results/, an unlisted empty folder (issue 46: 6, 10)",
        "archive",
        {
            "200,000 nested '[' in an events line": nested,
            "a study folder whose results/ is a link": results_linked,
            "an unlisted empty folder in an unpacked archive": empty_folder,
        },
    )
