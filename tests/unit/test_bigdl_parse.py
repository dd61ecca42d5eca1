"""dlscale.parse.bigdl on real BigDL driver logs (tests/data/bigdl, captured from real runs).

- full-pattern.log: dlscale's own log4j2 set-up (runner's driver log: LeNet on 2 workers,
  real MNIST, DEBUG Metrics Summary blocks);
- spark-default-pattern.log: Spark's default log4j2 pattern, 2 workers, with Metrics blocks;
- python-redirected.log: BigDL's bundled set-up when the JVM is started from pyspark
  (``[thread] LEVEL Logger:line - msg``), INFO only (no Metrics blocks);
- failed-oom.log: AlexNet with 512m executors, killed by OutOfMemoryError.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlscale.events import validate_event
from dlscale.parse import ParseError
from dlscale.parse.bigdl import failure_reason, parse, parse_text, parse_timestamp

DATA = REPO / "tests" / "data" / "bigdl"


def run_cli(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlscale.parse", "bigdl", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


@pytest.mark.parametrize(
    "name, workers, metrics",
    [
        ("full-pattern.log", 2, True),
        ("spark-default-pattern.log", 2, True),
        ("python-redirected.log", 2, False),
    ],
)
def test_real_logs_in_three_prefix_styles(name, workers, metrics):
    events = parse(DATA / name)
    assert events, name
    assert [e["iteration"] for e in events] == list(range(len(events)))  # 0-based, every one
    for event in events:
        validate_event(event)
        assert event["samples"] == 64 * workers  # the GLOBAL batch: one driver reports for all
        assert event["step_s"] > 0 and event["time"] > 1.7e9  # a real timestamp from the prefix
        assert math.isfinite(event["loss"]) and 0 < event["loss"] < 5
        assert event["throughput"] == pytest.approx(event["samples"] / event["step_s"], rel=1e-3)
        if metrics:
            assert 0 < event["compute_s"] <= event["step_s"]
            assert event["comm_s"] == pytest.approx(event["step_s"] - event["compute_s"])
            assert event["get_weights_s"] >= 0 and event["aggregate_gradient_s"] >= 0
        else:
            assert event["compute_s"] is None and event["comm_s"] is None
    times = [e["time"] for e in events]
    assert times == sorted(times)


def test_metrics_block_maps_to_compute_and_comm():
    """compute_s = computing time average + compute weight average; comm_s = the rest."""
    text = (
        "2026-11-29 19:39:04.722 INFO DistriOptimizer$: [Epoch 1 64/512][Iteration 1][Wall Clock 1.0s]"
        " Trained 64.0 records in 1.0 seconds. Throughput is 64.0 records/second. Loss is 2.30."
        " Sequential's hyper parameters: Current learning rate is 0.01.\n"
        "2026-11-29 19:39:04.733 DEBUG DistriOptimizer$: \n"
        "========== Metrics Summary ==========\n"
        "get weights average : 0.03 s\n"
        "computing time average : 0.4 s\n"
        "send weights average : 2.7E-6 s\n"
        "put gradient : 0.02 s\n"
        "aggregate gradient time : 0.0 s\n"
        "aggregrateGradientParition average executor : 0.025 s\n"
        "compute weight average : 0.1 s\n"
        "get weights for each node :  \n"
        "computing time for each node :  \n"
        "=====================================\n"
    )
    (event,) = parse_text(text)
    assert event["iteration"] == 0 and event["samples"] == 64 and event["loss"] == pytest.approx(2.30)
    assert event["compute_s"] == pytest.approx(0.5)
    assert event["comm_s"] == pytest.approx(0.5)
    assert event["put_gradient_s"] == pytest.approx(0.02)
    assert event["time"] == pytest.approx(parse_timestamp("2026-11-29 19:39:04.722"))


def test_timestamps_of_each_prefix_agree():
    full = parse_timestamp("2026-11-29 19:47:22.000 ")
    assert parse_timestamp("26/11/29 19:47:22 ") == full
    assert parse_timestamp("26-11-29 19:47:22 [Thread-3] INFO  ") == full
    assert parse_timestamp("[Stage 9:>   (0 + 1) / 1]   2026-11-29 19:47:22.500 ") == full + 0.5
    assert parse_timestamp("no time here") is None


def test_nan_loss_is_read_not_rejected():
    line = (
        "26/11/29 19:47:22 INFO DistriOptimizer$: [Epoch 1 64/512][Iteration 3][Wall Clock 1.5s]"
        " Trained 64.0 records in 0.5 seconds. Throughput is 128.0 records/second. Loss is NaN. x\n"
    )
    (event,) = parse_text(line)
    assert math.isnan(event["loss"]) and event["iteration"] == 2


def test_epoch_finished_and_other_loggers_are_ignored():
    text = (
        "26/11/29 19:47:22 INFO DistriOptimizer$: [Epoch 1 512/512][Iteration 8][Wall Clock 4.19s]"
        " Epoch finished. Wall clock time is 4220.955006 ms\n"
        "26/11/29 19:47:22 INFO SomethingElse: Trained 5 records [Iteration 3] in no time\n"
        "random text, [Epoch garbage\n"
    )
    iteration = (
        "26/11/29 19:47:23 INFO DistriOptimizer$: [Epoch 1 64/512][Iteration 9][Wall Clock 4.7s]"
        " Trained 64.0 records in 0.5 seconds. Throughput is 128.0 records/second. Loss is 2.1.\n"
    )
    (event,) = parse_text(text + iteration)
    assert event["iteration"] == 8 and event["loss"] == pytest.approx(2.1)
    # Without that line nothing in the log is a result: neither an iteration nor a failure.
    with pytest.raises(ParseError, match="no BigDL iteration line and no failure"):
        parse_text(text)
    assert parse_text(text, strict=False) == []  # a killed run's log may stop before its first step


def test_the_pre_0_5_wording_of_a_step_is_read_as_the_same_step():
    """BigDL 0.1-0.4 (2017-2018, the seed study's releases) logged a step as "Train R in
    Sseconds." where later releases write "Trained R records in S seconds."; a driver log of
    that time is read, not refused as having no iteration line. A per-node metrics line with
    its numbers is read past; one with anything else is still unreadable."""
    old = (
        "2017-09-10 10:03:55 INFO  DistriOptimizer$:241 - [Epoch 1 512/60000][Iteration 1][Wall Clock 1.420345s]"
        " Train 512 in 1.420345seconds. Throughput is 360.47 records/second. Loss is 2.3025851."
        " Current learning rate is 0.01. Current dampening is 0.0.\n"
        "2017-09-10 10:03:56 INFO  DistriOptimizer$:241 - [Epoch 1 1024/60000][Iteration 2][Wall Clock 2.110223s]"
        " Train 512 in 0.689878seconds. Throughput is 742.16 records/second. Loss is 2.2871.\n"
    )
    # Its Metrics Summary (logged at INFO then) fills the per-node lines: read past, not refused.
    block = (
        "========== Metrics Summary ==========\n"
        "get weights average : 0.0148 s\n"
        "computing time average : 0.28 s\n"
        "get weights for each node : 0.0148 0.0151 \n"
        "computing time for each node : 0.2805 0.2764 \n"
        "=====================================\n"
    )
    lines = old.splitlines(keepends=True)
    first, second = parse_text(lines[0] + block + lines[1])
    assert first["get_weights_s"] == 0.0148
    assert (first["iteration"], first["samples"], first["step_s"], first["lr"]) == (0, 512, 1.420345, 0.01)
    assert (second["iteration"], second["step_s"], second["loss"]) == (1, 0.689878, pytest.approx(2.2871))
    with pytest.raises(ParseError, match="unreadable BigDL iteration line"):
        parse_text(old.replace("Train 512 in 0.689878seconds", "Train 512 in a while"))
    with pytest.raises(ParseError, match="unreadable line in a Metrics Summary block"):
        parse_text(lines[0] + block.replace("0.2805 0.2764", "0.2805 slow") + lines[1])


def test_distri_optimizer_v2_through_its_logger_is_read_as_distri_optimizer():
    """DistriOptimizerV2 (BigDL 0.10+, chosen with Engine.setOptimizerVersion) writes the
    same messages through a logger of its own, ``DistriLogger``; such a driver log was
    refused as having no iteration line."""
    text = (DATA / "full-pattern.log").read_text()
    assert "DistriLogger" not in text
    v2 = parse_text(text.replace("DistriOptimizer$", "DistriLogger"))
    assert v2 == parse_text(text) and len(v2) >= 10
    assert all(event["compute_s"] is not None for event in v2)  # its Metrics Summary blocks too


@pytest.mark.parametrize(
    "text, line, message",
    [
        (
            "ok line\n26/11/29 19:47:22 INFO DistriOptimizer$: [Epoch 1 64/512][Iteration 1]"
            "[Wall Clock 1.0s] Trained 64.0 records in 1.0 sec\n",
            2,
            "unreadable BigDL iteration line",
        ),
        (
            "ok line\n26/11/29 19:47:22 INFO DistriOptimizer$: [Epoch 1 64/512][Iteration 1]"
            "[Wall Clock 1.0s] Trained 64.0 records in 1.0 seconds. Throughput is 64.0 records/second. Loss is 2.",
            2,
            "last line cut off before its newline",  # "Loss is 2." may be what is left of 2.5
        ),
        (
            "========== Metrics Summary ==========\ncomputing time average : lots s\n",
            2,
            "unreadable line in a Metrics Summary block",
        ),
        ("x\n========== Metrics Summary ==========\nput gradient : 0.1 s\n", 2, "never closed"),
    ],
)
def test_malformed_input_names_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "driver.log"
    path.write_text(text)
    with pytest.raises(ParseError) as err:
        parse(path)
    assert err.value.line == line and message in err.value.message
    proc = run_cli(path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"{path}:{line}: "), proc.stderr
    assert "Traceback" not in proc.stderr


def test_iterations_going_backwards_are_malformed(tmp_path):
    lines = (DATA / "spark-default-pattern.log").read_text().splitlines(keepends=True)
    trained = [i for i, line in enumerate(lines) if "Trained" in line]
    doubled = lines + [lines[trained[0]]]  # the same iteration logged again: two runs in one file
    path = tmp_path / "twice.log"
    path.write_text("".join(doubled))
    proc = run_cli(path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"{path}:{len(doubled)}: iteration 1 follows")


def test_cli_prints_events_as_json_lines():
    proc = run_cli(DATA / "spark-default-pattern.log")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(parse(DATA / "spark-default-pattern.log")) and lines[0].startswith(
        '{"event":"iteration"'
    )


def test_cut_off_log_of_a_killed_run_parses_leniently():
    text = (DATA / "full-pattern.log").read_text()
    cut = text[: text.rindex("put gradient")]  # killed in the middle of the last Metrics block
    with pytest.raises(ParseError):
        parse_text(cut)
    events = parse_text(cut, strict=False)
    assert len(events) == len(parse(DATA / "full-pattern.log"))


def test_failure_reason_from_a_real_out_of_memory_log():
    text = (DATA / "failed-oom.log").read_text()
    assert failure_reason(text) == "java.lang.OutOfMemoryError: Java heap space"
    # It died before its first iteration: the events are the failure alone, at the line
    # (11, the executor's lost task) that shows that the run failed.
    (end,) = parse(DATA / "failed-oom.log")
    assert end == {
        "event": "run_end",
        "status": "failed",
        "reason": "java.lang.OutOfMemoryError: Java heap space",
        "time": parse_timestamp("2026-11-29 19:46:24.059"),
        "line": 11,
    }
    validate_event(end)


def test_failure_reason_prefers_the_first_lost_task_over_later_noise():
    text = (
        (DATA / "failed-oom.log")
        .read_text()
        .replace("java.lang.OutOfMemoryError", "java.lang.IllegalStateException")
    )
    assert failure_reason(text) == "java.lang.IllegalStateException: Java heap space"
    assert failure_reason("all good\n26/11/29 19:47:22 INFO DistriOptimizer$: Shuffle data\n") is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.text(max_size=120),
            st.sampled_from(
                [
                    "========== Metrics Summary ==========",
                    "=====================================",
                    "computing time average : 0.1 s",
                    "26/11/29 19:47:22 INFO DistriOptimizer$: [Epoch 1 64/512][Iteration 1]",
                    "2026-11-29 19:39:04.722 INFO DistriOptimizer$: [Epoch 1 64/512][Iteration 2][Wall Clock 1.0s]"
                    " Trained 64.0 records in 1.0 seconds. Throughput is 64.0 records/second. Loss is 2.3. x",
                    "DistriOptimizer$ Trained [Iteration",
                    "99-99-99 99:99:99 [t] INFO  DistriOptimizer$:1 - [Epoch 1 1/1][Iteration 1][Wall Clock 1s]"
                    " Trained 1 records in 1 seconds. Throughput is 1 records/second. Loss is 1.",
                ]
            ),
        ),
        max_size=12,
    )
)
def test_garbled_input_never_gives_a_traceback(lines):
    text = "\n".join(lines)
    for strict in (True, False):
        try:
            events = parse_text(text, "garbled.log", strict=strict)
        except ParseError as err:
            assert str(err).startswith("garbled.log:")
            continue
        for event in events:
            validate_event(event)
    failure_reason(text)


def test_binary_input_through_the_cli(tmp_path):
    path = tmp_path / "binary.log"
    path.write_bytes(bytes(range(256)) * 20 + b"\nDistriOptimizer$ Trained [Iteration \xff\xfe\n")
    proc = run_cli(path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"{path}:")
    assert "Traceback" not in proc.stderr
    missing = run_cli(tmp_path / "nope.log")
    assert missing.returncode == 2 and missing.stderr.startswith(f"{tmp_path / 'nope.log'}:0:")


def test_failure_reason_of_an_executor_python_error_is_its_last_traceback_line():
    """A real failure: the executors' Python workers could not find the shards."""
    text = (DATA / "failed-executor-python.log").read_text()
    reason = failure_reason(text)
    assert reason.startswith("dlscale.data.shards.DatasetError: ") and "index.json: missing" in reason


def test_live_parser_completes_each_iteration_when_its_metrics_block_closes():
    """The runner follows the log as BigDL writes it: an iteration is recorded as soon as
    its Metrics Summary closes, a NaN loss at once, and the result equals parsing after."""
    from dlscale.parse.bigdl import LogParser

    lines = (DATA / "full-pattern.log").read_text().splitlines()
    parser = LogParser("full-pattern.log")
    live = []
    for number, line in enumerate(lines, start=1):
        for event in parser.feed(line + "\n"):
            live.append(event)
            assert lines[number - 1].startswith("====="), "completed by the end of its metrics block"
    live += parser.close()
    assert live == parse(DATA / "full-pattern.log")
    assert live[0]["input_load_s"] == pytest.approx(12.643, abs=1e-3)  # caching training rdd

    nan = LogParser()
    line = (
        "2026-11-29 19:39:04.722 INFO DistriOptimizer$: [Epoch 1 64/512][Iteration 3][Wall Clock 1.0s]"
        " Trained 64.0 records in 1.0 seconds. Throughput is 64.0 records/second. Loss is NaN."
    )
    (event,) = nan.feed(line)
    assert event["iteration"] == 2 and math.isnan(event["loss"]) and event["compute_s"] is None
