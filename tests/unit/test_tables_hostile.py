"""Events files that no real run writes must never become numbers (issue 17).

Each case was once accepted by ``dlscale.analysis.tables.load_events`` and gave a wrong row: ranks
outside the world, a rank missing from every iteration, samples that are not the batch,
a baseline without throughput, a run id that disagrees with its folder or its own fields,
two files of one run, fields of the wrong type. A structural impossibility is an
``EventError`` naming ``FILE:LINE``; what a failing run can leave (a rank that reported no
iteration N) is a failed row with that reason. Files are written here line by line, not
through ``dlscale.events.write_atomic`` (which refuses some of them itself).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers.events import every_rank, iteration, put, run_end, run_start
from helpers.paths import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlscale.analysis import aggregate, eventchecks, speedup, tables
from dlscale.events import EVENT_SCHEMAS, EventError, PartWriter, validate_event, write_atomic


def refused(path: Path, line: int, message: str, *more: Path) -> None:
    """load_events raises EventError starting with ``path:line:`` and containing ``message``."""
    with pytest.raises(EventError) as caught:
        tables.load_events([*more, path])
    text = str(caught.value)
    assert text.startswith(f"{path}:{line}: "), text
    assert message in text, text


def only(runs: pd.DataFrame) -> pd.Series:
    assert len(runs) == 1
    return runs.iloc[0]


# --- times: a run's events on the wall its run_start and run_end bracket ------------------

TIMED_RUN = [
    run_start(),
    iteration(0, 0, 0.5),  # ends at 1011.0 (helpers.events.STEPS_BEGIN + 1): after 10 s of start-up
    iteration(0, 1, 0.5),
    {"event": "eval", "rank": 0, "iteration": 1, "split": "test", "metric": "top1", "value": 0.5,
     "samples": 10000, "eval_s": 2.0, "train_s": 1.0, "time": 1013.0},
    run_end(),
]  # fmt: skip


def _edited(tmp_path: Path, index: int, **fields: Any) -> Path:
    events = [dict(event) for event in TIMED_RUN]
    events[index].update(fields)
    return put(tmp_path, events)


@pytest.mark.parametrize(
    ("index", "fields", "line", "message"),
    [
        (4, {"time": 995.0}, 5, "run_end at 995.0 is before its run_start at 1000.0"),
        (3, {"time": 900.0}, 4, "eval event: the evaluation from 898.0 to 900.0 lies outside its run"),
        (3, {"time": 1200.0}, 4, "eval event: the evaluation from 1198.0 to 1200.0 lies outside its run"),
        (3, {"eval_s": 1000.0}, 4, "eval event: the evaluation from 13.0 to 1013.0 lies outside its run"),
        (1, {"time": 950.0}, 2, "iteration event: rank 0's first step, from 949.5 to 950.0, lies outside"),
        (2, {"step_s": 150.0}, 5, "rank 0's steps and evaluations take 152.5 s, longer than the run's 100 s"),
        (2, {"time": 1010.75}, 3, "rank 0's step ends at 1010.75, before its step of line 2 ended (1011.0)"),
        (2, {"time": 1100.5}, 3, "rank 0's step ends at 1100.5, after its run's run_end at 1100.0"),
    ],
)
def test_times_outside_the_run_they_belong_to_are_an_error(
    tmp_path: Path, index: int, fields: dict[str, Any], line: int, message: str
) -> None:
    """Each edit once gave the wall split a number no run has: a negative wall (run_end
    before run_start), a negative start-up (a first step or an evaluation before the run),
    and "other" time of -998 s (an evaluation longer than its run), 2026-12-06."""
    only(tables.load_events([put(tmp_path, TIMED_RUN)])[0])  # the run as written loads
    refused(_edited(tmp_path, index, **fields), line, message)


def test_a_ranks_steps_end_in_the_order_it_wrote_them(tmp_path: Path) -> None:
    """Every rank's own clock, compared within the rank only: two ranks' steps interleave in
    a merged file and may end out of order between ranks (loads); one rank's step that ends
    before its previous one did is an error naming its line; a step without a time is not
    compared (a native log line without a stamp)."""
    ranks = [iteration(rank, i, 0.5) for i in range(3) for rank in range(2)]
    ranks[1]["time"] = 1010.75  # rank 1 ends its steps before rank 0 does: another clock, fine
    ranks[3]["time"] = 1011.75
    events = [run_start(nodes=2), *ranks, run_end()]
    only(tables.load_events([put(tmp_path, events)])[0])
    events[4] = {**events[4], "time": None}  # rank 1's iteration 1 without a time
    only(tables.load_events([put(tmp_path, events)])[0])
    events[6] = {**events[6], "time": 1010.5}  # rank 1's iteration 2 ends before its iteration 0
    refused(
        put(tmp_path, events), 7, "rank 1's step ends at 1010.5, before its step of line 3 ended (1010.75)"
    )


# --- ranks -------------------------------------------------------------------------------


def test_a_rank_outside_the_world_is_an_error(tmp_path: Path) -> None:
    # rank 2 in a world of 2 once added its samples: throughput x1.5, efficiency 1.5.
    events = [run_start(nodes=2), *every_rank(2), iteration(2, 1, 0.5), run_end()]
    path = put(tmp_path, events)
    refused(path, 8, "iteration event of rank 2 in a world of 2 (ranks are 0 <= rank < 2)")


def test_a_rank_outside_the_world_is_an_error_in_a_failed_run_too(tmp_path: Path) -> None:
    events = [run_start(nodes=2), iteration(0, 0, 0.5), iteration(5, 0, 0.5), run_end("failed", "x")]
    refused(put(tmp_path, events), 3, "rank 5 in a world of 2")


def test_a_rank_missing_from_every_iteration_fails_the_run(tmp_path: Path) -> None:
    # Rank 1 reported nothing: the run once said ok at half the throughput.
    events = [run_start(nodes=2), *every_rank(1), run_end()]
    row = only(tables.load_events([put(tmp_path, events)])[0])
    assert (row["status"], row["reason"]) == ("failed", "rank 1 reported no iteration 0")
    assert math.isnan(row["throughput"]) and math.isnan(row["efficiency"])


def test_the_iterations_a_spec_promises_must_all_be_there(tmp_path: Path) -> None:
    events = [run_start(total=5), *every_rank(1, count=4), run_end()]
    row = only(tables.load_events([put(tmp_path, events)])[0])
    assert (row["status"], row["reason"]) == ("failed", "rank 0 reported no iteration 4")


# --- samples -----------------------------------------------------------------------------


def test_samples_other_than_the_batch_are_an_error(tmp_path: Path) -> None:
    # 6,400 samples for a batch of 64 once made an efficiency of 100.
    events = [run_start(), iteration(0, 0, 0.5), iteration(0, 1, 0.5, samples=6400), run_end()]
    refused(put(tmp_path, events), 3, "rank 0 reports samples=6400, not its batch of 64")


def test_zero_samples_at_the_baseline_are_an_error(tmp_path: Path) -> None:
    # samples 0 at one node once made speedup and efficiency infinite, and a "best scaling".
    base = put(tmp_path, [run_start(), *every_rank(1, batch=0), run_end()])
    two = put(tmp_path, [run_start(nodes=2), *every_rank(2), run_end()])
    refused(base, 2, "rank 0 reports samples=0, not its batch of 64", two)


def test_rank0_alone_with_the_global_batch_is_a_run(tmp_path: Path) -> None:
    # BigDL and TensorFlow ps: the driver / chief reports one global number per step.
    one = put(tmp_path, [run_start(framework="bigdl"), *every_rank(1, step=0.5), run_end()])
    two = put(
        tmp_path, [run_start(framework="bigdl", nodes=2), *every_rank(1, batch=128, step=0.8), run_end()]
    )
    runs, _ = tables.load_events([one, two])
    row = runs.set_index("nodes").loc[2]
    assert row["status"] == "ok"
    assert row["throughput"] == pytest.approx(128 / 0.8)
    assert row["efficiency"] == pytest.approx((128 / 0.8) / (64 / 0.5) / 2)


@pytest.mark.parametrize(
    ("iterations", "line", "message"),
    [
        # rank 1 alone with the global batch: not rank 0, so its samples are not its batch
        ([iteration(1, 0, 0.5, samples=128)], 2, "rank 1 reports samples=128, not its batch of 64"),
        # rank 0 reports the global batch, and rank 1 its batch as well: counted twice
        (
            [iteration(0, 0, 0.5, samples=128), iteration(1, 0, 0.5, samples=64)],
            3,
            "rank 1 reports an iteration, but rank 0 reports the global batch for the whole run (line 2)",
        ),
        # every rank reporting the global batch
        (
            [iteration(0, 0, 0.5, samples=128), iteration(1, 0, 0.5, samples=128)],
            3,
            "rank 1 reports an iteration, but rank 0 reports the global batch",
        ),
        # rank 0 switching from the global batch to its own
        (
            [iteration(0, 0, 0.5, samples=128), iteration(0, 1, 0.5, samples=64)],
            3,
            "samples=64, but rank 0 reports the global batch for the whole run",
        ),
        # its own batch first, then the global batch
        (
            [iteration(0, 0, 0.5), iteration(1, 0, 0.5), iteration(0, 1, 0.5, samples=128)],
            4,
            "rank 0 reports samples=128, not its batch of 64",
        ),
    ],
)
def test_only_the_two_legitimate_shapes_of_samples(
    tmp_path: Path, iterations: list[dict[str, Any]], line: int, message: str
) -> None:
    path = put(tmp_path, [run_start(nodes=2), *iterations, run_end()])
    refused(path, line, message)


# --- baselines ----------------------------------------------------------------------------


def test_a_baseline_without_throughput_is_never_a_baseline(tmp_path: Path) -> None:
    # Every step of 0 s: no throughput at all, so no speedup can be measured against it.
    base = put(tmp_path, [run_start(), *every_rank(1, step=0.0), run_end()])
    two = put(tmp_path, [run_start(nodes=2), *every_rank(2), run_end()])
    tables = aggregate.aggregate([base, two])
    runs = tables.runs.set_index("nodes")
    assert (runs.loc[1, "status"], runs.loc[1, "reason"]) == (
        "failed",
        "no throughput: every timed step took 0 s",
    )
    assert runs.loc[2, "baseline_nodes"] == 2  # the next node count, as for any failed baseline
    for table in (tables.runs, tables.cells, tables.findings):
        numbers = table.select_dtypes("number").to_numpy(dtype="float64")
        assert not np.isinf(numbers).any()


@pytest.mark.parametrize("throughput", [0.0, float("nan"), float("inf")])
def test_add_speedup_never_divides_by_a_baseline_without_throughput(throughput: float) -> None:
    runs = pd.DataFrame(
        {
            "framework": "torch",
            "model": "lenet",
            "dataset": "mnist",
            "scaling": "weak",
            "network": "host",
            "ranks_per_node": 1,
            "batch_per_rank": 64,
            "global_batch": [64, 128],
            "nodes": [1, 2],
            "status": "ok",
            "throughput": [throughput, 200.0],
            "contended": False,
        }
    )
    out = speedup.add_speedup(runs)
    assert math.isnan(out.loc[0, "speedup"]) and math.isnan(out.loc[0, "efficiency"])
    assert (out.loc[1, "baseline_nodes"], out.loc[1, "speedup"]) == (2, 1.0)


# --- run ids --------------------------------------------------------------------------------


def test_a_run_id_that_is_not_its_folder_is_an_error(tmp_path: Path) -> None:
    path = put(tmp_path, [run_start(), *every_rank(1), run_end()], at="torch/lenet/n2x1/b64/r0")
    refused(path, 1, "run_id torch/lenet/n1x1/b64/r0 is not the run of the folder the file lies in")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("framework", "caffe"),
        ("model", "alexnet"),
        ("nodes", 2),
        ("ranks_per_node", 2),
        ("batch", 32),
        ("repeat", 3),
        ("network", "emulated-1gbe"),
    ],
)
def test_a_run_id_that_disagrees_with_its_fields_is_an_error(tmp_path: Path, field: str, value: Any) -> None:
    start = {**run_start(), field: value}
    path = put(tmp_path, [start, *every_rank(1), run_end()])
    refused(path, 1, f"run_id torch/lenet/n1x1/b64/r0 says {field}=")
    refused(path, 1, f"the event says {field}={value!r}")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"run_id": "torch/lenet"}, "not a run id: 'torch/lenet'"),
        ({"world_size": 2, "hosts": ["a", "b"]}, "world_size=2 is not nodes x ranks_per_node (1 x 1)"),
        ({"global_batch": 128}, "global_batch=128 is not batch x world_size (64 x 1)"),
        ({"hosts": ["a", "b"]}, "hosts lists 2 host(s), the world has 1 rank(s)"),
        ({"spec": {"run_id": "torch/lenet/n1x1/b64/r1"}}, "spec.run_id='torch/lenet/n1x1/b64/r1' is not"),
    ],
)
def test_a_run_start_that_contradicts_itself_is_an_error(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = put(tmp_path, [{**run_start(), **change}, *every_rank(1), run_end()], at="elsewhere")
    refused(path, 1, message)


def test_two_files_of_one_run_name_both(tmp_path: Path) -> None:
    first = put(tmp_path / "a", [run_start(), *every_rank(1), run_end()])
    second = put(tmp_path / "b", [run_start(), *every_rank(1), run_end()])
    refused(second, 1, f"run id torch/lenet/n1x1/b64/r0 is also the run id of {first}:1", first)


# --- types --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("nodes", "two", "nodes: 'two' is not of type 'integer'"),
        ("hosts", 5, "hosts: 5 is not of type 'array'"),
        ("hosts", [1], "hosts[0]: 1 is not of type 'string', 'null'"),
        ("time", "yesterday", "time: 'yesterday' is not of type 'number'"),
        ("time", float("nan"), "time: nan is not a finite number"),
        ("batch", True, "batch: True is not of type 'integer'"),
        ("nodes", 1.0, "nodes: 1.0 is not of type 'integer'"),
        ("repeat", -1, "repeat: -1 is less than the minimum of 0"),
        ("scaling", "medium", "scaling: 'medium' is not one of"),
        ("versions", "1.0", "versions: '1.0' is not of type 'object'"),
        ("threads_per_rank", None, "threads_per_rank: None is not of type 'integer'"),
        ("global_batch", "64", "global_batch: '64' is not of type 'integer', 'null'"),
        ("git_sha", 7, "git_sha: 7 is not of type 'string'"),
    ],
)
def test_wrong_types_in_run_start_name_the_file_line_and_field(
    tmp_path: Path, field: str, value: Any, message: str
) -> None:
    path = put(tmp_path, [{**run_start(), field: value}, *every_rank(1), run_end()])
    refused(path, 1, f"run_start event: {message}")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("reason", 5, "reason: 5 is not of type 'string', 'null'"),
        ("time", "later", "time: 'later' is not of type 'number'"),
        ("contention", {"contended": "yes"}, "contention.contended: 'yes' is not of type 'boolean', 'null'"),
        ("warnings", "none", "warnings: 'none' is not of type 'array'"),
    ],
)
def test_wrong_types_in_run_end_name_the_file_line_and_field(
    tmp_path: Path, field: str, value: Any, message: str
) -> None:
    path = put(tmp_path, [run_start(), *every_rank(1), {**run_end(), field: value}])
    refused(path, 5, f"run_end event: {message}")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("warmup", "yes", "warmup='yes' is not true or false"),
        ("time", "x", "time='x' is not a finite number or null"),
        ("input_s", -1.0, "input_s=-1.0 is not a finite number >= 0"),
        ("loss", "nan", "loss='nan' is not a number"),
        ("samples", 64.0, "samples=64.0 is not an integer >= 0"),
        ("rank", True, "rank=True is not an integer >= 0"),
    ],
)
def test_wrong_types_in_iterations_name_the_file_line_and_field(
    tmp_path: Path, field: str, value: Any, message: str
) -> None:
    events = every_rank(1)
    events[1] = {**events[1], field: value}
    refused(put(tmp_path, [run_start(), *events, run_end()]), 3, f"iteration event: {message}")


def test_a_non_finite_loss_stays_null(tmp_path: Path) -> None:
    """The launcher writes NaN/inf losses as null (events.dumps): read back as no number."""
    events = [
        iteration(0, 0, 0.5, loss=1.0),
        iteration(0, 1, 0.5, loss=math.nan),
        iteration(0, 2, 0.5, loss=math.inf),
    ]
    path = write_atomic(tmp_path / "torch/lenet/n1x1/b64/r0/events.jsonl", [run_start(), *events, run_end()])
    assert path.read_text().count('"loss":null') == 2
    runs, iterations = tables.load_events([path])
    assert only(runs)["status"] == "ok"
    assert iterations["loss"].isna().tolist() == [False, True, True]


# --- what the launcher writes keeps loading ---------------------------------------------------


def launched(tmp_path: Path, framework: str, nodes: int, *, die_at: int | None = None) -> Path:
    """A run merged by ``dlscale.launch`` from part files the runners' harness wrote."""
    from dlscale.host.placement import Placement
    from dlscale.launch.ranks import Launch
    from dlscale.runners.common import RunContext
    from dlscale.runners.plan import Plan
    from dlscale.runspec import RunSpec

    world = nodes
    run_id = f"{framework}/lenet/n{nodes}x1/b64/r0"
    spec = {
        "framework": framework,
        "model": "lenet",
        "nodes": nodes,
        "ranks_per_node": 1,
        "batch": 64,
        "repeat": 0,
        "run_id": run_id,
        "world_size": world,
        "scaling": "weak",
        "global_batch": 64 * world,
        "dataset": "mnist",
        "iterations": 3,
        "warmup": 1,
        "threads_per_rank": 1,
        "learning_rate": 0.01,
        "seed": 1234,
        "timeout_s": 60,
    }
    events_path = tmp_path / "runs" / run_id / "events.jsonl"
    args = argparse.Namespace(
        spec_json=json.dumps(spec), events=str(events_path), config_sha256="x", repo=str(REPO)
    )
    launch = Launch(args)
    launch.started -= 10.0  # its ranks' start-up: their steps (0.5 s each, not slept) come after it
    work = events_path.parent / ".work"
    alone = framework == "bigdl"  # the driver reports the global batch for the whole run
    for rank in range(world):
        with PartWriter(work / f"rank{rank}.jsonl") as writer:
            writer.emit("rank_start", rank=rank, host=f"cn{rank}", versions={"python": "3"})
            if alone and rank > 0:
                continue
            place = Placement(rank, world, 0, rank, nodes, f"cn{rank}", "127.0.0.1", 1, "local")
            ctx = RunContext(spec=RunSpec.from_dict(spec), placement=place, data_dir=tmp_path, writer=writer)
            for i in range(4 if die_at is None or rank != world - 1 else die_at):
                samples = 64 * world if alone else 64
                ctx.record_iteration(i, samples=samples, step_s=0.5, compute_s=0.4, comm_s=0.1, loss=1.0)
    launch.plan = Plan([], reporting_ranks=1 if alone else world)
    if die_at is not None:
        launch.failure = f"rank {world - 1} died (SIGKILL) at iteration {die_at + 1}"
    return write_atomic(events_path, launch.merge())


