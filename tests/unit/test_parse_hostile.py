"""The native-log parsers against hostile and broken logs (issue 17, "no silent wrong numbers").

Each case seen with ``python -m dlscale.parse`` is a test here: the log of a failed run
(reported as ``run_end`` failed, after the iterations before the failure), empty and
binary files, non-finite losses (kept, not turned into "no loss"), time and iterations
going backwards, a last line cut in the middle of a number, memory that grew with the log,
and regular expressions that took seconds on one long line. Then properties (hypothesis):
any bytes give events or a ParseError, generated logs round-trip, and what is impossible
is always rejected. Nothing here asserts a timing: linear time is asserted by structure
(no regex that can backtrack quadratically) and by 5 MB lines that must finish under a
subprocess timeout that a quadratic parser would need hours to meet.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import math
import os
import re
import select
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from re import _constants as sre
from re import _parser as sre_parse
from typing import Any

import pytest
from helpers.hostile_logs import (
    BIGDL_DATA,
    BIGDL_METRICS,
    BIGDL_START,
    CAFFE_DATA,
    CAFFE_START,
    CHECK_FAILED,
    CRASH,
    SOLVER,
    SPARK,
    SPARK_LINES,
    bigdl_iteration,
    caffe_display,
    glog,
    java_double,
    line_number,
    solver_until,
    write,
)
from helpers.paths import REPO
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dlscale.parse
from dlscale.events import validate_event
from dlscale.parse import ParseError, bigdl, caffe, portable, restore

PARSERS = {"bigdl": bigdl, "caffe": caffe}
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def cli(fmt: str, path: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlscale.parse", fmt, str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=timeout,
    )


def printed(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines()]


def same_number(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


# The log builders and the real logs they cut up: helpers.hostile_logs.


# ---------------------------------------------------------------- a failed BigDL run


def test_bigdl_job_aborted_is_a_failed_run_end_after_the_iterations(tmp_path):
    aborted = (
        "26/11/29 19:48:01 ERROR DistriOptimizer$: Error: org.apache.spark.SparkException: Job aborted due to"
        " stage failure: Task serialization failed: java.io.NotSerializableException: Foo\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2898)\n"
    )
    proc = cli("bigdl", write(tmp_path, SPARK + aborted))
    assert proc.returncode == 0, proc.stderr
    events = printed(proc)
    assert [e["event"] for e in events] == ["iteration"] * 4 + ["run_end"]
    end = validate_event(events[-1])
    assert end["status"] == "failed" and end["line"] == SPARK_LINES + 1
    assert end["reason"].startswith("Job aborted due to stage failure: Task serialization failed")
    assert end["time"] == bigdl.parse_timestamp("26/11/29 19:48:01")


def test_bigdl_executor_class_cast_exception_is_the_reason(tmp_path):
    lost = (
        "26/11/29 19:48:01 WARN TaskSetManager: Lost task 0.0 in stage 9.0 (TID 9) (10.0.0.2 executor 1):"
        " java.lang.ClassCastException: class [F cannot be cast to class [D\n"
        "\tat com.intel.analytics.bigdl.dllib.optim.DistriOptimizer$.$anonfun$optimize$5(DistriOptimizer.scala:262)\n"
        "26/11/29 19:48:01 ERROR TaskSetManager: Task 0 in stage 9.0 failed 1 times; aborting job\n"
    )
    events = printed(cli("bigdl", write(tmp_path, SPARK + lost)))
    assert [e["event"] for e in events] == ["iteration"] * 4 + ["run_end"]
    assert events[-1]["reason"] == "java.lang.ClassCastException: class [F cannot be cast to class [D"
    assert events[-1]["line"] == SPARK_LINES + 3  # where Spark gave the job up


@pytest.mark.parametrize(
    "name, reason, line",
    [
        ("failed-oom.log", "java.lang.OutOfMemoryError: Java heap space", 11),
        ("failed-executor-python.log", "dlscale.data.shards.DatasetError: results/data/mnist/shards/", 54),
    ],
)
def test_bigdl_real_failed_logs_through_the_cli(name, reason, line):
    proc = cli("bigdl", BIGDL_DATA / name)
    assert proc.returncode == 0, proc.stderr
    (end,) = printed(proc)
    assert end["event"] == "run_end" and end["status"] == "failed" and end["line"] == line
    assert end["reason"].startswith(reason) and len(end["reason"]) <= 300


def test_bigdl_a_retried_task_is_not_a_failed_run(tmp_path):
    """Spark retries a lost task: without an abort the run goes on, and so do its events."""
    lost = (
        "26/11/29 19:47:38 WARN TaskSetManager: Lost task 0.0 in stage 9.0 (TID 9) (10.0.0.2 executor 1):"
        " java.io.IOException: Connection reset by peer\n"
    )
    text = SPARK + lost
    assert [e["event"] for e in bigdl.parse_text(text)] == ["iteration"] * 4
    assert bigdl.failure_reason(text) == "java.io.IOException: Connection reset by peer"


def test_bigdl_failed_log_cut_by_the_crash_is_still_a_failed_run(tmp_path):
    text = (BIGDL_DATA / "failed-oom.log").read_text()
    proc = cli("bigdl", write(tmp_path, text[: len(text) - 40]))  # the dying JVM's last line is torn
    assert proc.returncode == 0, proc.stderr
    assert [e["event"] for e in printed(proc)] == ["run_end"]


# ---------------------------------------------------------------- a failed Caffe run


def test_caffe_check_failed_is_a_failed_run_end_after_the_displays(tmp_path):
    lines = solver_until(10) + [CHECK_FAILED] + CRASH
    proc = cli("caffe", write(tmp_path, "".join(lines)))
    assert proc.returncode == 0, proc.stderr
    events = printed(proc)
    assert [(e["event"], e.get("iteration")) for e in events] == [
        ("display", 0),
        ("iteration", 5),
        ("iteration", 10),
        ("run_end", None),
    ]
    end = validate_event(events[-1])
    assert end["status"] == "failed" and end["reason"] == "Check failed: data_"
    assert end["line"] == len(solver_until(10)) + 1
    assert end["time"] == pytest.approx(9.6 - 8.937196)  # since the log's first glog line


def test_caffe_abort_without_a_check_is_a_failed_run(tmp_path):
    """A crash glog reports by its signal handler only (a segfault): ``*** Aborted at``."""
    lines = solver_until(5) + CRASH[2:]
    events = printed(cli("caffe", write(tmp_path, "".join(lines))))
    assert [e["event"] for e in events] == ["display", "iteration", "run_end"]
    assert events[-1]["reason"].startswith("*** Aborted at 1795982889 (unix time)")
    assert events[-1]["time"] is None  # not a glog line: no stamp of its own


def test_caffe_failure_before_any_iteration_names_the_failure(tmp_path):
    """Not "no Caffe solver lines found": the log says why there are none."""
    header = SOLVER[: line_number(SOLVER, "Iteration 0, loss") - 1]
    proc = cli("caffe", write(tmp_path, "".join(header + [CHECK_FAILED] + CRASH)))
    assert proc.returncode == 0, proc.stderr
    (end,) = printed(proc)
    assert end["event"] == "run_end" and end["reason"] == "Check failed: data_"


def test_caffe_time_crashed_mid_benchmark_keeps_whole_layers_only(tmp_path):
    timing = (CAFFE_DATA / "lenet_time.log").read_text().splitlines(keepends=True)
    cut = timing[: line_number(timing, "conv2\tforward")]
    fatal = "F20261129 20:08:10.483500 10447 net.cpp:99] Check failed: top_vecs_[i][j]->count()\n"
    events = printed(cli("caffe", write(tmp_path, "".join(cut + [fatal] + CRASH))))
    kinds = [e["event"] for e in events]
    assert kinds == ["benchmark_iteration"] * 3 + ["layer_time"] * 3 + ["run_end"]  # no half benchmark
    assert [e["layer"] for e in events if e["event"] == "layer_time"] == ["data", "conv1", "pool1"]


def test_caffe_last_line_torn_by_the_crash_is_no_error(tmp_path):
    text = "".join(solver_until(10) + [CHECK_FAILED]) + "*** Aborted at 17959"
    proc = cli("caffe", write(tmp_path, text))
    assert proc.returncode == 0, proc.stderr
    assert printed(proc)[-1]["reason"] == "Check failed: data_"


# ---------------------------------------------------------------- empty and binary logs


@pytest.mark.parametrize("fmt", PARSERS)
@pytest.mark.parametrize(
    "content, line, message",
    [
        (b"", 0, "empty log"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00>\x00", 1, "not a text log"),
        (b"first line\nsecond line\n\x00\x01\x02binary tail\n", 3, "not a text log"),
        (b"first line\n\xff\xfe not UTF-8\n", 2, "not a text log"),
        (bytes(range(256)) * 20, 1, "not a text log"),
    ],
)
def test_empty_and_binary_logs_exit_2(tmp_path, fmt, content, line, message):
    path = write(tmp_path, content)
    proc = cli(fmt, path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"{path}:{line}: {message}"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_bigdl_log_with_neither_iteration_nor_failure_exits_2(tmp_path):
    chatter = SPARK[: SPARK.index("[Iteration 1]")].rsplit("\n", 1)[0] + "\n"
    path = write(tmp_path, chatter)
    proc = cli("bigdl", path)
    assert proc.returncode == 2 and "no BigDL iteration line and no failure" in proc.stderr


# ---------------------------------------------------------------- non-finite losses


def test_bigdl_non_finite_losses_are_kept(tmp_path):
    text = "".join(
        bigdl_iteration(i, loss, BIGDL_START + dt.timedelta(seconds=i))
        for i, loss in enumerate(["2.30", "NaN", "Infinity", "-Infinity"], start=1)
    )
    events = bigdl.parse_text(text)
    assert [e["loss"] for e in events][0] == pytest.approx(2.30)
    assert math.isnan(events[1]["loss"]) and events[2]["loss"] == math.inf and events[3]["loss"] == -math.inf
    lines = printed(cli("bigdl", write(tmp_path, text)))
    assert [e["loss"] for e in lines] == [2.3, "nan", "inf", "-inf"]  # not null: null is "no loss"
    assert repr([restore(e) for e in lines]) == repr(events)  # restore() reads them back (repr: NaN == NaN)


def test_caffe_non_finite_losses_are_kept(tmp_path):
    losses = ["2.3", "nan", "inf", "-inf", "-nan"]
    text = "".join(
        caffe_display(5 * i, loss, CAFFE_START + dt.timedelta(seconds=i)) for i, loss in enumerate(losses)
    )
    events = caffe.parse_text(text)
    assert [e["iteration"] for e in events] == [0, 5, 10, 15, 20]
    assert math.isnan(events[1]["loss"]) and events[2]["loss"] == math.inf and events[3]["loss"] == -math.inf
    lines = printed(cli("caffe", write(tmp_path, text)))
    assert [e["loss"] for e in lines] == [2.3, "nan", "inf", "-inf", "nan"]
    assert lines[1]["outputs"] == {"loss": "nan"}  # nested numbers too


def test_portable_and_restore_are_inverse():
    event = {"loss": math.nan, "x": [math.inf, 1.0], "outputs": {"a": -math.inf, "b": 2.0}, "s": "text"}
    back = restore(json.loads(json.dumps(portable(event))))
    assert math.isnan(back["loss"]) and back["x"] == [math.inf, 1.0]
    assert back["outputs"] == {"a": -math.inf, "b": 2.0} and back["s"] == "text"


# ---------------------------------------------------------------- time and iterations backwards


def _solver_with(tmp_path: Path, needle: str, replace: Callable[[str], str]) -> tuple[Path, int]:
    lines = list(SOLVER)
    number = line_number(lines, needle)
    lines[number - 1] = replace(lines[number - 1])
    return write(tmp_path, "".join(lines)), number


@pytest.mark.parametrize(
    "stamp",
    [
        "20261020 20:08:09.535177",  # five weeks back: was a step of 6,324,480 s
        "20261129 20:08:09.079139",  # 0.2 s before the display above it: was a step of -0.2 s
    ],
)
def test_caffe_time_going_backwards_exits_2(tmp_path, stamp):
    path, number = _solver_with(
        tmp_path, "Iteration 10, loss", lambda line: "I" + stamp + line[len("I20261129 20:08:09.535177") :]
    )
    proc = cli("caffe", path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"{path}:{number}: time goes backwards"), (
        proc.stderr
    )


def test_caffe_year_less_log_may_cross_one_new_year():
    before, after = dt.datetime(2000, 12, 31, 23, 59, 59, 900000), dt.datetime(2000, 1, 1, 0, 0, 0, 100000)
    text = (
        caffe_display(0, "2.3", before).replace("I2000", "I")
        + caffe_display(5, "2.1", after).replace("I2000", "I")
        + caffe_display(10, "2.0", after).replace("I2000", "I")
    )
    display, first, second = caffe.parse_text(text)
    assert first["step_s"] == pytest.approx(0.2 / 5) and first["time"] == pytest.approx(0.2)
    assert second["step_s"] == 0.0
    november, october = dt.datetime(2000, 11, 29, 20, 8, 9), dt.datetime(2000, 10, 20, 20, 8, 9)
    with pytest.raises(ParseError, match="time goes backwards"):  # any other step back is not
        caffe.parse_text(
            caffe_display(0, "2.3", november).replace("I2000", "I")
            + caffe_display(5, "2.1", october).replace("I2000", "I")
        )


def test_caffe_year_stamps_cross_new_year_by_date():
    text = caffe_display(0, "2.3", dt.datetime(2026, 12, 31, 23, 59, 59, 900000)) + caffe_display(
        5, "2.1", dt.datetime(2027, 1, 1, 0, 0, 0, 100000)
    )
    assert caffe.parse_text(text)[1]["step_s"] == pytest.approx(0.04)


@pytest.mark.parametrize("to", ["3", "5"])
def test_caffe_iterations_going_backwards_exit_2(tmp_path, to):
    path, number = _solver_with(tmp_path, "Iteration 10, loss", lambda line: line.replace("10", to))
    proc = cli("caffe", path)
    assert proc.returncode == 2 and proc.stderr.startswith(
        f"{path}:{number}: iteration {to} follows iteration 5"
    )


def test_bigdl_time_going_backwards_exits_2(tmp_path):
    text = bigdl_iteration(1, moment=BIGDL_START) + bigdl_iteration(
        2, moment=BIGDL_START - dt.timedelta(seconds=1)
    )
    proc = cli("bigdl", write(tmp_path, text))
    assert proc.returncode == 2 and ":2: time goes backwards: iteration 2" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- a last line cut mid-number


def test_caffe_last_line_cut_mid_number_exits_2(tmp_path):
    lines = SOLVER[: line_number(SOLVER, "Iteration 25, loss")]
    cut = "".join(lines)[: -len("2439\n")]  # "loss = 0.762439" cut to "loss = 0.76"
    path = write(tmp_path, cut)
    proc = cli("caffe", path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"{path}:{len(lines)}: last line cut off before its newline"), proc.stderr
    whole = write(tmp_path, "".join(lines)[:-1], "whole.log")  # all digits there, but who can tell?
    assert cli("caffe", whole).returncode == 2


def test_caffe_unread_last_line_without_newline_is_fine(tmp_path):
    text = "".join(SOLVER) + "I20261129 20:08:10.500000 10425 net.cpp:100] Setting up lo"
    proc = cli("caffe", write(tmp_path, text))
    assert proc.returncode == 0, proc.stderr
    assert printed(proc)[-1]["iteration"] == 25


def test_bigdl_last_line_cut_mid_number(tmp_path):
    text = bigdl_iteration(1) + bigdl_iteration(2, loss="2.5")
    cut = text[: text.rindex("Loss is 2.") + len("Loss is 2.")]  # reads as "Loss is 2." = 2.0
    with pytest.raises(ParseError, match="last line cut off before its newline") as err:
        bigdl.parse_text(cut)
    assert err.value.line == 2
    (only,) = bigdl.parse_text(cut, strict=False)  # a killed run's log: the torn line is dropped
    assert only["iteration"] == 0


# ---------------------------------------------------------------- streaming


def _open_writer(fifo: Path, proc: subprocess.Popen[bytes], deadline: float) -> int:
    """Open the FIFO's writing end once the parser has opened its reading end."""
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as err:
            if err.errno != errno.ENXIO or proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return fd


