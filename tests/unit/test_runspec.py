"""RunSpec: what the launcher and every runner receive, typed, with one serialisation.

Pure tests (standard library only, no framework): the JSON round trip, the hash that
existing runs recorded as ``config_sha256``, and specs that are not runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from dlscale.runspec import RunSpec, SpecError

#: A run spec as dlscale.study.matrix wrote it before RunSpec existed: a plain dict, options
#: complete (filled by validation), no ``network`` or ``input`` (added later, left out at
#: their defaults so that these runs kept their hash).
KNOWN = {
    "framework": "torch",
    "model": "lenet",
    "nodes": 2,
    "ranks_per_node": 1,
    "batch": 64,
    "repeat": 0,
    "run_id": "torch/lenet/n2x1/b64/r0",
    "world_size": 2,
    "scaling": "weak",
    "global_batch": 128,
    "dataset": "mnist",
    "iterations": 100,
    "warmup": 5,
    "threads_per_rank": 1,
    "learning_rate": 0.01,
    "momentum": 0.9,
    "seed": 1234,
    "timeout_s": 3600,
    "options": {"channels_last": True, "timeout_s": 300},
}
#: sha256 of ``json.dumps(KNOWN, sort_keys=True)``: pinned, so that a change of the
#: serialisation (which would silently rerun every existing run) fails here.
KNOWN_SHA256 = "5675b7f4b1b4c6a366ca196ab95f8afc454ac055dc1951d471985fdf64658951"


def test_round_trip_through_json_is_the_same_spec():
    spec = RunSpec.from_dict(KNOWN)
    again = RunSpec.from_json(spec.to_json())
    assert again == spec and again.to_json() == spec.to_json()
    assert isinstance(again.learning_rate, float) and isinstance(again.nodes, int)
    piped = dataclasses.replace(spec, input="pipeline", input_workers=3, network="emulated-1gbe")
    assert RunSpec.from_json(piped.to_json()) == piped


def test_hash_is_the_one_runs_recorded_before():
    spec = RunSpec.from_dict(KNOWN)
    assert spec.to_json() == json.dumps(KNOWN, sort_keys=True)
    assert spec.sha256 == hashlib.sha256(json.dumps(KNOWN, sort_keys=True).encode()).hexdigest()
    assert spec.sha256 == KNOWN_SHA256


def test_fields_added_later_change_the_hash_only_when_set():
    spec = RunSpec.from_dict(KNOWN)
    explicit = RunSpec.from_dict({**KNOWN, "network": "host", "input": "memory", "input_workers": 1})
    assert explicit.sha256 == spec.sha256
    piped = RunSpec.from_dict({**KNOWN, "input": "pipeline", "input_workers": 2})
    assert piped.sha256 != spec.sha256
    assert json.loads(piped.to_json())["input_workers"] == 2


def test_a_spec_that_evaluates_nothing_never_evaluates_and_says_so_in_its_hash():
    spec = RunSpec.from_dict(KNOWN)
    assert spec.evaluates and spec.eval_due(spec.total_iterations)  # after the last, by default
    silent = RunSpec.from_dict({**KNOWN, "evaluates": False, "eval_every": 10})
    assert not any(silent.eval_due(done) for done in range(1, silent.total_iterations + 1))
    assert silent.sha256 != spec.sha256 and json.loads(silent.to_json())["evaluates"] is False
    assert RunSpec.from_dict({**KNOWN, "evaluates": True}).sha256 == KNOWN_SHA256
    with pytest.raises(SpecError, match="field 'evaluates': 1 is not true or false"):
        RunSpec.from_dict({**KNOWN, "evaluates": 1})
    target = {"quality_target": {"metric": "top1", "value": 0.9}, "max_iterations": 100, "eval_every": 10}
    with pytest.raises(SpecError, match="quality_target needs .* evaluates"):
        RunSpec.from_dict({**KNOWN, **target, "evaluates": False})


def test_options_defaults_are_filled_from_the_runner_schema():
    spec = RunSpec.from_dict({**KNOWN, "options": {}})
    assert spec.options == {
        "channels_last": True,
        "channels_last_all_models": None,
        "mkldnn": True,
        "timeout_s": 300,
        "startup_timeout_s": 180,
    }
    tf = RunSpec.from_dict({**KNOWN, "framework": "tensorflow", "options": {"strategy": "ps"}})
    assert tf.options["strategy"] == "ps" and tf.options["num_ps"] == 1
    # intra_op_threads: null = the rank's threads, left out of the JSON (and the hash).
    assert tf.options["collective_timeout_s"] == 300 and tf.options["intra_op_threads"] is None
    assert "intra_op_threads" not in tf.to_dict()["options"]
    caffe = RunSpec.from_dict({**KNOWN, "framework": "caffe", "options": {}})
    assert caffe.options["home"] is None and caffe.options["log_every"] == 0
    # A spec completed by hand hashes as one that was complete already.
    assert RunSpec.from_dict({**KNOWN, "options": {}}).sha256 == KNOWN_SHA256


def test_what_runners_ask_of_a_spec():
    spec = RunSpec.from_dict(KNOWN)
    assert spec.total_iterations == 105 and spec.mnist_sized
    assert spec.input == "memory" and spec.network == "host" and spec.input_workers == 1
    assert not RunSpec.from_dict({**KNOWN, "model": "alexnet", "dataset": "imagenet"}).mnist_sized


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("nodes", "2", "int"),
        ("batch", 64.0, "int"),
        ("warmup", True, "int"),
        ("learning_rate", "0.01", "float"),
        ("model", 3, "str"),
    ],
)
def test_wrong_types_are_rejected_with_the_field_named(field, value, expected):
    with pytest.raises(SpecError, match=rf"field '{field}': .* is not {expected}"):
        RunSpec.from_dict({**KNOWN, field: value})


def test_an_int_learning_rate_is_a_float():
    assert RunSpec.from_dict({**KNOWN, "learning_rate": 1}).learning_rate == 1.0


def test_specs_that_are_not_runs_name_the_field():
    with pytest.raises(SpecError, match="field 'colour' is not a known field"):
        RunSpec.from_dict({**KNOWN, "colour": "blue"})
    missing = {k: v for k, v in KNOWN.items() if k != "seed"}
    with pytest.raises(SpecError, match="field 'seed' is missing"):
        RunSpec.from_dict(missing)
    with pytest.raises(SpecError, match="'world_size'.*nodes x ranks_per_node"):
        RunSpec.from_dict({**KNOWN, "world_size": 3})
    with pytest.raises(SpecError, match="'input'"):
        RunSpec.from_dict({**KNOWN, "input": "disk"})
    with pytest.raises(SpecError, match="not JSON"):
        RunSpec.from_json("{")
    with pytest.raises(SpecError, match="mapping"):
        RunSpec.from_json("[1, 2]")


def test_a_spec_is_frozen():
    spec = RunSpec.from_dict(KNOWN)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.nodes = 4  # type: ignore[misc]


def test_the_launcher_records_a_spec_that_is_not_a_run_as_a_failed_run(tmp_path):
    """No rank starts; the run's record says which field is wrong, like any launch failure."""
    import subprocess
    import sys

    from dlscale.events import read_events

    events = tmp_path / "runs" / KNOWN["run_id"] / "events.jsonl"
    bad = {**KNOWN, "batch": "64"}
    cmd = [sys.executable, "-m", "dlscale.launch", "--spec-json", json.dumps(bad), "--data", str(tmp_path)]
    proc = subprocess.run(
        [*cmd, "--events", str(events), "--config-sha256", "abc"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr  # a recorded failure is a result, not a crash
    start, end = read_events(events)
    assert end["status"] == "failed" and "bad run spec" in end["reason"] and "'batch'" in end["reason"], end
    assert start["run_id"] == KNOWN["run_id"] and start["world_size"] == 2 and start["config_sha256"] == "abc"
    assert start["spec"] == bad
    assert "'batch'" in proc.stderr
    # Its record is well typed (the run's fields come from its folder): the tables read
    # it as a failed row of that run.
    from dlscale.analysis.tables import load_events

    runs, _ = load_events([events])
    assert runs.loc[0, "run_id"] == KNOWN["run_id"] and runs.loc[0, "status"] == "failed"