@pytest.mark.parametrize(("framework", "nodes"), [("torch", 1), ("torch", 2), ("bigdl", 1), ("bigdl", 2)])
def test_runs_the_launcher_merges_load(tmp_path: Path, framework: str, nodes: int) -> None:
    row = only(tables.load_events([launched(tmp_path, framework, nodes)])[0])
    assert (row["status"], row["timed_iterations"]) == ("ok", 3)
    assert row["throughput"] == pytest.approx(64 * nodes / 0.5)


def test_a_killed_rank_the_launcher_merges_is_a_failed_row(tmp_path: Path) -> None:
    row = only(tables.load_events([launched(tmp_path, "torch", 2, die_at=2)])[0])
    assert (row["status"], row["reason"]) == ("failed", "rank 1 died (SIGKILL) at iteration 3")


# --- properties --------------------------------------------------------------------------------

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "1", "nan"]),
    st.just([]),
    st.just({}),
)
ITERATION_FIELDS = (
    "rank",
    "iteration",
    "samples",
    "step_s",
    "compute_s",
    "comm_s",
    "input_s",
    "loss",
    "warmup",
    "time",
)


def test_the_event_schemas_are_json_schemas() -> None:
    for schema in EVENT_SCHEMAS.values():
        eventchecks.EventValidator.check_schema(schema)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(ITERATION_FIELDS), VALUES, max_size=4),
    st.sets(st.sampled_from(ITERATION_FIELDS), max_size=2),
)
def test_validate_event_is_the_iteration_schema(changes: dict[str, Any], dropped: set[str]) -> None:
    """The runner-facing stdlib check accepts exactly what jsonschema accepts."""
    event = {**iteration(0, 1, 0.5, 0.4, 0.1, loss=2.0), "input_s": 0.01, **changes}
    for name in dropped:
        event.pop(name, None)
    try:
        validate_event(event)
        fast = True
    except EventError:
        fast = False
    assert fast == eventchecks.EventValidator(EVENT_SCHEMAS["iteration"]).is_valid(event), event