def test_cli_prints_each_event_before_the_log_ends(tmp_path):
    """A log read from a FIFO: the first display is printed while the rest is unwritten."""
    fifo = tmp_path / "live.log"
    os.mkfifo(fifo)
    head = line_number(SOLVER, "Iteration 5, loss")  # display 0 is complete once display 5 starts
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlscale.parse", "caffe", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 60
        with os.fdopen(_open_writer(fifo, proc, deadline), "w") as writer:
            writer.write("".join(SOLVER[:head]))
            writer.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, "no event printed while the log was still open"
            assert proc.stdout is not None
            first = json.loads(proc.stdout.readline())
            assert (first["event"], first["iteration"]) == ("display", 0)
            writer.write("".join(SOLVER[head:]))
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert [json.loads(line)["iteration"] for line in rest.splitlines()] == [5, 10, 15, 20, 25]


def synthetic_bigdl(path: Path, size: int) -> int:
    """A driver log of ``size`` bytes or a little more: iterations with Metrics blocks."""
    count = 0
    with open(path, "w") as handle:
        while handle.tell() < size:
            count += 1
            moment = BIGDL_START + dt.timedelta(milliseconds=50 * count)
            handle.write(bigdl_iteration(count, f"2.{count % 1000:03d}", moment) + BIGDL_METRICS)
    return count


