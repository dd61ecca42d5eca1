"""A run's identity in one place: the id, its parser, the cell names and the rules' patterns
all come from dlscale.runid's one template, and they agree with each other."""

from __future__ import annotations

import re

import pytest

from dlscale import runid
from dlscale.analysis import cells
from dlscale.runid import Run
from dlscale.study import jobs
from dlscale.study import matrix as dlstudy

RUNS = [
    Run("torch", "lenet", 2, 1, 64, 0),
    Run("bigdl", "resnet50", 16, 4, 32, 12, "emulated-1gbe"),
    Run("caffe", "autoencoder", 1, 2, 128, 3, "emulated-100mbe"),
]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.run_id)
def test_a_run_id_parses_back_to_its_run(run: Run) -> None:
    assert Run.from_run_id(run.run_id) == run
    fields = runid.run_id_fields(run.run_id)
    assert fields is not None
    assert Run.from_fields(fields) == run
    assert run.cell_name == run.run_id.rsplit("/", 1)[0]
    assert run.cell_name == runid.cell_name(
        run.framework, run.model, run.network, run.nodes, run.ranks_per_node, run.batch
    )


def test_the_run_id_shape_is_the_documented_one() -> None:
    assert Run("torch", "lenet", 2, 1, 64, 0).run_id == "torch/lenet/n2x1/b64/r0"
    assert Run("torch", "lenet", 2, 1, 64, 3, "emulated-1gbe").run_id == "torch/lenet/n2x1-1gbe/b64/r3"
    assert runid.cell_name("torch", "lenet", "host", 2.0, 1, 64.0) == "torch/lenet/n2x1/b64"
    assert runid.cell_name("torch", "lenet", None, 2, 1, 64) == "torch/lenet/n2x1/b64"


@pytest.mark.parametrize(
    "text",
    ["torch/lenet/n2x1/b64", "Torch/lenet/n2x1/b64/r0", "torch/lenet/n2x1-/b64/r0", "torch/lenet/n2/b64/r0"],
)
def test_what_is_no_run_id_is_refused(text: str) -> None:
    assert runid.run_id_fields(text) is None
    with pytest.raises(ValueError, match="not a run id"):
        Run.from_run_id(text)


def test_everyone_uses_the_one_definition() -> None:
    """The study, the jobs, the verdicts and the runspec share runid's names, not copies."""
    from dlscale import runspec

    assert dlstudy.Run is Run
    assert cells.cell_name is runid.cell_name
    assert runspec.RUN_ID_PATTERN is runid.RUN_ID_PATTERN
    run = RUNS[1]
    assert jobs.events_file(run) == f"results/runs/{run.run_id}/events.jsonl"
    assert jobs.cell_wildcards(run) == run.wildcards()


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.run_id)
def test_the_rules_patterns_match_the_runs_paths(run: Run) -> None:
    """The train rule's output pattern, with the study's wildcard constraints, matches a
    run's events file and gives its fields back, as Snakemake would."""
    constraints = dict(dlstudy.WILDCARD_CONSTRAINTS)

    def regex(pattern: str) -> re.Pattern[str]:
        parts = re.split(r"\{(\w+)\}", pattern)
        return re.compile(
            "^"
            + "".join(f"(?P<{p}>{constraints[p]})" if i % 2 else re.escape(p) for i, p in enumerate(parts))
            + "$"
        )

    match = regex(runid.run_pattern("events.jsonl")).match(jobs.events_file(run))
    assert match is not None
    assert Run.from_fields(match.groupdict()) == run
    cell = regex(runid.cell_pattern("results/repeats", "after{done}.json")).match(
        f"results/repeats/{run.cell_name}/after2.json"
    )
    assert cell is not None and Run.from_fields({**cell.groupdict(), "repeat": run.repeat}) == run


def test_an_events_path_names_its_prefix_and_run() -> None:
    match = runid.events_path_pattern().match("study/results/runs/torch/lenet/n2x1-1gbe/b64/r0/events.jsonl")
    assert match is not None
    assert (match["prefix"], match["run_id"]) == ("study/results/", "torch/lenet/n2x1-1gbe/b64/r0")
    assert runid.events_path_pattern().match("results/runs/notarun/events.jsonl") is None