@st.composite
def valid_runs(draw: st.DrawFn) -> tuple[int, bool, list[dict[str, Any]]]:
    """(world, rank 0 alone with the global batch?, events) of a valid ok run with a spec."""
    world = draw(st.integers(min_value=1, max_value=4))
    alone = world > 1 and draw(st.booleans())
    count = draw(st.integers(min_value=1, max_value=5))
    batch = 64 * world if alone else 64
    iterations = [
        iteration(r, i, 0.5, samples=batch) for i in range(count) for r in range(1 if alone else world)
    ]
    return world, alone, [run_start(nodes=world, total=count), *iterations, run_end()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(valid_runs(), st.data())
def test_one_impossible_event_is_named_by_its_line(run: Any, data: st.DataObject) -> None:
    world, alone, events = run
    at = data.draw(st.integers(min_value=1, max_value=len(events) - 2))
    field, value = data.draw(
        st.one_of(
            st.tuples(st.just("rank"), st.integers(min_value=world, max_value=world + 3)),
            st.tuples(
                st.just("samples"),
                st.integers(min_value=0, max_value=1000).filter(lambda s: s not in (64, 64 * world)),
            ),
        )
    )
    events[at] = {**events[at], field: value}
    with tempfile.TemporaryDirectory() as tmp:
        path = put(Path(tmp), events)
        with pytest.raises(EventError, match=rf"^{re.escape(str(path))}:{at + 1}: "):
            tables.load_events([path])


@settings(max_examples=60, deadline=None)
@given(valid_runs(), st.data())
def test_a_lost_report_fails_the_run_with_its_rank_and_iteration(run: Any, data: st.DataObject) -> None:
    world, alone, events = run
    at = data.draw(st.integers(min_value=1, max_value=len(events) - 2))
    lost = events.pop(at)
    with tempfile.TemporaryDirectory() as tmp:
        runs, _ = tables.load_events([put(Path(tmp), events)])
    row = only(runs)
    assert row["status"] == "failed"
    assert row["reason"] == f"rank {lost['rank']} reported no iteration {lost['iteration']}"


@settings(max_examples=30, deadline=None)
@given(valid_runs())
def test_valid_runs_of_both_shapes_load(run: Any) -> None:
    world, alone, events = run
    with tempfile.TemporaryDirectory() as tmp:
        runs, iterations = tables.load_events([put(Path(tmp), events)])
    row = only(runs)
    assert row["status"] == "ok"
    assert row["throughput"] == pytest.approx(64 * world / 0.5)
    assert len(iterations) == len(events) - 2