def synthetic_caffe(path: Path, size: int) -> int:
    """A solver log of ``size`` bytes or a little more: displays with outputs and lr."""
    count = 0
    with open(path, "w") as handle:
        while handle.tell() < size:
            moment = CAFFE_START + dt.timedelta(milliseconds=50 * count)
            handle.write(caffe_display(count, f"2.{count % 1000:03d}", moment))
            count += 1
    return count


@pytest.mark.parametrize("fmt, synthetic", [("bigdl", synthetic_bigdl), ("caffe", synthetic_caffe)])
def test_memory_stays_flat_in_the_log_size(tmp_path, fmt, synthetic):
    """A 20 MB log is parsed holding a small fraction of it: one block and one event at a time."""
    path = tmp_path / "big.log"
    count = synthetic(path, 20 * 2**20)
    tracemalloc.start()
    try:
        parsed = sum(
            1 for event in PARSERS[fmt].iter_events(path) if event["event"] in ("iteration", "display")
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed == count
    assert peak < path.stat().st_size / 10, f"peak {peak} bytes for a {path.stat().st_size}-byte log"


# ---------------------------------------------------------------- linear time: regex structure

UNBOUNDED = (sre.MAX_REPEAT, sre.MIN_REPEAT)  # possessive repeats never backtrack
SAMPLE = [chr(code) for code in range(128)] + ["é", "\u00a0", "\u0663", "\u2028"]
CATEGORIES = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}


