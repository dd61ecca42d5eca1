"""dlscale.verify and dlscale.artifact on a study made of hand-written events.

The study's tables are made as the workflow makes them (dlscale.analysis on the events
files, in the study's run order, by paths relative to the study folder), so a consistent
study must verify, and a tampered event, a removed run or a table edited by hand must
fail, naming the file and what differs.
"""

from __future__ import annotations

import contextlib
import csv
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlscale import analysis, tables
from dlscale import artifact as dlartifact
from dlscale import study as dlstudy
from dlscale import verify as dlverify
from dlscale.catalog import REPO_DIR
from dlscale.events import write_atomic

STUDY = {
    "frameworks": ["torch", "tensorflow"],
    "models": ["lenet"],
    "nodes": [1, 2],
    "iterations": {"lenet": 4},
    "warmup": 1,
    "repeats": 1,
    "envs_dir": "venvs-here",
}


def events_of(run: dlstudy.Run, seed: int) -> list[dict[str, Any]]:
    """A run's events with numbers whose last digits matter (exact float text)."""
    world = run.nodes * run.ranks_per_node
    start = {
        "event": "run_start",
        "run_id": run.run_id,
        "framework": run.framework,
        "model": run.model,
        "dataset": "mnist",
        "nodes": run.nodes,
        "ranks_per_node": run.ranks_per_node,
        "batch": run.batch,
        "global_batch": run.batch * world,
        "repeat": run.repeat,
        "scaling": "weak",
        "world_size": world,
        "hosts": [f"cn{rank}" for rank in range(world)],
        "threads_per_rank": 1,
        "versions": {run.framework: "1.0", "python": "3.11.7"},
        "config_sha256": "c0ffee",
        "git_sha": "deadbeef",
        "time": 1000.0 + seed,
        "startup_s": 1.25 + seed / 7,
    }
    iterations = [
        {
            "event": "iteration",
            "rank": rank,
            "iteration": index,
            "samples": run.batch,
            "step_s": 0.0123456789 * (1 + seed / 3 + index / 11 + rank / 13),
            "compute_s": 0.0098765432 * (1 + seed / 5 + index / 17),
            "comm_s": 0.0011111117 * (1 + rank + index / 19) if world > 1 else 0.0,
            "loss": 2.302585093 / (1 + index + seed / 9),
            "time": 1001.0 + seed + index,
            **({"warmup": True} if index == 0 else {}),
        }
        for index in range(5)
        for rank in range(world)
    ]
    end = {"event": "run_end", "status": "ok", "reason": None, "time": 1010.0 + seed}
    return [start, *iterations, end]


