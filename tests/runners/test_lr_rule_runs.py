"""The learning-rate rule reaches every runner, for real: 2-node parity under ``linear``.

Every framework trains LeNet on 2 nodes of 32 (global batch 64) under the rule ``linear``
from base batch 32 with a 4-step warm-up (rate 0.01 -> 0.02), from the shared weights on
the global batch sequence; the parity check (``dlscale.analysis.parity``) compares each with
torch's 1-rank run of the same global batch and schedule. A runner that ignored the rule
would train at the base rate: its recorded rates would differ from the rule's and its
losses from the reference's, and the check would fail naming it (the unit tests in
tests/unit/test_lr_rule.py show that failure on hand-made runs). The reference itself is
shown to depend on the rule: the same run at the fixed base rate computes other losses.
Every run here is a parity run, as the study's references are (``evaluates: false``): no
runner evaluates held-out quality in it, not even after the last step, nor warns of a
missing held-out set.

BigDL's losses differ from the reference by design (its FP16 parameter exchange and its
own batch order, catalog.DIFFERENCES); what proves the rule reached it is the rate BigDL's
own optimiser logs for each step (parsed into the iteration events).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import bigdl_runs, caffe_runs, jax_runs, tensorflow_runs, torch_runs
from helpers.paths import caffe_python, framework_python

from dlscale.analysis import parity
from dlscale.events import read_events

#: The rule under test and the run it shapes: 10 steps, 4 of them the ramp.
RULE = {"rule": "linear", "base_batch": 32, "warmup_iterations": 4}
COMMON = {"model": "lenet", "iterations": 10, "warmup": 0, "lr": 0.01}
SHARED = {"init": "shared", "seed": 1234, "evaluates": False}
RAMP = [0.01, 0.0125, 0.015, 0.0175, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02]

HELPERS = {
    "torch": torch_runs,
    "tensorflow": tensorflow_runs,
    "caffe": caffe_runs,
    "bigdl": bigdl_runs,
    "jax": jax_runs,
}


def run_spec(framework: str, nodes: int, batch: int, rule: dict | None = RULE) -> dict:
    made = HELPERS[framework].spec(nodes=nodes, batch=batch, **COMMON)
    made.update(SHARED)
    if framework == "bigdl":
        made["timeout_s"] = 900
    return {**made, **({"lr_rule": rule} if rule else {})}


def launched(framework: str, made: dict, data: Path, root: Path) -> parity.ParityRun:
    python = caffe_python() if framework == "caffe" else framework_python(framework)
    events_path = root / made["run_id"] / "events.jsonl"
    if framework == "bigdl":
        bigdl_runs.run_ok(python, made, data, root / "bigdl")
        events_path = root / "bigdl" / "run" / "events.jsonl"
    else:
        proc = HELPERS[framework].launch(python, made, data, events_path)
        assert proc.returncode == 0, (proc.stdout or "")[-4000:] + (proc.stderr or "")[-4000:]
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    assert not [e for e in events if e["event"] == "eval"], f"{framework} evaluated a parity run"
    assert not events[-1].get("warnings"), events[-1]["warnings"]
    assert events[0]["learning_rate"]["lr_rule"] == (made.get("lr_rule") or {}).get("rule", "fixed")
    run = parity.read_run(events_path)
    assert run is not None
    return run


@pytest.fixture(scope="module")
def reference(mnist_shards, tmp_path_factory) -> parity.ParityRun:
    """torch, 1 rank of the whole global batch, under the rule."""
    return launched("torch", run_spec("torch", 1, 64), mnist_shards, tmp_path_factory.mktemp("reference"))


def test_the_reference_follows_the_rule_and_the_rule_changes_what_it_computes(
    reference, mnist_shards, tmp_path
):
    assert reference.rates == pytest.approx(RAMP)
    fixed = launched("torch", run_spec("torch", 1, 64, rule=None), mnist_shards, tmp_path)
    assert fixed.rates == pytest.approx([0.01] * 10)
    against = parity.compare(fixed, reference, 10, parity.tolerance_for("lenet", 64))
    assert not against["passes"] and against["first_failed_iteration"] == 2, against["reason"]


@pytest.mark.parametrize("framework", list(HELPERS))
def test_two_nodes_under_the_rule_match_the_reference(framework, reference, mnist_shards, tmp_path):
    two = launched(framework, run_spec(framework, 2, 32), mnist_shards, tmp_path)
    assert two.rates == pytest.approx(RAMP, rel=parity.RATE_RTOL), f"{framework} recorded {two.rates}"
    row = parity.check([reference, two]).set_index("framework").loc[framework]
    assert row["lr_rule"] == "linear" and row["lr_matches"], row["reason"]
    if framework == "bigdl":
        assert not row["passes"] and row["designed_difference"], row["reason"]
    else:
        assert row["passes"], row["reason"]
