"""dlscale.analysis.speedup: one comparison group and one baseline rule, for runs and cells alike."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlscale.analysis import cells, convergence, findings, speedup


def _runs(rows: list[tuple[int, int, str, float, bool]]) -> pd.DataFrame:
    """Runs of one group: (nodes, repeat, status, throughput, contended)."""
    return pd.DataFrame(
        [
            {
                "run_id": f"torch/lenet/n{nodes}x1/b32/r{repeat}",
                "framework": "torch",
                "model": "lenet",
                "dataset": "mnist",
                "scaling": "weak",
                "network": "host",
                "nodes": nodes,
                "ranks_per_node": 1,
                "world_size": nodes,
                "batch_per_rank": 32,
                "global_batch": 32 * nodes,
                "repeat": repeat,
                "status": status,
                "throughput": throughput if status == "ok" else np.nan,
                "contended": contended,
                "exposed_comm_share": 0.0,
            }
            for nodes, repeat, status, throughput, contended in rows
        ]
    )


def test_the_comparison_group_has_one_home() -> None:
    assert speedup.SPEEDUP_GROUP == ("framework", *speedup.COMPARISON_GROUP)
    assert cells.CELL_KEYS == (*speedup.SPEEDUP_GROUP, "nodes")
    assert not hasattr(convergence, "SETUP") and not hasattr(findings, "SETUP")
    assert convergence.TIME_TO_TARGET_COLUMNS[: len(speedup.COMPARISON_GROUP)] == speedup.COMPARISON_GROUP


def test_a_contended_baseline_gives_way_to_the_next_uncontended_count() -> None:
    runs = _runs(
        [
            (1, 0, "ok", 50.0, True),  # a busy 1-node run would make 2 nodes look superlinear
            (2, 0, "ok", 180.0, False),
            (2, 1, "ok", 200.0, False),
            (4, 0, "ok", 360.0, False),
        ]
    )
    out = speedup.add_speedup(runs)
    assert set(out["baseline_nodes"]) == {2.0}
    assert out["speedup"].tolist() == [50 / 190, 180 / 190, 200 / 190, 360 / 190]
    table = cells.cells(runs)
    assert set(table["baseline_nodes"]) == {2}
    four = table[table["nodes"].eq(4)].iloc[0]
    assert four["speedup"] == 360 / 190 and four["efficiency"] == 360 / 190 / 2


def test_a_failed_smallest_count_makes_the_next_one_the_baseline() -> None:
    runs = _runs([(1, 0, "failed", 0.0, False), (2, 0, "ok", 100.0, False), (4, 0, "ok", 150.0, False)])
    out = speedup.add_speedup(runs)
    assert out["baseline_nodes"].isna().tolist() == [True, False, False]
    assert out["efficiency"].tolist()[1:] == [1.0, 0.75]
    assert cells.cells(runs).set_index("nodes")["baseline_nodes"].dropna().to_dict() == {2: 2, 4: 2}


def test_an_all_contended_group_is_its_own_baseline() -> None:
    runs = _runs([(1, 0, "ok", 100.0, True), (2, 0, "ok", 150.0, True)])
    assert speedup.add_speedup(runs)["baseline_nodes"].tolist() == [1.0, 1.0]
    assert cells.cells(runs)["baseline_nodes"].tolist() == [1, 1]


def test_runs_and_cells_differ_only_in_the_numerator() -> None:
    """The runs table divides each repeat's throughput by the baseline's median; the cell
    divides its median by the same median, so the cell's speedup is the median of its runs'."""
    runs = _runs([(1, r, "ok", t, False) for r, t in enumerate((100.0, 110.0, 90.0))])
    runs = pd.concat([runs, _runs([(2, r, "ok", t, False) for r, t in enumerate((150.0, 210.0, 180.0))])])
    per_run = speedup.add_speedup(runs.reset_index(drop=True))
    two = cells.cells(runs)
    two = two[two["nodes"].eq(2)].iloc[0]
    assert two["speedup"] == per_run.loc[per_run["nodes"].eq(2), "speedup"].median() == 1.8


def test_strong_scaling_groups_by_the_global_batch() -> None:
    runs = _runs([(1, 0, "ok", 100.0, False), (2, 0, "ok", 150.0, False)])
    runs["scaling"] = "strong"
    runs["global_batch"] = 64
    runs["batch_per_rank"] = [64, 32]
    assert speedup.batch_key(runs).tolist() == [64, 64]
    assert speedup.add_speedup(runs)["speedup"].tolist() == [1.0, 1.5]