def _in_set(members: list[tuple[Any, Any]], char: str) -> bool:
    hit, negate = False, False
    for op, av in members:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            hit |= char == chr(av)
        elif op is sre.RANGE:
            hit |= av[0] <= ord(char) <= av[1]
        elif op is sre.CATEGORY:
            hit |= re.fullmatch(CATEGORIES[av], char) is not None
    return hit != negate


def _chars(body: Any) -> frozenset[str] | None:
    """The (sample) characters a one-character body matches; None for longer bodies."""
    if len(body) != 1:
        return None
    op, av = body[0]
    if op is sre.LITERAL:
        return frozenset(chr(av))
    if op is sre.NOT_LITERAL:
        return frozenset(c for c in SAMPLE if c != chr(av))
    if op is sre.ANY:
        return frozenset(c for c in SAMPLE if c != "\n")
    if op is sre.IN:
        return frozenset(c for c in SAMPLE if _in_set(av, c))
    return None


def _children(op: Any, av: Any) -> list[Any]:
    if op in UNBOUNDED or op is sre.POSSESSIVE_REPEAT:
        return [av[2]]
    if op is sre.SUBPATTERN:
        return [av[3]]
    if op is sre.BRANCH:
        return list(av[1])
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return [av[1]]
    if op is sre.ATOMIC_GROUP:
        return [av]
    return []


