"""Where a study's time goes (dlscale.analysis.wallsplit) from hand-made events files:
every part of a run's wall from its events, start-up by the parts a runner records, the
gaps and overlaps between runs, and the table the aggregation writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers.events import run_start
from helpers.wall_split import assert_adds_up

from dlscale.analysis import aggregate, snakelog
from dlscale.analysis.readevents import read_run
from dlscale.analysis.wallsplit import ALL, STARTUP_PARTS, WALL_SPLIT_COLUMNS, run_times, wall_split
from dlscale.events import STARTUP_SECONDS, validate_event, write_atomic


def _step(rank: int, index: int, step: float, ends: float, warmup: bool = False, **extra: Any) -> dict:
    event = {
        "event": "iteration",
        "rank": rank,
        "iteration": index,
        "samples": 64,
        "step_s": step,
        "compute_s": None,
        "comm_s": None,
        "loss": 2.0,
        "time": ends,
        **extra,
    }
    if warmup:
        event["warmup"] = True
    return event


def _eval(iteration: int, seconds: float, ends: float) -> dict:
    return {
        "event": "eval",
        "rank": 0,
        "iteration": iteration,
        "split": "test",
        "metric": "top1",
        "value": 0.5,
        "samples": 100,
        "eval_s": seconds,
        "train_s": 1.0,
        "time": ends,
    }


def _write(
    root: Path, began: float, ended: float, middle: list[dict], status: str = "ok", **run: Any
) -> Path:
    start = {**run_start(**run), "time": began}
    end = {
        "event": "run_end",
        "status": status,
        "reason": None if status == "ok" else "killed",
        "time": ended,
    }
    return write_atomic(root / start["run_id"] / "events.jsonl", [start, *middle, end])


def _bigdl_like(root: Path) -> Path:
    """Started at 1000, first step from 1010 (Spark 3 s + context 2 s + data 1 s recorded),
    a 0.5 s warm-up step, two timed steps of 1 s, a 2 s evaluation, ended at 1020."""
    parts = {"spark_cluster_s": 3.0, "spark_context_s": 2.0, "input_load_s": 1.0}
    return _write(
        root,
        1000.0,
        1020.0,
        [
            _step(0, 0, 0.5, 1010.5, warmup=True, **parts),
            _step(1, 0, 0.7, 1010.7, warmup=True),  # another rank's steps are not the run's time
            _step(0, 1, 1.0, 1012.0),
            _step(1, 1, 1.2, 1012.2),
            _step(0, 2, 1.0, 1013.0),
            _step(1, 2, 1.0, 1013.0),
            _eval(3, 2.0, 1015.5),
        ],
        nodes=2,
        framework="bigdl",
    )


def test_a_run_split_into_its_parts(tmp_path):
    times = run_times(read_run(_bigdl_like(tmp_path)))
    assert times["wall_s"] == pytest.approx(20.0)
    assert times["startup_s"] == pytest.approx(10.0)
    assert times["startup_daemons_s"] == 3.0
    assert times["startup_rendezvous_s"] == 2.0
    assert times["startup_data_s"] == 1.0
    assert times["startup_framework_s"] == 0.0
    assert times["startup_other_s"] == pytest.approx(4.0)
    assert times["warmup_s"] == pytest.approx(0.5)
    assert times["timed_s"] == pytest.approx(2.0)
    assert times["eval_s"] == pytest.approx(2.0)
    assert times["other_s"] == pytest.approx(5.5)


def test_an_evaluation_before_the_first_step_is_not_start_up(tmp_path):
    path = _write(
        tmp_path,
        1000.0,
        1010.0,
        [_eval(0, 3.0, 1004.0), _step(0, 0, 1.0, 1006.0, setup_s=1.5), _step(0, 1, 1.0, 1007.0)],
        framework="tensorflow",
    )
    times = run_times(read_run(path))
    assert times["startup_s"] == pytest.approx(2.0)  # 5 s to the first step, 3 of them evaluating
    assert times["startup_framework_s"] == 1.5
    assert times["startup_other_s"] == pytest.approx(0.5)
    assert times["eval_s"] == 3.0
    assert times["other_s"] == pytest.approx(10.0 - 2.0 - 1.0 - 1.0 - 3.0)


def test_every_recorded_start_up_part_has_one_column_and_the_schema_admits_it():
    assert set(STARTUP_PARTS) == set(STARTUP_SECONDS)
    event = _step(0, 0, 1.0, 1.0, warmup=True, **dict.fromkeys(STARTUP_SECONDS, 0.25))
    validate_event(event)
    with pytest.raises(Exception, match="import_s"):
        validate_event({**event, "import_s": -1.0})


def test_torch_and_caffe_start_up_parts_fall_into_their_columns(tmp_path):
    """Fields that share a column are summed; what no part covers stays other."""
    parts = {"import_s": 1.5, "model_setup_s": 0.25, "rendezvous_s": 0.5, "data_setup_s": 0.75}
    path = _write(
        tmp_path,
        1000.0,
        1010.0,
        [_step(0, 0, 1.0, 1005.0, **parts), _step(0, 1, 1.0, 1006.0)],
        framework="caffe",
    )
    times = run_times(read_run(path))
    assert times["startup_s"] == pytest.approx(4.0)
    assert times["startup_framework_s"] == pytest.approx(1.75)
    assert times["startup_rendezvous_s"] == 0.5
    assert times["startup_data_s"] == 0.75
    assert times["startup_daemons_s"] == 0.0
    assert times["startup_other_s"] == pytest.approx(1.0)


def test_a_run_that_never_stepped_spent_its_wall_starting(tmp_path):
    times = run_times(read_run(_write(tmp_path, 1000.0, 1030.0, [], status="failed")))
    assert times["failed"]
    assert times["startup_s"] == times["startup_other_s"] == pytest.approx(30.0)
    assert times["timed_s"] == times["warmup_s"] == times["other_s"] == 0.0


def _record(run_id: str, framework: str, began: float, ended: float, timed: float) -> dict:
    wall = ended - began
    parts = dict.fromkeys(STARTUP_PARTS.values(), 0.0)
    return {
        "run_id": run_id,
        "framework": framework,
        "failed": False,
        "began": began,
        "ended": ended,
        "wall_s": wall,
        "startup_s": wall - timed,
        **parts,
        "startup_other_s": wall - timed,
        "warmup_s": 0.0,
        "timed_s": timed,
        "eval_s": 0.0,
        "other_s": 0.0,
    }


def test_gaps_and_overlaps_between_runs_add_up_to_the_span():
    table = wall_split(
        [
            _record("c", "torch", 18.0, 25.0, 3.0),  # begins 2 s before b ends: overlap 2
            _record("a", "torch", 0.0, 10.0, 5.0),
            _record("b", "caffe", 15.0, 20.0, 1.0),  # 5 s after a: a gap of 5
        ]
    ).set_index("framework")
    assert list(table.index) == ["caffe", "torch", ALL]
    assert table.loc["caffe", "gap_s"] == 5.0
    assert table.loc["torch", "gap_s"] == 0.0
    assert table.loc["torch", "overlap_s"] == 2.0
    assert table.loc[ALL, "total_s"] == 25.0  # first start to last end
    assert table.loc[ALL, "wall_s"] == 22.0
    assert table.loc[ALL, "timed_share"] == pytest.approx(9.0 / 22.0, abs=1e-3)
    assert table.loc["torch", "runs"] == 2


def test_empty_study_has_the_columns():
    assert list(wall_split([]).columns) == list(WALL_SPLIT_COLUMNS)


def test_the_aggregation_writes_the_table_and_its_parts_add_up(tmp_path):
    runs = tmp_path / "runs"
    _bigdl_like(runs)
    _write(runs, 1030.0, 1040.0, [_step(0, 0, 1.0, 1032.0, warmup=True), _step(0, 1, 2.0, 1035.0)])
    out = tmp_path / "out"
    assert aggregate.main([str(runs), "--out", str(out)]) == 0
    table = pd.read_csv(out / "wall_split.csv").set_index("framework")
    assert list(table.index) == ["bigdl", "torch", ALL]
    assert table.loc["torch", "gap_s"] == pytest.approx(10.0)  # 1020 -> 1030
    assert table.loc[ALL, "total_s"] == pytest.approx(40.0)
    assert_adds_up(table)


SNAKEMAKE_LOG = """\
Building DAG of jobs...
[Fri Dec  4 15:06:16 2026]
Job 56: Making BLAS openblas available to Caffe (once per machine)
Reason: Missing output files: x
[Fri Dec  4 15:06:18 2026]
Finished jobid: 56 (Rule: caffe_blas)
[Fri Dec  4 15:06:20 2026]
rule train:
    output: results/runs/torch/lenet/n1x1/b64/r0/events.jsonl
    jobid: 7
