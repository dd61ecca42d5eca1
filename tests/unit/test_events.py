"""The event schema, atomic writes and strict reading (dlscale.events)."""

from __future__ import annotations

import json
import math

import pytest

from dlscale.events import EventError, read_events, read_numbered, validate_event, write_atomic

START = {
    "event": "run_start",
    "run_id": "torch/lenet/n1x1/b64/r0",
    "framework": "torch",
    "model": "lenet",
    "nodes": 1,
    "ranks_per_node": 1,
    "batch": 64,
    "repeat": 0,
    "world_size": 1,
    "hosts": ["h"],
    "threads_per_rank": 1,
    "versions": {},
    "config_sha256": "x",
    "git_sha": "y",
    "time": 1.0,
}


def iteration(i, loss=1.0):
    return {
        "event": "iteration",
        "rank": 0,
        "iteration": i,
        "samples": 64,
        "step_s": 0.1,
        "compute_s": 0.08,
        "comm_s": None,
        "loss": loss,
        "time": 2.0,
    }


END = {"event": "run_end", "status": "ok", "reason": None, "time": 3.0}


def test_round_trip(tmp_path):
    events = [START, iteration(0), iteration(1), END]
    path = write_atomic(tmp_path / "run" / "events.jsonl", events)
    assert read_events(path) == events
    assert not [p for p in path.parent.iterdir() if p.name != "events.jsonl"]  # no temp file left


def test_nan_loss_written_as_null(tmp_path):
    path = write_atomic(tmp_path / "e.jsonl", [START, iteration(0, loss=math.nan), END])
    assert read_events(path)[1]["loss"] is None


def test_truncated_file_is_an_error_with_line(tmp_path):
    path = write_atomic(tmp_path / "e.jsonl", [START, iteration(0), END])
    text = path.read_text()
    path.write_text(text[: len(text) - 20])
    with pytest.raises(EventError, match=r"e\.jsonl:3:"):
        read_events(path)


def test_missing_run_end_is_an_error(tmp_path):
    path = write_atomic(tmp_path / "e.jsonl", [START, iteration(0)])
    with pytest.raises(EventError, match="expected run_end"):
        read_events(path)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"event": "nope"}, "unknown event type"),
        ({**iteration(0), "step_s": -1.0}, "step_s"),
        ({**iteration(0), "rank": "0"}, "rank"),
        ({k: v for k, v in START.items() if k != "hosts"}, "lacks hosts"),
        ({**END, "status": "meh"}, "status"),
        ({**iteration(0), "time": "yesterday"}, "time='yesterday'"),
        ({**iteration(0), "time": math.inf}, "time=inf"),
        ({**iteration(0), "warmup": 1}, "warmup=1 is not true or false"),
        ({**iteration(0), "input_s": -0.5}, "input_s=-0.5"),
        ({**iteration(0), "samples": True}, "samples=True"),
    ],
)
def test_invalid_events(event, message):
    with pytest.raises(EventError, match=message):
        validate_event(event)


def test_failed_write_leaves_old_file(tmp_path):
    path = write_atomic(tmp_path / "e.jsonl", [START, END])
    before = path.read_text()
    with pytest.raises(EventError):
        write_atomic(path, [START, {"event": "bogus"}])
    assert path.read_text() == before


def test_an_iteration_without_a_timestamp_is_an_event():
    """A native log line may carry no timestamp (dlscale.parse): time null, still an event."""
    assert validate_event({**iteration(0), "time": None})["time"] is None


def test_errors_name_the_line_in_the_file_not_the_event_count(tmp_path):
    path = tmp_path / "e.jsonl"
    lines = [START, iteration(0), iteration(1)]
    path.write_text("\n".join(json.dumps(e) for e in lines).replace("}\n{", "}\n\n{") + "\n")
    with pytest.raises(EventError, match=r"e\.jsonl:5: last event is 'iteration', expected run_end"):
        read_events(path)


def test_read_numbered_gives_each_event_its_line(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text(
        "\n".join(json.dumps(e) for e in (START, iteration(0), END)).replace("}\n{", "}\n\n{") + "\n"
    )
    assert [(n, e["event"]) for n, e in read_numbered(path)] == [
        (1, "run_start"),
        (3, "iteration"),
        (5, "run_end"),
    ]
