"""``python -m dlscale.parse caffe LOG`` on real Caffe logs captured on these machines.

tests/data/caffe/ holds Caffe's own output, unedited (capture.py there made it):
- ``lenet_solver.log``: pycaffe training LeNet (batch 64) on real MNIST with ``display: 5``
  for 30 iterations: ``Iteration N, loss = L``, train-net-output and ``lr`` lines (this
  Caffe logs no iter/s; glog 0.6 stamps carry the year);
- ``lenet_time.log`` and ``alexnet_time.log``: ``caffe time -iterations 3`` on the
  generated nets (batch 64 and 4): per-layer forward/backward times and averages.
Malformed variants are derived from them in the tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO

from dlscale.parse import ParseError
from dlscale.parse import caffe as parser
from dlscale.runners.caffe.models import layer_types

DATA = REPO / "tests" / "data" / "caffe"


def cli(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlscale.parse", "caffe", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )


def test_solver_log_gives_iteration_events():
    events = parser.parse(DATA / "lenet_solver.log")
    # The first display has no step time (nothing earlier to time it by): it is a "display"
    # event, a loss reading, since an iteration event must carry its step time.
    iterations = [e for e in events if e["event"] in ("display", "iteration")]
    assert [e["event"] for e in iterations] == ["display"] + ["iteration"] * 5
    assert [e["iteration"] for e in iterations] == [0, 5, 10, 15, 20, 25]
    assert all(e["rank"] == 0 for e in iterations)
    assert all(e["samples"] == 0 for e in iterations)  # this log does not show the net's shapes
    assert all(e["compute_s"] is None and e["comm_s"] is None for e in iterations)
    assert all(e["lr"] == pytest.approx(0.01) for e in iterations)
    assert iterations[0]["loss"] == pytest.approx(3.00674)
    assert iterations[-1]["loss"] == pytest.approx(0.762439)
    assert iterations[0]["outputs"] == {"loss": pytest.approx(3.00674)}
    assert iterations[0]["step_s"] is None  # nothing before the first display to time it by
    # From the glog stamps: 08:09.005635 -> 08:09.279139 over 5 iterations.
    assert iterations[1]["step_s"] == pytest.approx((9.279139 - 9.005635) / 5)
    times = [e["time"] for e in iterations]
    assert times == sorted(times) and times[0] > 0


def test_bvlc_rate_format_gives_step_time(tmp_path):
    """BVLC master (2017+) logs ``(X iter/s, Ys/D iters)``; the build here does not, so this
    one log is written by hand in that format."""
    path = tmp_path / "rate.log"
    path.write_text(
        "I1129 19:45:12.100000  4242 net.cpp:133] Top shape: 32 1 28 28 (25088)\n"
        "I1129 19:45:13.000000  4242 solver.cpp:218] Iteration 0 (0 iter/s, 0.05s/10 iters), loss = 2.31\n"
        "I1129 19:45:14.000000  4242 solver.cpp:218] Iteration 10 (12.5 iter/s, 0.8s/10 iters), loss = 1.5\n"
        "I1129 19:45:14.000000  4242 sgd_solver.cpp:105] Iteration 10, lr = 0.001\n"
    )
    first, second = parser.parse(path)
    assert first["event"] == "display" and first["step_s"] is None and first["samples"] == 32
    assert second["step_s"] == pytest.approx(0.08) and second["iter_per_s"] == 12.5
    assert second["lr"] == 0.001 and second["time"] == pytest.approx(1.9)


@pytest.mark.parametrize("first_rate", ["0", "-1.4013e-45", "1.4013e-45", "3.35544e+07", "-2.1e+09", "nan"])
def test_the_first_displays_rate_is_not_read_a_later_impossible_one_is_refused(tmp_path, first_rate):
    """BVLC's solver prints the first display's rate from ``iterations_last_``, which it
    never initialises: real logs read "Iteration 0 (-1.4013e-45 iter/s, ...)" or "(0
    iter/s, ...)". That display times nothing (no display before it), so whatever it
    prints is no rate: the log parses, the display has no step time and no rate. A later
    display's negative rate is still impossible."""
    head = (
        "I1129 19:45:13.000000  4242 solver.cpp:218] Iteration 0 ({rate} iter/s, 0.05s/10 iters), loss = 2.31\n"
        "I1129 19:45:14.000000  4242 solver.cpp:218] Iteration 10 ({later} iter/s, 0.8s/10 iters), loss = 1.5\n"
        "I1129 19:45:14.500000  4242 solver.cpp:310] Iteration 20, loss = 1.2\n"
        "I1129 19:45:14.600000  4242 solver.cpp:315] Optimization Done.\n"
    )
    path = tmp_path / "bvlc.log"
    path.write_text(head.format(rate=first_rate, later="12.5"))
    first, second, last = parser.parse(path)
    assert first["event"] == "display" and first["step_s"] is None and first["iter_per_s"] is None
    assert second["step_s"] == pytest.approx(0.08) and second["iter_per_s"] == 12.5
    assert last["iteration"] == 20 and last["step_s"] == pytest.approx(0.05)  # from the stamps
    path.write_text(head.format(rate=first_rate, later="-1.4013e-45"))
    with pytest.raises(ParseError, match="impossible rate"):
        parser.parse(path)


