"""dlscale.analysis.aggregate on hand-written events files with hand-computed answers."""

from __future__ import annotations

import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers.events import iteration, steady_run, write_run
from hypothesis import given, settings
from hypothesis import strategies as st

from dlscale.analysis import aggregate, tables
from dlscale.analysis.findings import FINDINGS_COLUMNS
from dlscale.base import atomic


def one(runs: pd.DataFrame, run_id: str) -> pd.Series:
    rows = runs[runs["run_id"].eq(run_id)]
    assert len(rows) == 1, run_id
    return rows.iloc[0]


# --- reductions, medians, warm-up --------------------------------------------------------


@pytest.fixture
def two_rank_run(tmp_path: Path) -> Path:
    """2 ranks, 1 warm-up iteration with huge times, 3 timed iterations.

    step per iteration = max over ranks: [1.5, 2.0, 4.0] -> median 2.0, min 1.5, max 4.0
    compute = mean over ranks: [0.9, 0.8, 1.3] -> median 0.9
    exposed = step - compute: [0.6, 1.2, 2.7] -> median 1.2; share [0.4, 0.6, 0.675] -> 0.6
    throughput = 2 x 64 / step: [85.33, 64, 32] -> median 64
    With the warm-up iteration counted, the median step would be 3.0.
    """
    rank0 = [(1.0, 0.8), (2.0, 1.0), (3.0, 1.2)]
    rank1 = [(1.5, 1.0), (1.0, 0.6), (4.0, 1.4)]
    events = [
        iteration(0, 0, 100.0, 0.0, 0.1, loss=2.5, warmup=True),
        iteration(1, 0, 90.0, 0.0, 0.1, loss=2.7, warmup=True),
    ]
    for index, ((s0, c0), (s1, c1)) in enumerate(zip(rank0, rank1, strict=True), start=1):
        events.append(iteration(0, index, s0, c0, 0.1 * index, loss=2.0 - 0.5 * index))
        events.append(iteration(1, index, s1, c1, 0.3 * index, loss=9.0))
    return write_run(tmp_path, events, nodes=2)


def test_medians_use_max_over_ranks_and_exclude_warmup(two_rank_run: Path) -> None:
    runs, _ = tables.load_events([two_rank_run])
    row = runs.iloc[0]
    assert row["status"] == "ok"
    assert pd.isna(row["reason"])
    assert row["timed_iterations"] == 3
    assert row["step_s"] == pytest.approx(2.0)
    assert row["step_s_min"] == pytest.approx(1.5)
    assert row["step_s_max"] == pytest.approx(4.0)
    assert row["compute_s"] == pytest.approx(0.9)
    # comm per iteration: mean of (0.1 i, 0.3 i) = 0.2 i -> median 0.4
    assert row["comm_s"] == pytest.approx(0.4)
    assert row["exposed_comm_s"] == pytest.approx(1.2)
    assert row["exposed_comm_share"] == pytest.approx(0.6)
    assert row["throughput"] == pytest.approx(64.0)
    assert row["throughput_min"] == pytest.approx(32.0)
    assert row["throughput_max"] == pytest.approx(128 / 1.5)


def test_loss_ends_follow_rank0_including_warmup(two_rank_run: Path) -> None:
    runs, _ = tables.load_events([two_rank_run])
    row = runs.iloc[0]
    assert row["loss_first"] == pytest.approx(2.5)  # rank 0's warm-up loss, not rank 1's
    assert row["loss_last"] == pytest.approx(0.5)


def test_run_fields_and_provenance(two_rank_run: Path) -> None:
    runs, _ = tables.load_events([two_rank_run])
    assert list(runs.columns) == list(tables.RUN_COLUMNS)
    row = runs.iloc[0]
    assert row["run_id"] == "torch/lenet/n2x1/b64/r0"
    assert (row["nodes"], row["world_size"], row["batch_per_rank"], row["global_batch"]) == (2, 2, 64, 128)
    assert row["hosts"] == "cn0;cn1"
    assert row["startup_s"] == pytest.approx(2.5)
    # run_end - run_start: 10 s of start-up, rank 0's steps (100 + 1 + 2 + 3 s, one after
    # another) and 1 s to its end (helpers.events.write_run: a run lasts as long as its work).
    assert row["wall_s"] == pytest.approx(117.0)
    assert row["loadavg_1m"] == pytest.approx(0.25)
    assert '"torch": "1.2.3"' in row["versions"]
    assert (row["git_sha"], row["config_sha256"]) == ("deadbeef", "c0ffee")
    assert row["events_path"] == str(two_rank_run)
    assert row["iteration_events"] == 8


