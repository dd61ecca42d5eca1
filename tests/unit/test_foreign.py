"""The strict reader of files from elsewhere (dlscale.base.foreign) and the bounds a runs
table is held to (dlscale.plausible): what they refuse, and that honest input passes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dlscale import events, plausible
from dlscale.base import foreign, strictyaml

HEADER = "run_id,framework,model,nodes,ranks_per_node,world_size,batch_per_rank,status,step_s,compute_s,throughput,flops_per_sample"
ROW = "torch/lenet/n{n}x1/b64/r0,torch,lenet,{n},1,{n},64,ok,0.1,0.08,640.0,2300000.0"


def table(*rows: str) -> str:
    return "\n".join([HEADER, *rows]) + "\n"


def test_json_deeper_than_the_bound_is_found_before_parsing() -> None:
    assert foreign.json_depth_exceeds("[" * 200_000 + "]" * 200_000)
    assert not foreign.json_depth_exceeds("[" * 64 + "]" * 64)
    assert foreign.json_depth_exceeds("[" * 65 + "]" * 65)
    # many brackets, shallow (a run_start with long lists, brackets inside strings): read
    wide = json.dumps({"hosts": [[f"cn{i}"] for i in range(500)], "note": "[[[[" * 100})
    assert not foreign.json_depth_exceeds(wide)
    with pytest.raises(foreign.Refused, match=r"^line 3: JSON nested deeper than 64 levels"):
        foreign.loads_json('{"a": ' + "[" * 100 + "]" * 100 + "}", "line 3")
    assert foreign.loads_json(wide, "x")["hosts"][499] == ["cn499"]


def test_only_a_regular_file_is_opened(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text('{"a": 1}')
    assert foreign.read_json(plain, 100) == {"a": 1}
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(plain)
    (tmp_path / "folder").mkdir()
    for name, rule in (("fifo", "a FIFO"), ("link", "a symbolic link"), ("folder", "a folder")):
        with pytest.raises(foreign.Refused, match=rule):
            foreign.read_bytes(tmp_path / name, 100)
    with pytest.raises(foreign.Refused, match="8 bytes, over the 4"):
        foreign.read_bytes(plain, 4)
    plain.write_bytes(b"ab\xffcd")
    with pytest.raises(foreign.Refused, match=r"plain.json.*not UTF-8 text \(byte 2"):
        foreign.read_text(plain, 100)


def test_yaml_nested_deeper_than_the_bound_is_refused_naming_the_line() -> None:
    with pytest.raises(strictyaml.RefusedYAML, match="nested deeper than 64"):
        strictyaml.load("a: 1\nb: " + "[" * 1000 + "]" * 1000, "x.yaml")
    nested: list = []
    for _ in range(59):
        nested = [nested]
    assert strictyaml.load("a: " + "[" * 60 + "]" * 60) == {"a": nested}  # 61 levels with the mapping


def test_an_honest_runs_table_passes() -> None:
    assert plausible.check_runs_table(table(ROW.format(n=1), ROW.format(n=2)), "runs.csv") == 2
    failed = "torch/lenet/n2x1/b64/r1,torch,lenet,2,1,2,64,failed,,,,"
    assert plausible.check_runs_table(table(ROW.format(n=1), failed), "runs.csv") == 2


@pytest.mark.parametrize(
    ("row", "rule"),
    [
        (ROW.format(n="1.5"), "nodes '1.5' is not a whole number from 1 to 9,999,999"),
        (ROW.format(n="0"), "nodes '0' is not a whole number"),
        (ROW.format(n=1).replace(",ok,", ",OK,"), "status 'OK' is not one of ok, failed"),
        (ROW.format(n=1).replace(",640.0,", ",nan,"), "throughput 'nan' is not a finite number"),
        (ROW.format(n=1).replace(",640.0,", ",,"), "an ok run with throughput ''"),
        (ROW.format(n=1).replace(",0.1,0.08,", ",0.1,0.25,"), "compute_s 0.25 is longer than 2 x the step"),
        (ROW.format(n=1).replace(",640.0,", ",1e12,"), "FLOP/s a rank, over the 1e+16"),
        (ROW.format(n=1) + ",extra", "cells in a row of"),
    ],
)
def test_a_row_that_cannot_be_true_is_refused_naming_its_line(row: str, rule: str) -> None:
    with pytest.raises(foreign.Refused, match="^runs.csv line 3: ") as err:
        plausible.check_runs_table(table(ROW.format(n=4), row), "runs.csv")
    assert rule in str(err.value)


def test_a_run_twice_is_refused() -> None:
    with pytest.raises(foreign.Refused, match="line 3: run id 'torch/lenet/n1x1/b64/r0' is also on line 2"):
        plausible.check_runs_table(table(ROW.format(n=1), ROW.format(n=1)), "runs.csv")


def test_integers_beyond_a_float_are_refused_naming_their_key() -> None:
    plausible.check_bounded_ints({"a": [1, 2**53], "b": {"c": 3.5}}, "f")
    with pytest.raises(foreign.Refused, match=r"key 'b\.c\.1': an integer of 401 digits"):
        plausible.check_bounded_ints({"a": 1, "b": {"c": [0, 10**400]}}, "f")


def test_an_events_line_kept_whole_is_held_to_the_depth_bound(tmp_path: Path) -> None:
    """An iteration event keeps only its numbers: a deep extra field there is read (the
    decoder's own bound stops 200,000 levels); a run_end, kept whole, may not nest past 64."""
    deep = "[" * 100 + "]" * 100
    base = {"event": "iteration", "rank": 0, "iteration": 0, "samples": 64, "step_s": 0.1,
            "compute_s": None, "comm_s": None, "loss": None, "time": 1.0}  # fmt: skip
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(base)[:-1] + f', "x": {deep}}}\n')
    assert [event["x"] is not None for _, event in events.iter_numbered(path)] == [True]
    path.write_text(json.dumps(base)[:-1] + f', "x": {"[" * 200_000 + "]" * 200_000}}}\n')
    with pytest.raises(events.RefusedEvents, match=r"events.jsonl:1: JSON nested deeper than 64"):
        list(events.iter_numbered(path))
    end = {"event": "run_end", "status": "ok", "reason": None, "time": 2.0}
    path.write_text(json.dumps(base) + "\n" + json.dumps(end)[:-1] + f', "x": {deep}}}\n')
    with pytest.raises(events.RefusedEvents, match=r"events.jsonl:2: JSON nested deeper than 64"):
        list(events.iter_numbered(path))