def write_tables(paths: list[str]) -> None:
    """The tables, as the aggregate rule makes them (scripts/aggregate.py), under results/."""
    if hasattr(analysis, "aggregate"):
        outputs = {name: f"results/{filename}" for name, filename in analysis.OUTPUT_FILES.items()}
        analysis.write_outputs(analysis.aggregate(paths), outputs)
        return
    runs, iterations = tables.load_events(paths)
    analysis.write_tables(
        runs,
        iterations,
        analysis.findings(runs),
        runs_csv="results/runs.csv",
        runs_parquet="results/runs.parquet",
        iterations_parquet="results/iterations.parquet",
        findings_csv="results/findings.csv",
    )


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A study folder: config.yaml, every run's events and log, the four tables, a figure
    and a report, all as `make demo` leaves them (tables made by dlscale.analysis)."""
    root = tmp_path / "study"
    root.mkdir()
    (root / "config.yaml").write_text(yaml.safe_dump(STUDY))
    validated = dlstudy.validate_config(
        dict(STUDY), dlstudy.load_schema(REPO_DIR / "schemas" / "config.schema.yaml"), root
    )
    runs = dlstudy.expand_runs(validated)
    assert len(runs) == 4
    for seed, run in enumerate(runs):
        run_dir = root / "results" / "runs" / run.run_id
        write_atomic(run_dir / "events.jsonl", events_of(run, seed))
        (run_dir / "run.log").write_text(f"[launch] {run.run_id} ok\n")
    results = root / "results"
    with contextlib.chdir(root):
        write_tables([f"results/runs/{run.run_id}/events.jsonl" for run in runs])
    (results / "figures").mkdir()
    (results / "figures" / "throughput.svg").write_text("<svg/>\n")
    (results / "report.html").write_text("<html>report</html>\n")
    (results / "data" / "mnist").mkdir(parents=True)
    (results / "data" / "mnist" / "verification.json").write_text("{}\n")
    (results / "data" / "mnist" / "shard-00000-images.npy").write_bytes(b"\0" * 100)
    return root


@pytest.fixture
def archive(study: Path) -> Path:
    with contextlib.chdir(study):
        made = dlartifact.make_artifact("results", ["config.yaml"], "results/artifact.tar.gz")
    assert made["study"]["runs"] == {"rows": 4, "ok": 4, "failed": 0}
    return study / "results" / "artifact.tar.gz"


@pytest.fixture
def unpacked(archive: Path, tmp_path: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "copy", filter="data")
    return tmp_path / "copy" / "artifact"


def a_run_events(root: Path) -> Path:
    return root / "results" / "runs" / "torch" / "lenet" / "n2x1" / "b64" / "r0" / "events.jsonl"


def problems(report: dlverify.Report) -> str:
    return "\n".join(report.lines())


# --- a consistent study verifies ---------------------------------------------------------


def test_a_consistent_results_folder_verifies(study: Path):
    report = dlverify.verify(study / "results")
    assert report.ok, problems(report)


def test_the_archive_holds_the_study_and_verifies(archive: Path, capsys):
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    top = "artifact/"
    for name in (
        "MANIFEST.json",
        "config/config.yaml",
        "envs/torch.lock",
        "envs/workflow.lock",
        "envs/bigdl.nodeps.lock",
        "results/runs.csv",
        "results/runs.parquet",
        "results/iterations.parquet",
        "results/findings.csv",
        "results/figures/throughput.svg",
        "results/report.html",
        "results/data/mnist/verification.json",
        "results/runs/tensorflow/lenet/n1x1/b64/r0/events.jsonl",
        "results/runs/tensorflow/lenet/n1x1/b64/r0/run.log",
    ):
        assert top + name in names, name
    # Datasets stay out (the workflow remakes them), and so does the archive itself.
    assert not any(name.endswith(".npy") or name.endswith(".tar.gz") for name in names)
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile(top + "MANIFEST.json"))
    assert manifest["format"] == dlartifact.FORMAT
    assert len(manifest["study"]["run_ids"]) == 4
    assert set(manifest["files"]) == {name.removeprefix(top) for name in names} - {"MANIFEST.json"}
    provenance = manifest["provenance"]
    for key in ("git_sha", "host", "platform", "versions", "analysis_sha256", "environments"):
        assert key in provenance, key
    assert provenance["environments"]["torch"]["lock_sha256"]

    assert dlverify._main([str(archive)]) == 0
    assert "verify: OK" in capsys.readouterr().out


def test_an_unpacked_archive_verifies(unpacked: Path):
    report = dlverify.verify(unpacked)
    assert report.ok, problems(report)


# --- tampering is found and named ----------------------------------------------------------


def edit_one_number(path: Path) -> None:
    """Change the step time of one timed iteration, as a hand edit would."""
    lines = path.read_text().splitlines()
    event = json.loads(lines[3])
    assert event["event"] == "iteration" and not event.get("warmup")
    event["step_s"] = round(event["step_s"] * 3, 6)
    lines[3] = json.dumps(event)
    path.write_text("\n".join(lines) + "\n")


def test_a_tampered_event_fails_naming_the_file(unpacked: Path, capsys):
    events = a_run_events(unpacked)
    edit_one_number(events)
    assert dlverify._main([str(unpacked)]) == 1
    out = capsys.readouterr().out
    name = "results/runs/torch/lenet/n2x1/b64/r0/events.jsonl"
    assert f"{name}: content differs from MANIFEST.json" in out
    # The recomputed runs table names the run, the column and the events file.
    assert "results/runs.csv: row run_id=torch/lenet/n2x1/b64/r0: step_s is" in out
    assert f"(from {name})" in out
    assert "verify: FAILED" in out


def test_a_tampered_event_in_a_results_folder_fails_by_recomputation(study: Path):
    edit_one_number(a_run_events(study))
    report = dlverify.verify(study / "results")
    assert not report.ok
    assert "results/runs.csv" in report.files()
    assert "results/iterations.parquet" in report.files()
    assert any("torch/lenet/n2x1/b64/r0" in line and "step_s" in line for line in report.lines())


def test_a_malformed_event_is_named_with_its_line(unpacked: Path):
    events = a_run_events(unpacked)
    events.write_text(events.read_text().replace('"step_s"', '"step_seconds"', 1))
    report = dlverify.verify(unpacked)
    name = "results/runs/torch/lenet/n2x1/b64/r0/events.jsonl"
    assert name in report.files()
    assert any(line.startswith(f"{name}: unreadable") for line in report.lines()), problems(report)


def test_a_removed_run_fails_naming_it(unpacked: Path):
    events = a_run_events(unpacked)
    events.unlink()
    report = dlverify.verify(unpacked)
    text = problems(report)
    name = "results/runs/torch/lenet/n2x1/b64/r0/events.jsonl"
    assert f"{name}: listed in MANIFEST.json but missing" in text
    assert f"{name}: missing: run torch/lenet/n2x1/b64/r0 of the study has no events file" in text
    assert "results/runs.csv: row run_id=torch/lenet/n2x1/b64/r0: in the table but not recomputed" in text


def test_a_removed_run_in_a_results_folder_fails(study: Path):
    a_run_events(study).unlink()
    report = dlverify.verify(study / "results", config=study / "config.yaml")
    assert "results/runs/torch/lenet/n2x1/b64/r0/events.jsonl" in report.files()
    assert "results/runs.csv" in report.files()


def test_a_table_edited_by_hand_fails_naming_it(unpacked: Path):
    table = unpacked / "results" / "runs.csv"
    with open(table, newline="") as handle:
        header, *rows = list(csv.reader(handle))
    row = next(row for row in rows if row[header.index("run_id")] == "torch/lenet/n1x1/b64/r0")
    row[header.index("throughput")] = str(float(row[header.index("throughput")]) + 1)
    with open(table, "w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header, *rows])
    report = dlverify.verify(unpacked)
    text = problems(report)
    assert "results/runs.csv: content differs from MANIFEST.json" in text
    assert "results/runs.csv: row run_id=torch/lenet/n1x1/b64/r0: throughput is" in text
    assert report.files() == ["results/runs.csv"]


def test_an_edited_findings_table_fails_in_a_results_folder(study: Path):
    table = study / "results" / "findings.csv"
    header, first, *rest = table.read_text().splitlines()
    table.write_text("\n".join([header, first + "0", *rest]) + "\n")  # one cell, edited by hand
    report = dlverify.verify(study / "results")
    assert report.files() == ["results/findings.csv"], problems(report)


def test_a_file_added_to_an_archive_is_named(unpacked: Path):
    (unpacked / "results" / "extra.csv").write_text("a,b\n")
    report = dlverify.verify(unpacked)
    assert report.lines() == [
        "results/extra.csv: not listed in MANIFEST.json (added after the archive was made?)"
    ]


def test_not_a_study(tmp_path: Path, capsys):
    assert dlverify._main([str(tmp_path)]) == 2
    assert "verify:" in capsys.readouterr().err
