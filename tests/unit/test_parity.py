"""The parity check on hand-written shared-initialisation runs: frameworks whose losses agree
within the tolerance pass, one whose learning rate or initialisation differs fails naming the
framework and the iteration, and a designed difference is named (no framework needed)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from dlscale.analysis import parity
from dlscale.events import write_atomic


def write_run(root: Path, framework: str, losses: list[float], *, nodes: int = 1, batch: int = 64,
              digest: str = "abc", strategy: str | None = None, status: str = "ok") -> Path:  # fmt: skip
    world = nodes
    run_id = f"{framework}/lenet/n{nodes}x1/b{batch}/r0"
    spec = {"run_id": run_id, "iterations": len(losses), "warmup": 0, "init": "shared", "seed": 1234}
    if strategy:
        spec["options"] = {"strategy": strategy}
    events = [{
        "event": "run_start", "run_id": run_id, "framework": framework, "model": "lenet", "nodes": nodes,
        "ranks_per_node": 1, "batch": batch, "global_batch": batch * world, "repeat": 0, "world_size": world,
        "hosts": ["h"] * world, "threads_per_rank": 1, "versions": {}, "config_sha256": "x", "git_sha": "y",
        "time": 0.0, "spec": spec,
    }]  # fmt: skip
    for i, loss in enumerate(losses):
        for rank in range(world):
            event = {"event": "iteration", "rank": rank, "iteration": i, "samples": batch, "step_s": 0.01,
                     "compute_s": 0.01, "comm_s": 0.0, "loss": loss, "time": 1.0 + i}  # fmt: skip
            if i == 0:
                event["init_sha256"] = digest
            events.append(event)
    events.append({"event": "run_end", "status": status, "reason": None, "time": 100.0})
    return write_atomic(root / run_id / "events.jsonl", events)


REFERENCE = [2.30 - 0.05 * i for i in range(20)]


def table(root: Path) -> pd.DataFrame:
    runs = [r for r in (parity.read_run(p) for p in sorted(root.rglob("events.jsonl"))) if r is not None]
    return parity.check(runs, iterations=20, tolerance=1e-3).set_index("framework")


def test_frameworks_whose_losses_agree_pass_and_n_nodes_match_one(tmp_path: Path) -> None:
    write_run(tmp_path, "torch", REFERENCE)
    write_run(tmp_path, "tensorflow", [x * (1 + 2e-4) for x in REFERENCE])
    write_run(tmp_path, "torch", [x * (1 - 1e-4) for x in REFERENCE], nodes=2, batch=32)
    result = parity.check(
        [parity.read_run(p) for p in sorted(tmp_path.rglob("events.jsonl"))], tolerance=1e-3
    )
    assert result["passes"].all(), result["reason"].tolist()
    two = result[result["world_size"].eq(2)].iloc[0]
    assert two["reference"] == "torch/lenet/n1x1/b64/r0" and two["global_batch"] == 64


def test_a_changed_learning_rate_fails_naming_the_framework_and_the_iteration(tmp_path: Path) -> None:
    write_run(tmp_path, "torch", REFERENCE)
    # Same first loss (same weights and batch), then a different step size.
    write_run(tmp_path, "caffe", [REFERENCE[0]] + [REFERENCE[0] - 0.1 * i for i in range(1, 20)])
    row = table(tmp_path).loc["caffe"]
    assert not row["passes"] and row["first_failed_iteration"] == 1
    assert row["reason"].startswith("caffe differs from torch at iteration 1")


def test_a_changed_initialisation_fails(tmp_path: Path) -> None:
    write_run(tmp_path, "torch", REFERENCE)
    write_run(tmp_path, "tensorflow", REFERENCE, digest="other")
    row = table(tmp_path).loc["tensorflow"]
    assert not row["passes"] and "did not start from the shared weights" in row["reason"]


def test_a_designed_difference_is_named_and_failed_runs_are_not_compared(tmp_path: Path) -> None:
    write_run(tmp_path, "torch", REFERENCE)
    write_run(tmp_path, "bigdl", [x * 1.01 for x in REFERENCE])
    write_run(tmp_path, "caffe", REFERENCE, status="failed")
    result = table(tmp_path)
    assert "caffe" not in result.index
    row = result.loc["bigdl"]
    assert not row["passes"] and "FP16" in row["designed_difference"] and "by design" in row["reason"]
    assert math.isclose(row["max_rel_diff"], 0.01, rel_tol=1e-6)


def test_without_a_reference_run_the_check_is_not_applicable(tmp_path: Path) -> None:
    write_run(tmp_path, "tensorflow", REFERENCE)
    row = table(tmp_path).loc["tensorflow"]
    assert row["passes"] is None and "no 1-rank torch run" in row["reason"]


def test_the_tolerance_scales_with_the_terms_the_loss_sums() -> None:
    lenet, autoencoder = parity.tolerance_for("lenet", 64), parity.tolerance_for("autoencoder", 64)
    assert autoencoder == pytest.approx(28 * lenet)  # 784 times the terms, sqrt: 28 times the spread
    assert 1e-6 < lenet < 1e-5 and 1e-4 < autoencoder < 2e-4