RICH_HEADER = (
    "run_id,framework,model,nodes,ranks_per_node,world_size,batch_per_rank,global_batch,status,step_s,step_s_min,"
    "step_s_max,throughput,throughput_min,throughput_max,evals,quality_metric,final_quality,target_metric,target_value"
)
RICH_ROW = (
    "torch/lenet/n1x1/b64/r0,torch,lenet,1,1,1,64,64,ok,0.1,0.08,0.125,640.0,512.0,800.0,4,top1,0.91,top1,0.9"
)


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({",0.91,": ",1.5,"}, "final_quality '1.5' of metric 'top1' is a share: from 0 to 1"),
        ({",top1,0.91,": ",mse,-0.01,"}, "final_quality '-0.01' of metric 'mse' is a share"),
        ({",top1,0.91,top1,0.9": ",top1,0.91,top1,2"}, "target_value '2' of metric 'top1' is a share"),
        ({",4,top1,": ",-3,top1,"}, "evals '-3' is not a whole number from 0"),
        ({",4,top1,": ",2.5,top1,"}, "evals '2.5' is not a whole number from 0"),
        (
            {",640.0,": ",900.0,"},
            "throughput 900 is above its throughput_max 800: a median within its extremes",
        ),
        ({",0.1,0.08,0.125,": ",0.2,0.08,0.125,"}, "step_s 0.2 is above its step_s_max 0.125"),
        (
            {",640.0,512.0,800.0,": ",900.0,512.0,950.0,"},
            "throughput 900 samples/s is more than global_batch 64 in its fastest step (0.08 s): 800 samples/s at most",
        ),
    ],
)
def test_a_row_whose_columns_contradict_each_other_is_refused(change: dict[str, str], rule: str) -> None:
    """A table from elsewhere whose throughput, quality or counts no run can have given:
    compare took a top-1 of 1.5, evaluations counted -3 times and a throughput above the
    fastest step's (each edited into a real demo table) as numbers, 2026-12-06."""
    assert plausible.check_runs_table("\n".join([RICH_HEADER, RICH_ROW]) + "\n", "runs.csv") == 1
    row = RICH_ROW
    for old, new in change.items():
        assert old in row
        row = row.replace(old, new, 1)
    with pytest.raises(foreign.Refused, match="^runs.csv line 2: ") as err:
        plausible.check_runs_table("\n".join([RICH_HEADER, row]) + "\n", "runs.csv")
    assert rule in str(err.value)


def test_a_quality_of_a_metric_that_is_no_share_is_only_held_to_being_a_number() -> None:
    row = RICH_ROW.replace(",top1,0.91,top1,0.9", ",bleu,31.5,bleu,30")
    assert plausible.check_runs_table("\n".join([RICH_HEADER, row]) + "\n", "runs.csv") == 1