def test_iterations_table(two_rank_run: Path) -> None:
    _, iterations = tables.load_events([two_rank_run])
    assert list(iterations.columns) == list(tables.ITERATION_COLUMNS)
    assert len(iterations) == 8
    assert iterations["warmup"].sum() == 2
    assert set(iterations.loc[iterations["rank"].eq(1), "host"]) == {"cn1"}
    assert set(iterations["run_id"]) == {"torch/lenet/n2x1/b64/r0"}
    row = iterations[iterations["rank"].eq(1) & iterations["iteration"].eq(3)].iloc[0]
    assert (row["step_s"], row["compute_s"], row["loss"]) == (4.0, 1.4, 9.0)


def test_null_compute_gives_no_split_but_keeps_throughput(tmp_path: Path) -> None:
    events = [iteration(0, i, 0.5, None, None, samples=100) for i in range(3)]
    runs, _ = tables.load_events([write_run(tmp_path, events, batch=100)])
    row = runs.iloc[0]
    assert row["throughput"] == pytest.approx(200.0)
    assert math.isnan(row["compute_s"])
    assert math.isnan(row["exposed_comm_s"])
    assert math.isnan(row["exposed_comm_share"])
    assert math.isnan(row["loss_first"])


def test_exposed_communication_is_clipped_at_zero(tmp_path: Path) -> None:
    # A rank whose own compute clock overshoots the step (clock jitter) must not give
    # negative communication.
    events = [iteration(0, i, 1.0, 1.2, 0.0) for i in range(3)]
    runs, _ = tables.load_events([write_run(tmp_path, events)])
    assert runs.iloc[0]["exposed_comm_s"] == 0.0


def test_a_missing_report_fails_an_ok_run(tmp_path: Path) -> None:
    events = [iteration(rank, i, 1.0 + rank, 0.5) for i in range(4) for rank in range(2)]
    events = [e for e in events if not (e["rank"] == 1 and e["iteration"] == 3)]
    # iteration 3 reported by rank 0 only: counting it would give 64 samples in 1.0 s, and
    # leaving it out would hide that a rank stopped reporting in a run that says "ok".
    runs, iterations = tables.load_events([write_run(tmp_path, events, nodes=2)])
    row = runs.iloc[0]
    assert row["status"] == "failed"
    assert row["reason"] == "rank 1 reported no iteration 3"
    for name in tables.MEASURED_COLUMNS:
        assert pd.isna(row[name]), name
    assert len(iterations) == 7  # the evidence stays


def test_a_failed_run_keeps_its_own_reason_with_missing_reports(tmp_path: Path) -> None:
    events = [iteration(rank, i, 1.0, 0.5) for i in range(4) for rank in range(2)][:-1]
    runs, _ = tables.load_events(
        [write_run(tmp_path, events, nodes=2, status="failed", reason="rank 1 died (SIGKILL) at iteration 4")]
    )
    assert runs.iloc[0]["reason"] == "rank 1 died (SIGKILL) at iteration 4"


# --- speedup and efficiency ----------------------------------------------------------------


def test_weak_scaling_speedup_and_efficiency(tmp_path: Path) -> None:
    paths = [steady_run(tmp_path, tp, nodes=1, repeat=r) for r, tp in enumerate([90.0, 100.0, 110.0])]
    paths.append(steady_run(tmp_path, 180.0, nodes=2))
    paths.append(steady_run(tmp_path, 320.0, nodes=4))
    runs, _ = tables.load_events(paths)
    two = one(runs, "torch/lenet/n2x1/b50/r0")
    assert two["throughput"] == pytest.approx(180.0)
    assert two["baseline_nodes"] == 1
    assert two["speedup"] == pytest.approx(1.8)
    assert two["efficiency"] == pytest.approx(0.9)
    four = one(runs, "torch/lenet/n4x1/b50/r0")
    assert four["speedup"] == pytest.approx(3.2)
    assert four["efficiency"] == pytest.approx(0.8)
    # baseline repeats against the median of the three (100)
    base = runs[runs["nodes"].eq(1)].sort_values("repeat")
    assert base["speedup"].tolist() == pytest.approx([0.9, 1.0, 1.1])
    assert base["efficiency"].tolist() == pytest.approx([0.9, 1.0, 1.1])