def _unbounded(op: Any, av: Any) -> bool:
    return op in UNBOUNDED and av[1] == sre.MAXREPEAT


def _has_unbounded(seq: Any) -> bool:
    return any(_unbounded(op, av) or any(_has_unbounded(c) for c in _children(op, av)) for op, av in seq)


def _may_be_empty(op: Any, av: Any) -> bool:
    if op in UNBOUNDED or op is sre.POSSESSIVE_REPEAT:
        return av[0] == 0 or all(_may_be_empty(o, a) for o, a in av[2])
    if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
        return True
    return (
        any(all(_may_be_empty(o, a) for o, a in child) for child in _children(op, av))
        if _children(op, av)
        else False
    )


def _leading(seq: Any) -> Iterator[frozenset[str]]:
    """The character sets of the unbounded one-character repeats that can match first in
    ``seq`` (reached through anything that may match nothing)."""
    for op, av in seq:
        if _unbounded(op, av) and (chars := _chars(av[2])) is not None:
            yield chars
        else:
            for child in _children(op, av):
                yield from _leading(child)
        if not _may_be_empty(op, av):
            return


def backtracking_hazards(seq: Any) -> list[str]:
    """What in a parsed pattern can backtrack more than linearly on one long line: an
    unbounded repeat inside an unbounded repeat (``(a+)+``), or two unbounded repeats
    that can match the same characters one after the other (``\\d+\\.?\\d*``, ``[\\w ]*?\\s*``).
    Conservative and simple: it does not look across the end of a group."""
    found = []
    items = list(seq)
    for index, (op, av) in enumerate(items):
        if _unbounded(op, av) and _has_unbounded(av[2]):
            found.append(f"nested unbounded repeats at item {index}")
        if _unbounded(op, av) and (chars := _chars(av[2])) is not None:
            if any(chars & after for after in _leading(items[index + 1 :])):
                found.append(f"overlapping unbounded repeats at item {index}")
        for child in _children(op, av):
            found.extend(backtracking_hazards(child))
    return found