[Fri Dec  4 15:06:21 2026]
localrule tune_run:
    jobid: 8
[Fri Dec  4 15:06:30 2026]
Finished jobid: 7 (Rule: train)
[Fri Dec  4 15:06:34 2026]
Finished jobid: 8 (Rule: tune_run)
[Fri Dec  4 15:06:35 2026]
localrule all:
    jobid: 0
[Fri Dec  4 15:06:35 2026]
Finished jobid: 0 (Rule: all)
"""


def test_snakemakes_log_says_what_ran_between_the_runs(tmp_path):
    done = snakelog.jobs(SNAKEMAKE_LOG.splitlines())
    assert [(job.jobid, job.rule, job.end - job.start) for job in done] == [
        (56, "caffe_blas", 2.0),
        (7, "train", 10.0),
        (8, "tune_run", 13.0),
        (0, "all", 0.0),
    ]
    table = snakelog.time_split(done).set_index("rule")
    assert table.loc["tune_run", "outside_runs_s"] == 4.0  # 15:06:30 to :34, no run beside it
    assert table.loc["runs", "busy_s"] == 10.0
    assert table.loc["other jobs", "busy_s"] == 6.0  # caffe_blas 2 + tune_run's 4 alone
    assert table.loc["no job", "busy_s"] == 2.0  # 15:06:18 to :20
    assert table.loc["invocation", "busy_s"] == 18.0 == 10.0 + 6.0 + 2.0
    log = tmp_path / "run.snakemake.log"
    log.write_text(SNAKEMAKE_LOG, encoding="utf-8")
    assert snakelog.main([str(log)]) == 0
    empty = tmp_path / "empty.log"
    empty.write_text("Building DAG of jobs...\n", encoding="utf-8")
    assert snakelog.main([str(empty)]) == 2