def test_strong_scaling_compares_at_the_same_global_batch(tmp_path: Path) -> None:
    # global batch 128: 1 node x b128 in 1.0 s (128/s); 2 nodes x b64 in 0.625 s (204.8/s)
    one_node = [iteration(0, i, 1.0, samples=128) for i in range(3)]
    two_nodes = [iteration(r, i, 0.625, samples=64) for i in range(3) for r in range(2)]
    paths = [
        write_run(tmp_path, one_node, batch=128, global_batch=128, scaling="strong"),
        write_run(tmp_path, two_nodes, nodes=2, batch=64, global_batch=128, scaling="strong"),
    ]
    runs, _ = tables.load_events(paths)
    row = one(runs, "torch/lenet/n2x1/b64/r0")
    assert row["throughput"] == pytest.approx(204.8)
    assert row["baseline_nodes"] == 1
    assert row["speedup"] == pytest.approx(1.6)
    assert row["efficiency"] == pytest.approx(0.8)


def test_speedup_groups_are_separate(tmp_path: Path) -> None:
    paths = [
        steady_run(tmp_path, 100.0, nodes=1),
        steady_run(tmp_path, 150.0, nodes=2),
        steady_run(tmp_path, 400.0, nodes=1, framework="caffe"),
        steady_run(tmp_path, 600.0, nodes=2, framework="caffe"),
        steady_run(tmp_path, 100.0, nodes=2, ranks_per_node=2),
        steady_run(tmp_path, 100.0, nodes=1, model="alexnet"),
    ]
    runs, _ = tables.load_events(paths)
    assert one(runs, "torch/lenet/n2x1/b50/r0")["speedup"] == pytest.approx(1.5)
    assert one(runs, "caffe/lenet/n2x1/b50/r0")["speedup"] == pytest.approx(1.5)
    # 2 ranks per node is its own group, with itself as baseline
    lone = one(runs, "torch/lenet/n2x2/b50/r0")
    assert (lone["baseline_nodes"], lone["speedup"], lone["efficiency"]) == (2, 1.0, 1.0)
    assert one(runs, "torch/alexnet/n1x1/b50/r0")["speedup"] == pytest.approx(1.0)


def test_each_network_has_its_own_baseline(tmp_path: Path) -> None:
    """Emulated-network runs scale against the same network's smallest node count."""
    paths = [
        steady_run(tmp_path, 100.0, nodes=1),
        steady_run(tmp_path, 180.0, nodes=2, network="host"),
        steady_run(tmp_path, 90.0, nodes=1, network="emulated-1gbe"),
        steady_run(tmp_path, 117.0, nodes=2, network="emulated-1gbe"),
        steady_run(tmp_path, 120.0, nodes=2, network="emulated-100mbe"),
    ]
    runs, iterations = tables.load_events(paths)
    host = one(runs, "torch/lenet/n2x1/b50/r0")
    assert host["network"] == "host"
    assert (host["speedup"], host["efficiency"]) == (pytest.approx(1.8), pytest.approx(0.9))
    assert one(runs, "torch/lenet/n1x1/b50/r0")["network"] == "host"  # no network field: host
    emulated = one(runs, "torch/lenet/n2x1-1gbe/b50/r0")
    assert emulated["network"] == "emulated-1gbe"
    assert emulated["baseline_nodes"] == 1
    assert emulated["speedup"] == pytest.approx(1.3)  # 117 / 90, not 117 / 100
    assert emulated["efficiency"] == pytest.approx(0.65)
    # a network with one node count is its own baseline
    lone = one(runs, "torch/lenet/n2x1-100mbe/b50/r0")
    assert (lone["baseline_nodes"], lone["speedup"]) == (2, 1.0)
    assert set(iterations["network"]) == {"host", "emulated-1gbe", "emulated-100mbe"}


def test_failed_smallest_node_count_moves_the_baseline(tmp_path: Path) -> None:
    paths = [
        write_run(tmp_path, [], status="failed", reason="node cn0 down"),
        steady_run(tmp_path, 180.0, nodes=2),
        steady_run(tmp_path, 324.0, nodes=4),
    ]
    runs, _ = tables.load_events(paths)
    four = one(runs, "torch/lenet/n4x1/b50/r0")
    assert four["baseline_nodes"] == 2
    assert four["speedup"] == pytest.approx(1.8)
    assert four["efficiency"] == pytest.approx(0.9)


# --- failed runs ----------------------------------------------------------------------------


