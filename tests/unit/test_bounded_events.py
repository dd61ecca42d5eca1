"""Reading events in bounded memory (issue 33, item 2; docs/memory.md): the aggregation of a
long run's file peaks within twice the file's size, a line longer than
``dlscale.events.MAX_LINE_CHARS`` or a run_start field the launcher does not write is an
``EventError`` naming ``FILE:LINE``, and the streamed reader sees exactly what the whole-file
reader saw."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.big_events import write_big_run
from helpers.events import iteration, run_start
from helpers.paths import REPO

from dlscale import events
from dlscale.analysis.readevents import read_run
from dlscale.analysis.tables import load_study
from dlscale.events import MAX_LINE_CHARS, EventError, check_file, read_numbered

#: Aggregates a tiny run first (every import and first-use allocation done), then the big one:
#: the difference of the two high-water marks is what the big file cost.
PROBE = """
import json, resource, sys
from dlscale.analysis import aggregate
aggregate.main([sys.argv[3], "--out", sys.argv[4]])
warm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = aggregate.main([sys.argv[1], "--out", sys.argv[2]])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"code": code, "warm_kib": warm, "peak_kib": peak}))
"""


def test_aggregating_a_long_run_peaks_within_twice_its_file(tmp_path: Path) -> None:
    # 170,000 iteration events, about 80 MB (the 3.3 GB case of issue 33 was 458 MB: the
    # old reader took about 7x the file, docs/memory.md); memory, never time, is asserted.
    big = write_big_run(tmp_path / "big", 170_000)
    tiny = write_big_run(tmp_path / "tiny", 20)
    size = big.stat().st_size
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "big"), str(tmp_path / "out"), str(tmp_path / "tiny"),
         str(tmp_path / "out-tiny")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    assert measured["code"] == 0
    cost = (measured["peak_kib"] - measured["warm_kib"]) * 1024
    assert cost <= 2 * size, (
        f"aggregating a {size / 1e6:.0f} MB events file took {cost / 1e6:.0f} MB over the"
        f" interpreter's {measured['warm_kib'] / 1024:.0f} MiB: more than twice the file"
    )
    assert (tmp_path / "out" / "iterations.parquet").is_file()
    assert tiny.is_file()


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _run_lines(extra_start: dict | None = None) -> list[str]:
    start = {**run_start(total=2), **(extra_start or {})}
    iterations = [iteration(0, i, 0.1, 0.08, 0.01, 2.0 - i) for i in range(2)]
    end = {"event": "run_end", "status": "ok", "reason": None, "time": 1100.0}
    return [json.dumps(e) for e in (start, *iterations, end)]


def test_a_line_over_the_limit_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    lines = _run_lines()
    lines[2] = lines[2][:-1] + ', "blob": "' + "x" * MAX_LINE_CHARS + '"}'
    path = _write(tmp_path / "torch/lenet/n1x1/b64/r0/events.jsonl", lines)
    for read in (read_numbered, check_file, read_run):
        with pytest.raises(EventError, match=rf"^{path}:3: line is longer than {MAX_LINE_CHARS} characters"):
            read(path)
    with pytest.raises(EventError, match=rf"^{path}:3: line is longer"):
        load_study([path])
    # Not even a part file's last line may be that long.
    with pytest.raises(EventError, match=rf"^{path}:3: line is longer"):
        list(events.iter_numbered(path, strict=False))


def test_a_line_at_the_limit_is_read(tmp_path: Path) -> None:
    lines = _run_lines()
    pad = MAX_LINE_CHARS - len(lines[2]) - len(', "note": ""') - 1  # the newline counts
    lines[2] = lines[2][:-1] + ', "note": "' + "x" * pad + '"}'
    path = _write(tmp_path / "torch/lenet/n1x1/b64/r0/events.jsonl", lines)
    assert len(lines[2]) + 1 == MAX_LINE_CHARS
    runs, iterations, _ = load_study([path])
    assert runs["status"].tolist() == ["ok"] and len(iterations) == 2


def test_a_run_start_field_the_launcher_does_not_write_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "torch/lenet/n1x1/b64/r0/events.jsonl", _run_lines({"blob": "y" * 1000}))
    with pytest.raises(EventError, match=rf"^{path}:1: run_start event: .*'blob' was unexpected"):
        load_study([path])


def test_what_the_launcher_records_in_run_start_is_in_the_schema() -> None:
    # dlscale.launch.records.environment_record adds these where the run's venv is known.
    allowed = set(events.EVENT_SCHEMAS["run_start"]["properties"])
    assert {"env", "caffe_build_key", "settings", "network_setup", "launcher", "spec", "loadavg"} <= allowed


def test_text_that_is_not_utf8_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "torch/lenet/n1x1/b64/r0/events.jsonl"
    _write(path, _run_lines())
    path.write_bytes(path.read_bytes().replace(b'"deadbeef"', b'"dead\xffbeef"'))
    with pytest.raises(EventError, match=rf"^{path}:1: not UTF-8 text"):
        load_study([path])


def test_the_streamed_reader_keeps_what_the_whole_file_reader_kept(tmp_path: Path) -> None:
    path = write_big_run(tmp_path, 50, ranks=2, warmup=3)
    whole = read_numbered(path)
    run = read_run(path)
    assert run.start == whole[0] and run.end == whole[-1]
    middle = [(n, e) for n, e in whole[1:-1] if e["event"] == "iteration"]
    assert run.iterations == len(middle) == 106
    assert run.columns["_line"].tolist() == [n for n, _ in middle]
    assert run.columns["warmup"].sum() == 6
    assert run.columns["loss"].tolist() == [e["loss"] for _, e in middle]


def test_structure_errors_come_after_every_line_was_read(tmp_path: Path) -> None:
    # As before streaming: a malformed line is named before a file's missing run_end.
    lines = _run_lines()[:-1] + ["{not json"]
    path = _write(tmp_path / "torch/lenet/n1x1/b64/r0/events.jsonl", lines)
    with pytest.raises(EventError, match=rf"^{path}:4: "):
        read_run(path)
    path = _write(tmp_path / "torch/lenet/n1x1/b64/r1/events.jsonl", _run_lines()[:-1])
    with pytest.raises(EventError, match=rf"^{path}:3: last event is 'iteration', expected run_end"):
        read_run(path)