def test_time_log_gives_per_layer_table():
    events = parser.parse(DATA / "lenet_time.log")
    bench = [e for e in events if e["event"] == "benchmark"]
    assert bench == [
        {
            "event": "benchmark",
            "iterations": 3,
            "forward_ms": 7.533,
            "backward_ms": 13.332,
            "forward_backward_ms": 20.6667,
            "total_ms": 62.0,
            "batch": None,  # not in the log; dlscale.runners.caffe.timing adds it
        }
    ]
    table = parser.layer_table(events)
    assert [row["layer"] for row in table] == list(layer_types("lenet"))
    conv2 = next(row for row in table if row["layer"] == "conv2")
    assert (conv2["forward_ms"], conv2["backward_ms"]) == (3.704, 10.02)
    assert sum(row["share"] for row in table) == pytest.approx(1.0)
    assert len([e for e in events if e["event"] == "benchmark_iteration"]) == 3


def test_alexnet_time_log_is_dominated_by_conv_and_fc():
    table = parser.layer_table(parser.parse(DATA / "alexnet_time.log"))
    types = layer_types("alexnet")
    heavy = sum(r["share"] for r in table if types[r["layer"]] in ("Convolution", "InnerProduct"))
    assert heavy > 0.8
    assert [row["layer"] for row in table] == list(types)


def test_cli_prints_json_lines():
    proc = cli(DATA / "lenet_solver.log")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["iteration"] for e in lines if e["event"] in ("display", "iteration")] == [0, 5, 10, 15, 20, 25]


def _corrupt(tmp_path: Path, source: str, needle: str, replacement: str) -> tuple[Path, int]:
    lines = (DATA / source).read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines, 1) if needle in line)
    lines[number - 1] = lines[number - 1].replace(needle, replacement)
    path = tmp_path / f"bad-{source}"
    path.write_text("".join(lines))
    return path, number


@pytest.mark.parametrize(
    "source, needle, replacement, message",
    [
        (
            "lenet_solver.log",
            "Iteration 10, loss = ",
            "Iteration 10, loss = banana ",
            "unrecognised Caffe iteration line",
        ),
        (
            "lenet_solver.log",
            "Train net output #0: loss = ",
            "Train net output #0: loss = x",
            "train net output",
        ),
        ("lenet_time.log", "conv1\tbackward: ", "conv1\tbackward: fast ", "per-layer time"),
        ("lenet_time.log", "Average Forward-Backward: ", "Average Forward-Backward: ?", "benchmark average"),
    ],
)
def test_malformed_line_exits_2_with_file_and_line(tmp_path, source, needle, replacement, message):
    path, number = _corrupt(tmp_path, source, needle, replacement)
    with pytest.raises(ParseError, match=message):
        parser.parse(path)
    proc = cli(path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"{path}:{number}: "), proc.stderr
    # The CLI streams: what it printed before it met the bad line are whole events, from
    # lines before it (exit 2 tells the reader to discard them).
    assert all(json.loads(line)["event"] for line in proc.stdout.splitlines())


def test_cut_off_log_is_malformed(tmp_path):
    text = (DATA / "lenet_time.log").read_text()
    cut = text[: text.index("Average Forward pass")]
    cut = cut[: cut.rindex("\n") + 1] + cut[cut.rindex("\n") + 1 :][:12]  # a torn last line
    path = tmp_path / "cut.log"
    path.write_text(cut)
    proc = cli(path)
    assert proc.returncode == 2
    last = len(cut.splitlines())
    assert proc.stderr.startswith(f"{path}:{last}: cut-off or malformed glog line"), proc.stderr
    path.write_text(cut[: cut.rindex("\n") + 1])  # whole lines, but no averages
    proc = cli(path)
    assert proc.returncode == 2 and "ends before 'Average Forward-Backward'" in proc.stderr


def test_log_without_caffe_lines_is_malformed(tmp_path):
    path = tmp_path / "empty.log"
    path.write_text("hello\nnot caffe\n")
    proc = cli(path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"{path}:2: no Caffe solver")
    proc = cli(tmp_path / "missing.log")
    assert proc.returncode == 2 and proc.stderr.startswith(f"{tmp_path / 'missing.log'}:0: ")