def test_failed_run_is_a_row_with_reason_and_no_numbers(tmp_path: Path) -> None:
    # Two good timed iterations before the failure: they must not become a throughput.
    events = [iteration(0, i, 0.5, 0.4, 0.1, loss=2.0) for i in range(3)]
    failed = write_run(tmp_path, events, nodes=2, status="failed", reason="rank 1 killed (OOM)")
    base = steady_run(tmp_path, 100.0, nodes=1)
    runs, iterations = tables.load_events([failed, base])
    row = one(runs, "torch/lenet/n2x1/b64/r0")
    assert row["status"] == "failed"
    assert row["reason"] == "rank 1 killed (OOM)"
    for name in tables.MEASURED_COLUMNS:
        assert pd.isna(row[name]), name
    assert row["iteration_events"] == 3  # evidence of how far it got
    assert (row["nodes"], row["framework"]) == (2, "torch")
    # the evidence stays in the iterations table
    assert iterations["run_id"].eq("torch/lenet/n2x1/b64/r0").sum() == 3


def test_ok_run_without_timed_iterations_is_failed(tmp_path: Path) -> None:
    warm_only = [iteration(0, i, 0.5, warmup=True) for i in range(2)]
    paths = [write_run(tmp_path, warm_only), write_run(tmp_path, [], repeat=1)]
    runs, _ = tables.load_events(paths)
    assert runs["status"].tolist() == ["failed", "failed"]
    assert runs["reason"].tolist() == ["no timed iterations", "no timed iterations"]
    assert runs["throughput"].isna().all()


def test_failed_without_reason_and_duplicate_events(tmp_path: Path) -> None:
    duplicated = [iteration(0, 0, 0.5), iteration(0, 0, 0.6), iteration(0, 1, 0.5)]
    paths = [
        write_run(tmp_path, [], status="failed", reason=None),
        write_run(tmp_path, duplicated, repeat=1),
    ]
    runs, _ = tables.load_events(paths)
    assert runs["status"].tolist() == ["failed", "failed"]
    assert runs["reason"].iloc[0] == "run reported failure without a reason"
    assert "duplicate iteration events" in runs["reason"].iloc[1]
    assert runs["step_s"].isna().all()


def test_failed_runs_never_serve_as_baseline(tmp_path: Path) -> None:
    events = [iteration(0, i, 0.01, samples=50) for i in range(3)]  # would be 5000/s
    paths = [
        write_run(tmp_path, events, batch=50, status="failed", reason="diverged"),
        steady_run(tmp_path, 100.0, nodes=1, repeat=1),
        steady_run(tmp_path, 190.0, nodes=2),
    ]
    runs, _ = tables.load_events(paths)
    assert one(runs, "torch/lenet/n2x1/b50/r0")["speedup"] == pytest.approx(1.9)


def test_duplicate_run_ids_are_refused(tmp_path: Path) -> None:
    first = steady_run(tmp_path / "a", 100.0, nodes=1)
    second = steady_run(tmp_path / "b", 100.0, nodes=1)
    with pytest.raises(ValueError, match="torch/lenet/n1x1/b50/r0"):
        tables.load_events([first, second])


def test_no_events_files_gives_empty_tables() -> None:
    runs, iterations = tables.load_events([])
    assert runs.empty
    assert iterations.empty
    assert list(runs.columns) == list(tables.RUN_COLUMNS)
    assert list(iterations.columns) == list(tables.ITERATION_COLUMNS)
    assert aggregate.findings(runs).empty


# --- findings ---------------------------------------------------------------------------------


def comm_run(
    root: Path,
    framework: str,
    nodes: int,
    step: float,
    compute: float,
    repeat: int = 0,
    network: str | None = None,
) -> Path:
    events = [
        iteration(rank, i, step, compute, step - compute, samples=100, warmup=i == 0)
        for i in range(4)
        for rank in range(nodes)
    ]
    return write_run(
        root, events, framework=framework, nodes=nodes, batch=100, repeat=repeat, network=network
    )


#: Three repeats of a cell: every time x 0.99, 1.00, 1.01, so the median is the nominal
#: value, the shares are exact, and each throughput interval (a low-n range) is +-1 %.
JITTER = (0.99, 1.0, 1.01)


def comm_cell(
    root: Path, framework: str, nodes: int, step: float, compute: float, network: str | None = None
) -> list[Path]:
    return [
        comm_run(root, framework, nodes, step * f, compute * f, repeat=r, network=network)
        for r, f in enumerate(JITTER)
    ]


