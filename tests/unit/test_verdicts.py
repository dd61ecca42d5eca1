"""dlscale.analysis.cells, findings and claims: intervals over repeats, findings that check themselves, the seed's claims.

Every expected number is computed by hand in the comments; test inputs are hand-written
events files (helpers.events), read by the same code as the workflow's.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers.events import iteration, write_run
from helpers.paths import REPO

from dlscale.analysis import aggregate, stats, target_claims
from dlscale.analysis.cells import CELL_COLUMNS, NO_CLEAR_WINNER
from dlscale.analysis.cells import cells as cells_of
from dlscale.analysis.claims import CLAIMS
from dlscale.analysis.findings import FINDINGS_COLUMNS

# --- intervals ------------------------------------------------------------------------------


def test_one_repeat_has_no_interval() -> None:
    interval = stats.median_interval([4.0])
    assert interval.value == 4.0
    assert math.isnan(interval.low) and math.isnan(interval.high)
    assert interval.method == stats.SINGLE_RUN
    assert not interval.known


def test_low_n_interval_is_the_range_with_its_coverage() -> None:
    interval = stats.median_interval([3.0, 1.0, float("nan"), 2.0])  # NaN (failed) ignored
    assert (interval.value, interval.low, interval.high) == (2.0, 1.0, 3.0)
    assert interval.method == "range (low-n)"
    # P(median inside [min, max] of 3) = 1 - 2 (1/2)^3
    assert interval.coverage == pytest.approx(0.75)
    assert stats.median_interval([5.0, 1.0, 2.0, 4.0, 3.0]).coverage == pytest.approx(1 - 2 / 32)


def test_order_statistic_interval_from_six_repeats() -> None:
    # n = 6: P(B <= 0) = 1/64 <= 0.025 < P(B <= 1) = 7/64, so j = 1: [x(1), x(6)], 1 - 2/64
    six = stats.median_interval([6.0, 1.0, 5.0, 2.0, 4.0, 3.0])
    assert (six.value, six.low, six.high) == (3.5, 1.0, 6.0)
    assert six.method == "order statistics"
    assert six.coverage == pytest.approx(1 - 2 / 64)
    # n = 10: P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024: [x(2), x(9)]
    ten = stats.median_interval(range(1, 11))
    assert (ten.low, ten.high) == (2.0, 9.0)
    assert ten.coverage == pytest.approx(1 - 22 / 1024)
    # n = 20: P(B <= 5) = 21700/2^20 = 0.0207 <= 0.025 < P(B <= 6) = 0.0577: [x(6), x(15)]
    twenty = stats.median_interval(np.arange(20.0, 0.0, -1.0))
    assert (twenty.low, twenty.high) == (6.0, 15.0)
    assert twenty.coverage == pytest.approx(1 - 2 * 21700 / 2**20)
    assert stats.order_statistic_rank(5) == 0  # five repeats cannot give 95 %


def test_ratio_interval_low_n_is_the_range_ratio() -> None:
    # median(2, 3, 4) / median(1, 2) = 3 / 1.5; bounds min/max and max/min
    ratio = stats.ratio_interval([2.0, 4.0, 3.0], [1.0, 2.0])
    assert ratio.value == pytest.approx(2.0)
    assert (ratio.low, ratio.high) == (pytest.approx(1.0), pytest.approx(4.0))
    assert ratio.method == "range ratio (low-n)"
    assert ratio.coverage == pytest.approx(0.75 * 0.5)
    single = stats.ratio_interval([2.0], [1.0, 1.1, 0.9])
    assert single.value == pytest.approx(2.0) and not single.known


def test_ratio_interval_bootstraps_from_six_repeats_reproducibly() -> None:
    assert stats.ratio_interval([2.0] * 6, [1.0] * 7).low == pytest.approx(2.0)
    assert stats.ratio_interval([2.0] * 6, [1.0] * 7).high == pytest.approx(2.0)
    cell = [180.0, 176.0, 190.0, 171.0, 185.0, 182.0, 179.0]
    base = [100.0, 97.0, 104.0, 99.0, 101.0, 95.0]
    first = stats.ratio_interval(cell, base)
    assert first.method == "bootstrap"
    assert first.value == pytest.approx(np.median(cell) / np.median(base))
    assert min(cell) / max(base) <= first.low < first.value < first.high <= max(cell) / min(base)
    again = stats.ratio_interval(cell, base)
    assert (again.low, again.high) == (first.low, first.high)  # seeded: same tables every time


def test_needs_more_repeats() -> None:
    assert stats.needs_more_repeats([100.0], 0.05, cap=10)
    assert stats.needs_more_repeats([100.0] * 5, 0.05, cap=10)  # no 95 % interval yet
    assert not stats.needs_more_repeats([100.0] * 5, 0.05, cap=5)  # the cap wins
    # six repeats -> [min, max] = [99, 102] around 100.5: half-width 1.5/100.5 < 5 %
    assert not stats.needs_more_repeats([100.0, 101.0, 99.0, 102.0, 100.0, 101.0], 0.05, cap=10)
    assert stats.needs_more_repeats([100.0, 101.0, 99.0, 102.0, 100.0, 101.0], 0.01, cap=10)
    wide = [60.0, 100.0, 140.0, 95.0, 105.0, 100.0]
    assert stats.needs_more_repeats(wide, 0.05, cap=10)
    assert stats.needs_more_repeats([*wide, float("nan")], 0.05, cap=8)  # a failed repeat: no value
    assert not stats.needs_more_repeats([*wide, float("nan")], 0.05, cap=7)
    with pytest.raises(ValueError):
        stats.needs_more_repeats(wide, 0.0, cap=10)


# --- events -> cells ------------------------------------------------------------------------


def runs_of(
    root: Path,
    framework: str,
    nodes: int,
    throughputs: list[float],
    *,
    share: float = 0.0,
    contention: list[dict[str, Any] | None] | None = None,
    model: str = "lenet",
    first_repeat: int = 0,
) -> list[Path]:
    """One run per value, every timed iteration at exactly that global throughput.

    Each rank computes ``(1 - share)`` of the step; the rest is exposed communication.
    """
    batch = 50
    paths = []
    for index, throughput in enumerate(throughputs):
        step = batch * nodes / throughput
        events = [
            iteration(rank, i, step, step * (1 - share), step * share, samples=batch, warmup=i == 0)
            for i in range(4)
            for rank in range(nodes)
        ]
        probe = contention[index] if contention else None
        paths.append(
            write_run(
                root,
                events,
                framework=framework,
                model=model,
                nodes=nodes,
                batch=batch,
                repeat=first_repeat + index,
                contention=probe,
            )
        )
    return paths


def tables(paths: list[Path]) -> aggregate.Tables:
    return aggregate.aggregate(paths)


def cell(cells: pd.DataFrame, name: str) -> pd.Series:
    rows = cells[cells["cell"].eq(name)]
    assert len(rows) == 1, name
    return rows.iloc[0]


def test_cells_summarise_repeats_with_hand_computed_intervals(tmp_path: Path) -> None:
    paths = [
        *runs_of(tmp_path, "torch", 1, [90.0, 110.0, 100.0]),
        *runs_of(tmp_path, "torch", 2, [170.0, 190.0, 180.0], share=0.1),
        write_run(tmp_path, [], framework="torch", nodes=2, batch=50, repeat=3, status="failed", reason="x"),
    ]
    cells = tables(paths).cells
    assert list(cells.columns) == list(CELL_COLUMNS)
    base = cell(cells, "torch/lenet/n1x1/b50")
    assert (base["repeats"], base["runs"], base["failed_runs"]) == (3, 3, 0)
    assert (base["throughput"], base["throughput_low"], base["throughput_high"]) == pytest.approx(
        (100, 90, 110)
    )
    assert base["interval"] == "range (low-n)" and base["coverage"] == pytest.approx(0.75)
    assert (base["speedup"], base["speedup_low"], base["ratio_interval"]) == (1.0, 1.0, "baseline")
    two = cell(cells, "torch/lenet/n2x1/b50")
    assert (two["repeats"], two["runs"], two["failed_runs"]) == (3, 4, 1)
    assert two["note"] == "1 failed run(s); low-n: 3 repeat(s)"
    assert two["baseline_nodes"] == 1 and two["ideal_speedup"] == 2
    # speedup 180/100; range ratio [170/110, 190/90]; efficiency half of each
    assert two["speedup"] == pytest.approx(1.8)
    assert (two["speedup_low"], two["speedup_high"]) == pytest.approx((170 / 110, 190 / 90))
    assert (two["efficiency"], two["efficiency_low"], two["efficiency_high"]) == pytest.approx(
        (0.9, 170 / 220, 190 / 180)
    )
    assert two["ratio_interval"] == "range ratio (low-n)"
    assert (
        two["time_per_sample_s"],
        two["time_per_sample_low"],
        two["time_per_sample_high"],
    ) == pytest.approx((1 / 180, 1 / 190, 1 / 170))
    assert two["exposed_comm_share"] == pytest.approx(0.1)
    assert pd.isna(two["flag"]) and not two["excluded"]


def test_cells_of_a_runs_table_from_an_older_version() -> None:
    # no network, dataset, scaling, contention or split columns: neutral values
    runs = pd.DataFrame(
        {
            "framework": "torch",
            "model": "lenet",
            "nodes": [1, 1, 2, 2],
            "ranks_per_node": 1,
            "batch_per_rank": 32,
            "repeat": [0, 1, 0, 1],
            "status": "ok",
            "throughput": [100.0, 102.0, 180.0, 184.0],
        }
    )
    two = cell(cells_of(runs), "torch/lenet/n2x1/b32")
    assert (two["network"], two["scaling"], two["global_batch"], two["repeats"]) == ("host", "weak", 64, 2)
    assert two["speedup"] == pytest.approx(182 / 101)
    assert not two["excluded"] and pd.isna(two["flag"])


# --- findings: no clear winner, flags, contention, what a user pays --------------------------


def test_overlapping_intervals_give_no_clear_winner(tmp_path: Path) -> None:
    paths = [
        *runs_of(tmp_path, "torch", 1, [95.0, 100.0, 105.0]),  # [95, 105]
        *runs_of(tmp_path, "tensorflow", 1, [101.0, 104.0, 110.0]),  # [101, 110]: overlaps
        *runs_of(tmp_path, "caffe", 1, [50.0, 52.0, 51.0]),
    ]
    row = tables(paths).findings.iloc[0]
    assert row["fastest_compute"] == NO_CLEAR_WINNER
    assert row["fastest_compute_leader"] == "tensorflow"
    assert (row["fastest_compute_throughput_low"], row["fastest_compute_throughput_high"]) == pytest.approx(
        (101.0, 110.0)
    )
    assert row["fastest_compute_runner_up"] == "torch"
    assert (
        row["fastest_compute_runner_up_throughput_low"],
        row["fastest_compute_runner_up_throughput_high"],
    ) == pytest.approx((95.0, 105.0))
    assert row["fastest_compute_note"].startswith(
        "intervals overlap: tensorflow 104 [101, 110] vs torch 100 [95, 105]"
    )


def test_separated_intervals_crown_the_winner(tmp_path: Path) -> None:
    paths = [
        *runs_of(tmp_path, "torch", 1, [95.0, 100.0, 105.0]),
        *runs_of(tmp_path, "tensorflow", 1, [106.0, 108.0, 110.0]),
    ]
    row = tables(paths).findings.iloc[0]
    assert row["fastest_compute"] == "tensorflow"
    assert row["fastest_compute_throughput"] == pytest.approx(108.0)


def superlinear_study(root: Path) -> list[Path]:
    # torch: 1 node [100, 101, 102] (a busy baseline), 2 nodes [250, 252, 254]:
    # efficiency 252/101/2 = 1.25, range ratio [250/102/2, 254/100/2] = [1.225, 1.27] > 1.
    # caffe: 1 node [150, 151, 152], 2 nodes [250, 252, 254]: efficiency 0.83, and just as
    # fast per sample at 2 nodes.
    return [
        *runs_of(root, "torch", 1, [100.0, 101.0, 102.0]),
        *runs_of(root, "torch", 2, [250.0, 252.0, 254.0], share=0.05),
        *runs_of(root, "caffe", 1, [150.0, 151.0, 152.0]),
        *runs_of(root, "caffe", 2, [250.0, 252.0, 254.0], share=0.2),
    ]


def test_a_superlinear_cell_is_flagged_and_not_crowned(tmp_path: Path) -> None:
    result = tables(superlinear_study(tmp_path))
    torch = cell(result.cells, "torch/lenet/n2x1/b50")
    assert torch["efficiency"] == pytest.approx(252 / 202)
    assert torch["efficiency_low"] == pytest.approx(250 / 204)
    assert torch["flag"].startswith(
        "superlinear: efficiency 1.25 [1.23, 1.27] (speedup 2.5 above the node ratio 2"
    )
    assert "busy baseline" in torch["flag"]
    assert torch["not_crowned_for"] == "best_scaling"
    caffe = cell(result.cells, "caffe/lenet/n2x1/b50")
    assert pd.isna(caffe["flag"])
    row = result.findings.iloc[0]
    # torch's value is too good to be true and better than caffe's: nobody can be ranked
    assert row["best_scaling"] == NO_CLEAR_WINNER
    assert row["best_scaling_leader"] == "caffe"
    assert (
        "flagged value(s) better than the leader's cannot be ranked: torch 1.25" in row["best_scaling_note"]
    )
    # the flag is about efficiency only: torch still wins the communication question
    assert row["best_communication"] == "torch"
    claim = result.claims.set_index("claim").loc["Caffe scales best"]
    assert claim["verdict"] == "inconclusive"
    assert "torch 1.25 [1.23, 1.27]" in claim["reason"]


@pytest.mark.parametrize(
    ("bigdl_at_2", "winner"), [([150.0, 170.0, 200.0], "torch"), ([170.0, 190.0, 215.0], None)]
)
def test_a_flagged_value_blocks_only_when_it_is_better(
    tmp_path: Path, bigdl_at_2: list[float], winner: str | None
) -> None:
    # torch: efficiency 180/100/2 = 0.9. bigdl scales against a fixed-overhead baseline
    # (flagged), as fast per sample as torch within its wide interval. At 0.85 it is
    # below torch and no threat (its flag marks a value too good, the truth is lower
    # still); at 0.95 it is above, and nobody can be ranked.
    paths = [
        *runs_of(tmp_path, "torch", 1, [99.0, 100.0, 101.0]),
        *runs_of(tmp_path, "torch", 2, [178.0, 180.0, 182.0], share=0.1),
        *runs_of(tmp_path, "bigdl", 1, [95.0, 100.0, 105.0], share=0.6),
        *runs_of(tmp_path, "bigdl", 2, bigdl_at_2, share=0.6),
    ]
    row = tables(paths).findings.iloc[0]
    assert row["best_scaling_leader"] == "torch"
    if winner:
        assert row["best_scaling"] == winner
        assert row["best_scaling_note"].startswith("the only unflagged candidate; bigdl not crowned: ")
    else:
        assert row["best_scaling"] == NO_CLEAR_WINNER
        assert row["best_scaling_note"].startswith(
            "flagged value(s) better than the leader's cannot be ranked: bigdl 0.95"
        )


def test_contended_runs_are_left_out_with_the_reason(tmp_path: Path) -> None:
    busy = {"other_busy_share": 0.45, "steal_share": 0.0, "contended": True}
    quiet = {"other_busy_share": 0.01, "steal_share": 0.0, "contended": False}
    paths = [
        # torch: three quiet repeats and one slowed by a neighbour (70/s)
        *runs_of(tmp_path, "torch", 1, [100.0, 101.0, 102.0, 70.0], contention=[quiet, quiet, quiet, busy]),
        # caffe: every repeat contended; its (meaningless) 500/s must not make it fastest
        *runs_of(tmp_path, "caffe", 1, [500.0, 510.0, 520.0], contention=[busy, busy, busy]),
    ]
    result = tables(paths)
    runs = result.runs.set_index("run_id")
    assert runs.loc["torch/lenet/n1x1/b50/r3", "contended"]
    assert runs.loc["torch/lenet/n1x1/b50/r3", "flag"].startswith("contended: other work took 45%")
    torch = cell(result.cells, "torch/lenet/n1x1/b50")
    assert (torch["repeats"], torch["contended_runs"]) == (3, 1)
    assert torch["throughput"] == pytest.approx(101.0)  # the median of the quiet repeats only
    assert torch["note"] == "1 contended repeat(s) left out; low-n: 3 repeat(s)"
    assert not torch["excluded"]
    caffe = cell(result.cells, "caffe/lenet/n1x1/b50")
    assert caffe["excluded"] and caffe["repeats"] == 0 and caffe["contended_runs"] == 3
    assert caffe["flag"].startswith("contended: all 3 ok repeat(s) ran beside other work")
    assert caffe["throughput"] == pytest.approx(510.0)  # kept for the figures, never for a verdict
    row = result.findings.iloc[0]
    assert row["fastest_compute"] == "torch"
    assert row["fastest_compute_note"].startswith("caffe left out: contended: all 3 ok repeat(s)")


def test_fixed_overhead_baseline_cannot_win_scaling(tmp_path: Path) -> None:
    # bigdl: one rank spends 60 % of its step "communicating" (Spark's per-iteration
    # cost); with weak scaling that cost is spread over a growing global batch, so its
    # efficiency looks perfect: 1 node [40, 41, 42], 2 nodes [80, 82, 84] -> 1.0.
    # It is also clearly slower per sample than torch at 2 nodes (82/s vs 180/s).
    paths = [
        *runs_of(tmp_path, "bigdl", 1, [40.0, 41.0, 42.0], share=0.6),
        *runs_of(tmp_path, "bigdl", 2, [80.0, 82.0, 84.0], share=0.6),
        *runs_of(tmp_path, "torch", 1, [100.0, 101.0, 102.0]),
        *runs_of(tmp_path, "torch", 2, [178.0, 180.0, 182.0], share=0.1),
    ]
    result = tables(paths)
    base = cell(result.cells, "bigdl/lenet/n1x1/b50")
    assert base["flag"].startswith("fixed overhead: exposed 'communication' is 0.6 of the step with one rank")
    assert base["not_crowned_for"] == "best_communication"
    scaled = cell(result.cells, "bigdl/lenet/n2x1/b50")
    assert "baseline is fixed overhead" in scaled["flag"]
    assert scaled["not_crowned_for"] == "best_scaling"
    row = result.findings.iloc[0]
    assert row["best_scaling"] == "torch"
    assert row["best_scaling_efficiency"] == pytest.approx(180 / 202)
    assert row["best_scaling_time_per_sample_s"] == pytest.approx(1 / 180)
    assert "bigdl left out: slower per sample" in row["best_scaling_note"]


def test_a_framework_slow_at_one_node_cannot_win_scaling_by_efficiency(tmp_path: Path) -> None:
    # caffe scales at 0.95 from a slow baseline (40/s); torch at 0.85 from 100/s. At 2 nodes
    # a user pays 1/76 s per sample with caffe and 1/170 s with torch: torch scales best.
    paths = [
        *runs_of(tmp_path, "caffe", 1, [39.0, 40.0, 41.0]),
        *runs_of(tmp_path, "caffe", 2, [75.0, 76.0, 77.0], share=0.05),
        *runs_of(tmp_path, "torch", 1, [99.0, 100.0, 101.0]),
        *runs_of(tmp_path, "torch", 2, [168.0, 170.0, 172.0], share=0.15),
    ]
    result = tables(paths)
    row = result.findings.iloc[0]
    assert cell(result.cells, "caffe/lenet/n2x1/b50")["efficiency"] == pytest.approx(0.95)
    assert row["best_scaling"] == "torch"
    assert row["best_scaling_efficiency"] == pytest.approx(0.85)
    assert row["best_scaling_note"].startswith("caffe left out: slower per sample: 0.0132 [0.013, 0.0133] s")
    claim = result.claims.set_index("claim").loc["Caffe scales best"]
    assert claim["verdict"] == "inconclusive"
    assert claim["reason"].startswith("Caffe left out: slower per sample")


# --- the seed's claims ----------------------------------------------------------------------


def test_claims_reproduced_contradicted_inconclusive(tmp_path: Path) -> None:
    paths = [
        # LeNet: caffe communicates best and bigdl loses the most time communicating;
        # bigdl computes slowest (contradicting "BigDL computes fastest").
        *runs_of(tmp_path, "caffe", 1, [100.0, 101.0, 102.0]),
        *runs_of(tmp_path, "caffe", 2, [190.0, 192.0, 194.0], share=0.05),
        *runs_of(tmp_path, "torch", 1, [120.0, 121.0, 122.0]),
        *runs_of(tmp_path, "torch", 2, [200.0, 202.0, 204.0], share=0.2),
        *runs_of(tmp_path, "bigdl", 1, [30.0, 31.0, 32.0]),
        *runs_of(tmp_path, "bigdl", 2, [50.0, 51.0, 52.0], share=0.5),
        # AutoEncoder: no caffe at all, and torch communicates better than bigdl
        *runs_of(tmp_path, "torch", 2, [100.0, 101.0, 102.0], share=0.1, model="autoencoder"),
        *runs_of(tmp_path, "bigdl", 2, [50.0, 51.0, 52.0], share=0.1, model="autoencoder"),
    ]
    claims = tables(paths).claims
    assert list(claims.columns) == list(target_claims.CLAIM_COLUMNS)
    lenet = claims[claims["model"].eq("lenet")].set_index("claim")
    assert list(lenet.index) == [claim.text for claim in CLAIMS]
    best_comm = lenet.loc["Caffe communicates best"]
    assert (best_comm["verdict"], best_comm["nodes"], best_comm["metric"]) == (
        "reproduced",
        2,
        "exposed_share",
    )
    assert (best_comm["value"], best_comm["low"], best_comm["high"]) == pytest.approx((0.05, 0.05, 0.05))
    assert best_comm["others"] == "torch 0.2 [0.2, 0.2]; bigdl 0.5 [0.5, 0.5]"
    assert lenet.loc["BigDL loses time in communication through Spark", "verdict"] == "reproduced"
    fastest = lenet.loc["BigDL computes fastest"]
    assert fastest["verdict"] == "contradicted"
    assert fastest["reason"] == "clearly beaten by torch 121 [120, 122]; caffe 101 [100, 102]"
    assert fastest["value"] == pytest.approx(31.0) and fastest["repeats"] == 3
    autoencoder = claims[claims["model"].eq("autoencoder")].set_index("claim")
    caffe = autoencoder.loc["Caffe communicates best"]
    assert caffe["verdict"] == "inconclusive"
    assert caffe["reason"] == "Caffe is not in this study for AutoEncoder"
    # equal shares: neither loses more time than the other
    spark = autoencoder.loc["BigDL loses time in communication through Spark"]
    assert spark["verdict"] == "inconclusive"
    assert spark["reason"].startswith("intervals overlap or unknown: torch 0.1")


def test_empty_runs_give_empty_tables() -> None:
    result = aggregate.aggregate([])
    assert result.cells.empty and list(result.cells.columns) == list(CELL_COLUMNS)
    assert result.findings.empty and list(result.findings.columns) == list(FINDINGS_COLUMNS)
    assert result.claims.empty and list(result.claims.columns) == list(target_claims.CLAIM_COLUMNS)


# --- the same tables from the workflow and from the command ---------------------------------

FAKE_SNAKEMAKE = """
import os, runpy, sys
from types import SimpleNamespace
events = sys.argv[2:]
os.makedirs("results/logs", exist_ok=True)  # Snakemake makes a rule's log folder
names = {names!r}
output = SimpleNamespace(**{{name: "results/" + file for name, file in names.items()}})
snakemake = SimpleNamespace(input=SimpleNamespace(events=events), output=output, params=SimpleNamespace(same_work_only=True), log=["results/logs/aggregate.log"])
runpy.run_path(sys.argv[1], init_globals={{"snakemake": snakemake}})
"""


def test_the_command_on_a_copied_folder_gives_the_workflows_tables(tmp_path: Path) -> None:
    study = tmp_path / "study"
    root = study / "results" / "runs"
    busy = {"other_busy_share": 0.5, "steal_share": 0.0, "contended": True}
    paths = [
        *runs_of(root, "torch", 1, [95.0, 100.0, 105.0, 60.0], contention=[None, None, None, busy]),
        *runs_of(root, "torch", 2, [170.0, 190.0, 180.0], share=0.1),
        *runs_of(root, "caffe", 1, [80.0, 82.0, 84.0]),
        *runs_of(root, "caffe", 2, [150.0, 155.0, 160.0], share=0.05),
        write_run(root, [], framework="caffe", nodes=2, batch=50, repeat=3, status="failed", reason="x"),
    ]
    relative = [str(path.relative_to(study)) for path in paths]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = FAKE_SNAKEMAKE.format(names=dict(aggregate.OUTPUT_FILES))
    # The aggregate rule's script, as Snakemake runs it (inputs in the rule's order).
    subprocess.run(
        [sys.executable, "-c", script, str(REPO / "scripts" / "aggregate.py"), *reversed(relative)],
        cwd=study,
        env=env,
        check=True,
    )
    copy = tmp_path / "copied"
    shutil.copytree(study / "results" / "runs", copy / "results" / "runs")
    done = subprocess.run(
        [sys.executable, "-m", "dlscale.analysis.aggregate", "results/runs", "--out", "tables"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "14 runs, 13 ok, 1 failed" in done.stdout
    for name, filename in aggregate.OUTPUT_FILES.items():
        ours, theirs = copy / "tables" / filename, study / "results" / filename
        if filename.endswith(".csv"):
            assert ours.read_text() == theirs.read_text(), name
        else:
            pd.testing.assert_frame_equal(pd.read_parquet(ours), pd.read_parquet(theirs))
    claims = pd.read_csv(copy / "tables" / "claims.csv")
    assert set(claims["claim"]) == {claim.text for claim in CLAIMS}
    runs = pd.read_csv(copy / "tables" / "runs.csv")
    assert runs["contended"].sum() == 1


def test_the_command_refuses_a_folder_without_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dlscale.analysis.aggregate", str(tmp_path), "--out", str(tmp_path / "out")],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "no events.jsonl found" in done.stderr
    assert not (tmp_path / "out").exists()
