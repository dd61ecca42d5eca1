"""dlscale.archive.verify and dlscale.archive.artifact on a study made of hand-written events.

The study's tables are made as the workflow makes them (dlscale.analysis.aggregate on the events
files, in the study's run order, by paths relative to the study folder), so a consistent
study must verify, and a tampered event, a removed run or a table edited by hand must
fail, naming the file and what differs.
"""

from __future__ import annotations

import csv
import json
import tarfile
from pathlib import Path

import pytest
from helpers.verify_study import make_archive, make_study

from dlscale.archive import artifact, verify


@pytest.fixture
def study(tmp_path: Path) -> Path:
    return make_study(tmp_path)


@pytest.fixture
def archive(study: Path) -> Path:
    return make_archive(study)


@pytest.fixture
def unpacked(archive: Path, tmp_path: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "copy", filter="data")
    return tmp_path / "copy" / "artifact"


def a_run_events(root: Path) -> Path:
    return root / "results" / "runs" / "torch" / "lenet" / "n2x1" / "b64" / "r0" / "events.jsonl"


def problems(report: verify.Report) -> str:
    return "\n".join(report.lines())


# --- a consistent study verifies ---------------------------------------------------------


def test_a_consistent_results_folder_verifies(study: Path):
    report = verify.verify(study / "results")
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
    assert manifest["format"] == artifact.FORMAT
    assert len(manifest["study"]["run_ids"]) == 4
    assert set(manifest["files"]) == {name.removeprefix(top) for name in names} - {"MANIFEST.json"}
    provenance = manifest["provenance"]
    for key in ("git_sha", "host", "platform", "versions", "analysis_sha256", "environments"):
        assert key in provenance, key
    assert provenance["environments"]["torch"]["lock_sha256"]

    assert manifest[artifact.MANIFEST_SEAL] == artifact.manifest_seal(manifest)

    # make artifact's .sha256 beside it: the publisher's digest, so its origin is proven.
    assert verify.main([str(archive)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3].startswith("verify: integrity: OK: ") and "the manifest's seal" in out[-3]
    assert out[-2].startswith("verify: authenticity: PROVEN: ") and out[-1].endswith(
        ": consistent and authentic"
    )


def test_an_unpacked_archive_verifies(unpacked: Path):
    report = verify.verify(unpacked)
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
    assert verify.main([str(unpacked)]) == 1
    out = capsys.readouterr().out
    name = "results/runs/torch/lenet/n2x1/b64/r0/events.jsonl"
    assert f"{name}: content differs from MANIFEST.json" in out
    # The recomputed runs table names the run, the column and the events file.
    assert "results/runs.csv: row run_id=torch/lenet/n2x1/b64/r0: step_s is" in out
    assert f"(from {name})" in out
    assert "verify: FAILED" in out


def test_a_tampered_event_in_a_results_folder_fails_by_recomputation(study: Path):
    edit_one_number(a_run_events(study))
    report = verify.verify(study / "results")
    assert not report.ok
    assert "results/runs.csv" in report.files()
    assert "results/iterations.parquet" in report.files()
    assert any("torch/lenet/n2x1/b64/r0" in line and "step_s" in line for line in report.lines())


def test_a_malformed_event_is_named_with_its_line(unpacked: Path):
    events = a_run_events(unpacked)
    events.write_text(events.read_text().replace('"step_s"', '"step_seconds"', 1))
    report = verify.verify(unpacked)
    name = "results/runs/torch/lenet/n2x1/b64/r0/events.jsonl"
    assert name in report.files()
    assert any(line.startswith(f"{name}: unreadable") for line in report.lines()), problems(report)


def test_a_removed_run_fails_naming_it(unpacked: Path):
    events = a_run_events(unpacked)
    events.unlink()
    report = verify.verify(unpacked)
    text = problems(report)
    name = "results/runs/torch/lenet/n2x1/b64/r0/events.jsonl"
    assert f"{name}: listed in MANIFEST.json but missing" in text
    assert f"{name}: missing: run torch/lenet/n2x1/b64/r0 of the study has no events file" in text
    assert "results/runs.csv: row run_id=torch/lenet/n2x1/b64/r0: in the table but not recomputed" in text


def test_a_removed_run_in_a_results_folder_fails(study: Path):
    a_run_events(study).unlink()
    report = verify.verify(study / "results", config=study / "config.yaml")
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
    report = verify.verify(unpacked)
    text = problems(report)
    assert "results/runs.csv: content differs from MANIFEST.json" in text
    assert "results/runs.csv: row run_id=torch/lenet/n1x1/b64/r0: throughput is" in text
    assert report.files() == ["results/runs.csv"]


def test_an_edited_findings_table_fails_in_a_results_folder(study: Path):
    table = study / "results" / "findings.csv"
    header, first, *rest = table.read_text().splitlines()
    table.write_text("\n".join([header, first + "0", *rest]) + "\n")  # one cell, edited by hand
    report = verify.verify(study / "results")
    assert report.files() == ["results/findings.csv"], problems(report)


def test_a_file_added_to_an_archive_is_named(unpacked: Path):
    (unpacked / "results" / "extra.csv").write_text("a,b\n")
    report = verify.verify(unpacked)
    assert report.lines() == [
        "results/extra.csv: not listed in MANIFEST.json (added after the archive was made?)"
    ]


def test_not_a_study(tmp_path: Path, capsys):
    assert verify.main([str(tmp_path)]) == 2
    assert "verify:" in capsys.readouterr().err