def test_findings_pick_the_right_framework(tmp_path: Path) -> None:
    # tensorflow: fastest on 1 node (1000/s vs 500/s) but poor scaling and communication;
    # torch: slower compute, lower exposed share, better efficiency and faster per sample
    # at 4 nodes (1905/s vs 1600/s).
    paths = [
        *comm_cell(tmp_path, "tensorflow", 1, 0.1, 0.1),
        *comm_cell(tmp_path, "tensorflow", 2, 0.125, 0.1),  # eff 0.8
        *comm_cell(tmp_path, "tensorflow", 4, 0.25, 0.1),  # 1600/s, eff 0.4, share 0.6
        *comm_cell(tmp_path, "torch", 1, 0.2, 0.2),
        *comm_cell(tmp_path, "torch", 2, 0.205, 0.2),
        *comm_cell(tmp_path, "torch", 4, 0.21, 0.2),  # 1905/s, eff 0.952, share 0.048
    ]
    runs, _ = tables.load_events(paths)
    table = aggregate.findings(runs)
    assert list(table.columns) == list(FINDINGS_COLUMNS)
    row = table.set_index("model").loc["lenet"]
    assert row["fastest_compute"] == "tensorflow"
    assert row["fastest_compute_throughput"] == pytest.approx(1000.0)
    assert row["fastest_compute_throughput_low"] == pytest.approx(1000 / 1.01)
    assert row["fastest_compute_throughput_high"] == pytest.approx(1000 / 0.99)
    assert row["fastest_compute_runner_up"] == "torch"
    assert row["fastest_compute_runner_up_throughput"] == pytest.approx(500.0)
    assert row["fastest_compute_nodes"] == 1
    assert row["best_communication"] == "torch"
    assert row["best_communication_exposed_share"] == pytest.approx(0.01 / 0.21)
    assert row["best_communication_runner_up_exposed_share"] == pytest.approx(0.6)
    assert row["best_communication_nodes"] == 4
    assert row["best_scaling"] == "torch"
    assert row["best_scaling_efficiency"] == pytest.approx(0.2 / 0.21)
    assert row["best_scaling_time_per_sample_s"] == pytest.approx(0.21 / 400)
    # tensorflow is clearly slower per sample at 4 nodes: out of the scaling race
    assert pd.isna(row["best_scaling_runner_up"])
    assert "tensorflow left out: slower per sample" in row["best_scaling_note"]
    assert row["best_scaling_nodes"] == 4
    assert row["best_scaling_baseline_nodes"] == 1
    assert row["frameworks"] == "tensorflow;torch"
    assert row["node_counts"] == "1;2;4"
    assert row["repeats"] == "3"
    assert "low-n" in row["fastest_compute_note"]


def test_findings_ignore_failed_runs_and_self_baselines(tmp_path: Path) -> None:
    # caffe's only ok runs are at 4 nodes: its efficiency 1.0 is against itself and must
    # not win; its failed 1-node run is not a speed record either.
    paths = [
        *comm_cell(tmp_path, "torch", 1, 0.2, 0.2),
        *comm_cell(tmp_path, "torch", 4, 0.25, 0.2),
        write_run(
            tmp_path,
            [iteration(0, i, 0.001, samples=100) for i in range(3)],
            framework="caffe",
            batch=100,
            status="failed",
            reason="segfault",
        ),
        *comm_cell(tmp_path, "caffe", 4, 0.21, 0.2),
    ]
    runs, _ = tables.load_events(paths)
    row = aggregate.findings(runs).set_index("model").loc["lenet"]
    assert row["fastest_compute"] == "torch"
    assert row["best_scaling"] == "torch"
    assert row["best_scaling_efficiency"] == pytest.approx(0.8)
    assert row["best_communication"] == "caffe"


def test_one_node_count_cannot_answer_scaling(tmp_path: Path) -> None:
    paths = [comm_run(tmp_path, "torch", 2, 0.25, 0.2), comm_run(tmp_path, "torch", 2, 0.25, 0.2, repeat=1)]
    runs, _ = tables.load_events(paths)
    row = aggregate.findings(runs).iloc[0]
    assert row["fastest_compute"] == "torch"  # a single framework still answers
    assert row["fastest_compute_throughput"] == pytest.approx(800.0)
    assert (
        row["fastest_compute_note"]
        == "the only candidate; low-n: torch 2 repeat(s); ranges, not 95 % intervals"
    )
    assert row["best_communication"] == "torch"
    assert row["best_scaling"] == tables.NEEDS_TWO_NODE_COUNTS == "n/a (needs >= 2 node counts)"
    assert math.isnan(row["best_scaling_efficiency"])