def module_patterns() -> Iterator[tuple[str, re.Pattern[Any]]]:
    for module in (dlscale.parse, bigdl, caffe):
        for name, value in vars(module).items():
            values = value if isinstance(value, tuple) else (value,)
            for item in values:
                for part in item if isinstance(item, tuple) else (item,):
                    if isinstance(part, re.Pattern):
                        yield f"{module.__name__}.{name}", part


@pytest.mark.parametrize(
    "pattern", [r"\d+\.?\d*s", r"(?:[a-z]+\.)+X", r"[\w ]*?\s*:", r"a\s*(?:x)?\s+b", r"(x+y)*"]
)
def test_the_hazard_check_finds_known_quadratic_patterns(pattern):
    assert backtracking_hazards(sre_parse.parse(pattern)), pattern


def test_no_parser_regex_can_backtrack_quadratically():
    patterns = dict(module_patterns())
    assert len(patterns) >= 20  # every module-level pattern, including those in tuples
    hazards = {
        name: found
        for name, pattern in patterns.items()
        if (found := backtracking_hazards(sre_parse.parse(pattern.pattern)))
    }
    assert hazards == {}


HOSTILE = 5_000_000  # characters in one line: minutes to hours for a quadratic regex


def hostile_logs(fmt: str) -> dict[str, str]:
    """Logs of one 5 MB line each, aimed at what each parser reads with a regex."""
    n = HOSTILE
    if fmt == "bigdl":
        anchor = "2026-11-29 19:39:04.722 INFO DistriOptimizer$: "
        return {
            "metrics-blanks": "=== Metrics Summary ===\na" + " " * n + "x\n====\n",  # was 26 s at 80 KB
            "metrics-digits": "=== Metrics Summary ===\ncomputing time average : " + "1" * n + "x s\n====\n",
            "iteration-digits": anchor + "[Epoch 1 1/1][Iteration 1][Wall Clock " + "1" * n + "\n",
            "iteration-repeats": anchor + "Trained [Iteration " + "[Epoch 1 " * (n // 9) + "\n",
            "prefix-dates": "2026-11-29 " * (n // 11) + "DistriOptimizer$: caching training rdd\n",
            "lost-tasks": "Lost task " * (n // 10) + "\n",
            "error-brackets": "ERROR [" * (n // 7) + "\n" + "xERROR " * (n // 7) + "\n",
            "dotted-names": "a." * (n // 2) + "B Error\n" + "a.B" * (n // 3) + "Exception\n",
            "python-traceback": "Lost task 0.0 (x executor 1): PythonException: Traceback\n"
            + "a." * (n // 2)
            + "\n",
        }
    header = "I20261129 20:08:09.005635 10425 solver.cpp:231] "
    return {
        "rate-digits": header + "Iteration 1 (" + "1" * n + "\n",
        "loss-digits": header + "Iteration 1, loss = " + "1" * n + "x\n",
        "clock-digits": "I20261129 20:08:09." + "1" * n + "\n",
        "top-shape": header + "Top shape: " + "1 " * (n // 2) + "x\n",
        "layer-blanks": header + "a" + "\t" * n + "forward: x ms.\n",
        "train-output": header + "Train net output #0: loss = " + "1" * n + "x\n",
        "check-failed": header.replace("I", "F", 1) + "Check failed: " + "x" * n + "\n",
    }


HOSTILE_RUNNER = """
import sys
from dlscale.parse import ParseError
from dlscale.parse import {fmt} as parser
for path in sys.argv[1:]:
    try:
        print(path, "events", len(parser.parse(path)), flush=True)
    except ParseError as err:
        print(path, "error", str(err)[:200], flush=True)
"""


@pytest.mark.parametrize("fmt", PARSERS)
def test_5mb_lines_parse_in_linear_time(tmp_path, fmt):
    logs = hostile_logs(fmt)
    paths = [write(tmp_path, text, f"{name}.log") for name, text in logs.items()]
    proc = subprocess.run(
        [sys.executable, "-c", HOSTILE_RUNNER.format(fmt=fmt), *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.splitlines()) == len(paths), proc.stdout
    outcome = {Path(line.split()[0]).stem: line.split(maxsplit=1)[1] for line in proc.stdout.splitlines()}
    if fmt == "caffe":
        assert outcome["check-failed"] == "events 1"  # a run_end whose reason is cut to 300 characters


# ---------------------------------------------------------------- properties

BIGDL_LINES = [
    line
    for name in ("full-pattern.log", "failed-oom.log", "failed-executor-python.log")
    for line in (BIGDL_DATA / name).read_text().splitlines()
]
CAFFE_LINES = [
    line
    for name in ("lenet_solver.log", "lenet_time.log")
    for line in (CAFFE_DATA / name).read_text().splitlines()
] + [CHECK_FAILED.rstrip("\n"), CRASH[2].rstrip("\n")]
REAL_LINES = {"bigdl": BIGDL_LINES, "caffe": CAFFE_LINES}


def _outcome(run: Callable[[], list[dict[str, Any]]]) -> tuple[str, Any]:
    try:
        return "events", run()
    except ParseError as err:
        return "error", (err.line, err.message)


def _check_events(events: list[dict[str, Any]]) -> None:
    for event in events:
        if event["event"] in ("iteration", "run_end"):
            validate_event(event)
    assert all(event["event"] != "run_end" for event in events[:-1])


@FUZZ
@given(fmt=st.sampled_from(sorted(PARSERS)), data=st.data())
def test_any_bytes_are_events_or_a_parse_error(tmp_path, fmt, data):
    pieces = data.draw(
        st.lists(
            st.one_of(
                st.sampled_from(REAL_LINES[fmt]).map(str.encode),
                st.binary(max_size=30),
                st.text(max_size=30).map(str.encode),
            ),
            max_size=30,
        )
    )
    path = write(tmp_path, b"\n".join(pieces) + data.draw(st.sampled_from([b"", b"\n"])))
    kind, result = _outcome(lambda: PARSERS[fmt].parse(path))
    if kind == "events":
        _check_events(result)


@FUZZ
@given(fmt=st.sampled_from(sorted(PARSERS)), data=st.data())
def test_text_and_file_give_the_same_answer(tmp_path, fmt, data):
    lines = data.draw(
        st.lists(st.one_of(st.sampled_from(REAL_LINES[fmt]), st.text(max_size=40)), max_size=25)
    )
    text = "\n".join(lines) + data.draw(st.sampled_from(["", "\n", "\r\n"]))
    path = write(tmp_path, text.encode())
    from_file = _outcome(lambda: PARSERS[fmt].parse(path))
    from_text = _outcome(lambda: PARSERS[fmt].parse_text(text, str(path)))
    assert repr(from_file) == repr(from_text)  # repr: NaN == NaN


losses = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def bigdl_logs(draw: Any) -> tuple[str, list[int], list[float], list[float]]:
    """A valid driver log: increasing iterations, non-decreasing times, any losses."""
    count = draw(st.integers(1, 8))
    gaps = draw(st.lists(st.integers(1, 3), min_size=count, max_size=count))
    steps = draw(st.lists(st.integers(0, 5000), min_size=count, max_size=count))
    values = draw(st.lists(losses, min_size=count, max_size=count))
    metrics = draw(st.booleans())
    numbers = [sum(gaps[: i + 1]) for i in range(count)]
    moments = [BIGDL_START + dt.timedelta(milliseconds=sum(steps[: i + 1])) for i in range(count)]
    text = "".join(
        bigdl_iteration(n, java_double(v), m) + (BIGDL_METRICS if metrics else "")
        for n, v, m in zip(numbers, values, moments, strict=True)
    )
    return text, numbers, values, [m.timestamp() for m in moments]


@FUZZ
@given(log=bigdl_logs())
def test_bigdl_generated_logs_round_trip(log):
    text, numbers, values, times = log
    events = bigdl.parse_text(text)
    assert [e["iteration"] for e in events] == [n - 1 for n in numbers]
    assert all(same_number(e["loss"], v) for e, v in zip(events, values, strict=True))
    assert [e["time"] for e in events] == pytest.approx(times)


def caffe_number(value: float) -> str:
    """A loss as glog prints it (ostream, 6 significant digits)."""
    return f"{value:g}"


@st.composite
def caffe_logs(draw: Any) -> tuple[str, list[int], list[float], list[dt.datetime]]:
    """A valid solver log: increasing display iterations, non-decreasing stamps, any losses."""
    count = draw(st.integers(1, 8))
    gaps = draw(st.lists(st.integers(1, 50), min_size=count, max_size=count))
    steps = draw(st.lists(st.integers(0, 10**7), min_size=count, max_size=count))
    values = draw(st.lists(losses, min_size=count, max_size=count))
    numbers = [sum(gaps[:i]) for i in range(count)]
    moments = [CAFFE_START + dt.timedelta(microseconds=sum(steps[: i + 1])) for i in range(count)]
    text = "".join(
        caffe_display(n, caffe_number(v), m) for n, v, m in zip(numbers, values, moments, strict=True)
    )
    return text, numbers, values, moments


@FUZZ
@given(log=caffe_logs())
def test_caffe_generated_logs_round_trip(log):
    text, numbers, values, moments = log
    events = caffe.parse_text(text)
    assert [e["iteration"] for e in events] == numbers
    assert [e["event"] for e in events] == ["display"] + ["iteration"] * (len(numbers) - 1)
    assert all(same_number(e["loss"], float(caffe_number(v))) for e, v in zip(events, values, strict=True))
    seconds = [(m - moments[0]).total_seconds() for m in moments]
    assert [e["time"] for e in events] == pytest.approx(seconds)
    for before, after, event in zip(events, events[1:], seconds[1:], strict=False):
        assert after["step_s"] == pytest.approx(
            (event - before["time"]) / (after["iteration"] - before["iteration"])
        )


@FUZZ
@given(log=caffe_logs(), data=st.data())
def test_caffe_time_going_backwards_is_always_rejected(log, data):
    text, numbers, _, moments = log
    assume(len(numbers) >= 2)
    k = data.draw(st.integers(1, len(numbers) - 1))
    back = data.draw(st.integers(1, 10**8))
    lines = text.splitlines(keepends=True)
    earlier = moments[k - 1] - dt.timedelta(microseconds=back)
    lines[3 * k] = glog(earlier, lines[3 * k].split("] ", 1)[1].rstrip("\n"))
    with pytest.raises(ParseError, match="time goes backwards") as err:
        caffe.parse_text("".join(lines))
    assert err.value.line == 3 * k + 1


@FUZZ
@given(log=bigdl_logs(), data=st.data())
def test_bigdl_time_going_backwards_is_always_rejected(log, data):
    text, numbers, _, times = log
    assume(len(numbers) >= 2)
    k = data.draw(st.integers(1, len(numbers) - 1))
    earlier = dt.datetime.fromtimestamp(times[k - 1]) - dt.timedelta(
        milliseconds=data.draw(st.integers(1, 10**7))
    )
    lines = [line for line in text.splitlines(keepends=True) if "Trained" in line]
    lines[k] = bigdl_iteration(numbers[k], "1.0", earlier)
    with pytest.raises(ParseError, match="time goes backwards") as err:
        bigdl.parse_text("".join(lines))
    assert err.value.line == k + 1


@FUZZ
@given(fmt=st.sampled_from(sorted(PARSERS)), data=st.data())
def test_iterations_going_backwards_are_always_rejected(fmt, data):
    count = data.draw(st.integers(2, 6))
    numbers = sorted(data.draw(st.lists(st.integers(1, 1000), min_size=count, max_size=count, unique=True)))
    k = data.draw(st.integers(1, count - 1))
    numbers[k] = data.draw(st.integers(1, numbers[k - 1]))  # back, or the same again
    moments = [BIGDL_START + dt.timedelta(seconds=i) for i in range(count)]
    if fmt == "bigdl":
        text = "".join(bigdl_iteration(n, "1.0", m) for n, m in zip(numbers, moments, strict=True))
    else:
        text = "".join(caffe_display(n, "1.0", m) for n, m in zip(numbers, moments, strict=True))
    with pytest.raises(ParseError, match=r"iteration \d+ follows iteration \d+"):
        PARSERS[fmt].parse_text(text)


@FUZZ
@given(fmt=st.sampled_from(sorted(PARSERS)), data=st.data())
def test_a_torn_last_line_never_gives_a_number(fmt, data):
    """Cut anywhere in the last line: a ParseError, or the events of the log without it."""
    log = data.draw(bigdl_logs() if fmt == "bigdl" else caffe_logs())
    text = log[0]
    lines = text.splitlines(keepends=True)
    last = data.draw(st.sampled_from([i for i, line in enumerate(lines) if "Iteration" in line]))
    lines = lines[: last + 1]
    cut = data.draw(st.integers(0, len(lines[-1]) - 1))
    torn = "".join(lines[:-1]) + lines[-1][:cut]
    parser = PARSERS[fmt]
    kind, events = _outcome(lambda: parser.parse_text(torn))
    if kind == "events":
        assert repr(events) == repr(_outcome(lambda: parser.parse_text("".join(lines[:-1])))[1])