def test_one_repeat_per_cell_names_no_winner(tmp_path: Path) -> None:
    # One run per cell says nothing about the next run: however far apart, no interval,
    # no winner; the leader and runner-up are still reported.
    paths = [comm_run(tmp_path, "tensorflow", 1, 0.1, 0.1), comm_run(tmp_path, "torch", 1, 0.5, 0.5)]
    runs, _ = tables.load_events(paths)
    row = aggregate.findings(runs).iloc[0]
    assert row["fastest_compute"] == "no clear winner"
    assert row["fastest_compute_leader"] == "tensorflow"
    assert row["fastest_compute_runner_up"] == "torch"
    assert math.isnan(row["fastest_compute_throughput_low"])
    assert "no interval (one repeat)" in row["fastest_compute_note"]


def test_findings_single_rank_and_all_failed(tmp_path: Path) -> None:
    paths = [
        steady_run(tmp_path, 100.0, nodes=1),
        write_run(tmp_path, [], model="alexnet", status="failed", reason="timeout"),
    ]
    runs, _ = tables.load_events(paths)
    table = aggregate.findings(runs).set_index("model")
    assert table.loc["lenet", "best_communication"] == "n/a (needs > 1 rank)"
    assert table.loc["alexnet", "fastest_compute"] == "n/a (no ok runs)"
    assert table.loc["alexnet", "best_scaling"] == "n/a (no ok runs)"


def test_contention_is_read_from_run_end(tmp_path: Path) -> None:
    paths = [
        steady_run(tmp_path, 100.0, nodes=1),  # an older file: no contention record
        steady_run(
            tmp_path,
            70.0,
            nodes=1,
            repeat=1,
            contention={"other_busy_share": 0.45, "steal_share": 0.0, "contended": True},
        ),
        steady_run(
            tmp_path, 99.0, nodes=1, repeat=2, contention={"other_busy_share": 0.02, "steal_share": 0.01}
        ),
        # no "contended" key: decided from the shares and the threshold
        steady_run(
            tmp_path, 98.0, nodes=1, repeat=3, contention={"other_busy_share": 0.3, "steal_share": 0.0}
        ),
        steady_run(tmp_path, 190.0, nodes=2),
    ]
    runs, _ = tables.load_events(paths)
    by_repeat = runs[runs["nodes"].eq(1)].set_index("repeat")
    assert math.isnan(by_repeat.loc[0, "other_busy_share"]) and not by_repeat.loc[0, "contended"]
    assert by_repeat.loc[1, "contended"] and by_repeat.loc[1, "other_busy_share"] == pytest.approx(0.45)
    assert by_repeat.loc[1, "flag"] == "contended: other work took 45% of the host's CPUs during the run"
    assert not by_repeat.loc[2, "contended"] and by_repeat.loc[2, "steal_share"] == pytest.approx(0.01)
    assert pd.isna(by_repeat.loc[2, "flag"])
    assert by_repeat.loc[3, "contended"]
    # the baseline is the median of the uncontended 1-node runs (100, 99), not of all four
    two = one(runs, "torch/lenet/n2x1/b50/r0")
    assert two["speedup"] == pytest.approx(190.0 / 99.5)
    assert two["efficiency"] == pytest.approx(95.0 / 99.5)


def test_a_group_of_contended_runs_still_has_a_baseline(tmp_path: Path) -> None:
    busy = {"other_busy_share": 0.5, "steal_share": 0.0, "contended": True}
    paths = [
        steady_run(tmp_path, 100.0, nodes=1, contention=busy),
        steady_run(tmp_path, 150.0, nodes=2, contention=busy),
    ]
    runs, _ = tables.load_events(paths)
    assert one(runs, "torch/lenet/n2x1/b50/r0")["speedup"] == pytest.approx(1.5)
    assert runs["contended"].all()


def test_one_rank_communication_is_flagged_as_fixed_overhead(tmp_path: Path) -> None:
    paths = [
        comm_run(tmp_path, "bigdl", 1, 0.25, 0.1),  # 60 % "communication" with one rank
        comm_run(tmp_path, "torch", 1, 0.1, 0.1),
        comm_run(tmp_path, "torch", 2, 0.15, 0.1),  # two ranks: communication is real
    ]
    runs, _ = tables.load_events(paths)
    bigdl = one(runs, "bigdl/lenet/n1x1/b100/r0")
    assert bigdl["flag"] == "fixed overhead: exposed 'communication' is 60% of the step with one rank"
    assert runs.loc[runs["framework"].eq("torch"), "flag"].isna().all()


def test_aggregate_is_independent_of_input_order(tmp_path: Path) -> None:
    paths = [*comm_cell(tmp_path, "torch", 1, 0.2, 0.2), *comm_cell(tmp_path, "torch", 2, 0.25, 0.2)]
    forward, backward = aggregate.aggregate(paths), aggregate.aggregate(list(reversed(paths)))
    for name in ("runs", "iterations", "cells", "findings", "claims"):
        pd.testing.assert_frame_equal(getattr(forward, name), getattr(backward, name))


# --- writing --------------------------------------------------------------------------------


def test_write_tables_atomically_and_readably(tmp_path: Path, two_rank_run: Path) -> None:
    runs, iterations = tables.load_events([two_rank_run])
    table = aggregate.findings(runs)
    out = tmp_path / "results"
    targets = {
        "runs_csv": out / "runs.csv",
        "runs_parquet": out / "runs.parquet",
        "iterations_parquet": out / "iterations.parquet",
        "findings_csv": out / "findings.csv",
    }
    (out).mkdir()
    targets["runs_csv"].write_text("old\n")
    aggregate.write_tables(runs, iterations, table, **targets)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in targets.values())  # no temp files
    csv = pd.read_csv(targets["runs_csv"])
    assert list(csv.columns) == list(tables.RUN_COLUMNS)
    assert csv.loc[0, "throughput"] == pytest.approx(64.0)
    parquet = pd.read_parquet(targets["runs_parquet"])
    assert parquet.loc[0, "run_id"] == "torch/lenet/n2x1/b64/r0"
    assert len(pd.read_parquet(targets["iterations_parquet"])) == 8
    assert pd.read_csv(targets["findings_csv"]).loc[0, "fastest_compute"] == "torch"
    mode = stat.S_IMODE(os.stat(targets["runs_csv"]).st_mode)
    assert mode == atomic.file_mode()  # not mkstemp's 0600


def test_write_tables_keeps_the_old_file_when_writing_fails(tmp_path: Path, two_rank_run: Path) -> None:
    runs, iterations = tables.load_events([two_rank_run])
    old = tmp_path / "iterations.parquet"
    old.write_bytes(b"old")
    bad = iterations.assign(step_s=[object()] * len(iterations))  # parquet cannot write this
    with pytest.raises(ValueError, match="object"):  # pyarrow's ArrowInvalid
        aggregate.write_tables(
            runs,
            bad,
            aggregate.findings(runs),
            runs_csv=tmp_path / "runs.csv",
            runs_parquet=tmp_path / "runs.parquet",
            iterations_parquet=tmp_path / "iterations.parquet",
            findings_csv=tmp_path / "findings.csv",
        )
    assert old.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# --- the vectorised reduction against a plain reference ------------------------------------


def reference(ranks: int, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The definitions written out as loops, one run at a time."""
    reporters = 1 if ranks > 1 and events and events[0]["samples"] == 64 * ranks else ranks
    have = {(e["iteration"], e["rank"]) for e in events}
    last = max((e["iteration"] for e in events), default=-1)
    gaps = [(i, r) for i in range(last + 1) for r in range(reporters) if (i, r) not in have]
    if gaps:
        return {"reason": f"rank {gaps[0][1]} reported no iteration {gaps[0][0]}", "timed_iterations": 0}
    by_iteration: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        by_iteration.setdefault(event["iteration"], []).append(event)
    steps, computes, throughputs = [], [], []
    for rows in by_iteration.values():
        if any(r.get("warmup", False) for r in rows):
            continue
        step = max(r["step_s"] for r in rows)
        compute = [r["compute_s"] for r in rows if r["compute_s"] is not None]
        steps.append(step)
        computes.append(sum(compute) / len(compute) if compute else math.nan)
        throughputs.append(sum(r["samples"] for r in rows) / step)
    exposed = [max(s - c, 0.0) for s, c in zip(steps, computes, strict=True)]
    return {
        "reason": None if steps else "no timed iterations",
        "timed_iterations": len(steps),
        "step_s": float(np.median(steps)) if steps else math.nan,
        "compute_s": float(np.nanmedian(computes))
        if steps and not all(map(math.isnan, computes))
        else math.nan,
        "exposed_comm_s": float(np.nanmedian(exposed))
        if steps and not all(map(math.isnan, exposed))
        else math.nan,
        "throughput": float(np.median(throughputs)) if steps else math.nan,
    }


times = st.floats(min_value=0.001, max_value=10.0, allow_nan=False)
run_shapes = st.tuples(
    st.integers(min_value=1, max_value=3),  # ranks
    st.integers(min_value=1, max_value=6),  # iterations
    st.integers(min_value=0, max_value=2),  # warm-up iterations
)


@st.composite
def run_events(draw: st.DrawFn) -> tuple[int, list[dict[str, Any]]]:
    """A run of 1-3 single-rank nodes: every rank with its batch (64), or rank 0 alone with
    the global batch; sometimes one report missing."""
    ranks, count, warmup = draw(run_shapes)
    alone = ranks > 1 and draw(st.booleans())
    events = []
    for index in range(count):
        for rank in range(1 if alone else ranks):
            step = draw(times)
            # compute is timed inside the step: up to a clock's jitter past it (clipped), never
            # twice it (dlscale.plausible.MAX_COMPUTE_OVER_STEP refuses such an event)
            jitter = st.floats(min_value=0.0, max_value=1.5)
            compute = draw(st.one_of(st.none(), jitter.map(lambda share, step=step: share * step)))
            events.append(
                iteration(
                    rank,
                    index,
                    step,
                    compute,
                    None,
                    samples=64 * ranks if alone else 64,
                    warmup=index < warmup,
                )
            )
    if draw(st.booleans()) and len(events) > 1:
        events.pop(draw(st.integers(min_value=0, max_value=len(events) - 1)))  # a missing report
    return ranks, events


@settings(max_examples=40, deadline=None)
@given(st.lists(run_events(), min_size=1, max_size=4))
def test_vectorised_reduction_matches_reference(runs_events: list[tuple[int, list[dict[str, Any]]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = [
            write_run(root, events, nodes=ranks, repeat=i) for i, (ranks, events) in enumerate(runs_events)
        ]
        runs, iterations = tables.load_events(paths)
    assert len(iterations) == sum(len(e) for _, e in runs_events)
    for repeat, (ranks, events) in enumerate(runs_events):
        row = one(runs, f"torch/lenet/n{ranks}x1/b64/r{repeat}")
        want = reference(ranks, events)
        if want["reason"] is not None:
            assert row["status"] == "failed"
            assert row["reason"] == want["reason"]
            continue
        assert row["status"] == "ok"
        assert row["timed_iterations"] == want["timed_iterations"]
        for name in ("step_s", "compute_s", "exposed_comm_s", "throughput"):
            if math.isnan(want[name]):
                assert math.isnan(row[name]), name
            else:
                assert row[name] == pytest.approx(want[name], rel=1e-9), name


def test_findings_answer_each_network_apart(tmp_path: Path) -> None:
    # On the host network torch scales best; on a slow emulated link caffe does. Mixed
    # together, the medians would answer neither question.
    paths = [
        *comm_cell(tmp_path, "torch", 1, 0.2, 0.2),
        *comm_cell(tmp_path, "torch", 2, 0.21, 0.2),  # eff 0.95
        *comm_cell(tmp_path, "caffe", 1, 0.2, 0.2),
        *comm_cell(tmp_path, "caffe", 2, 0.3, 0.2),  # eff 0.67
        *comm_cell(tmp_path, "torch", 1, 0.2, 0.2, network="emulated-100mbe"),
        *comm_cell(tmp_path, "torch", 2, 0.8, 0.2, network="emulated-100mbe"),  # eff 0.25
        *comm_cell(tmp_path, "caffe", 1, 0.2, 0.2, network="emulated-100mbe"),
        *comm_cell(tmp_path, "caffe", 2, 0.4, 0.2, network="emulated-100mbe"),  # eff 0.5
    ]
    runs, _ = tables.load_events(paths)
    table = aggregate.findings(runs)
    assert list(table["network"]) == ["host", "emulated-100mbe"]  # the host first
    by_network = table.set_index("network")
    assert by_network.loc["host", "best_scaling"] == "torch"
    assert by_network.loc["host", "best_scaling_efficiency"] == pytest.approx(0.2 / 0.21)
    assert by_network.loc["emulated-100mbe", "best_scaling"] == "caffe"
    assert by_network.loc["emulated-100mbe", "best_scaling_efficiency"] == pytest.approx(0.5)
