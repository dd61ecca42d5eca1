"""A small study of hand-written events as `make demo` leaves it (config, every run's events and
log, the tables made by dlscale.analysis.aggregate, a figure and a report), and its archive: the
honest input of the verify tests, which tamper with it (tests/unit/test_verify.py) or build
hostile archives beside it (tests/faults/test_verify_hostile.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml

from dlscale.analysis import aggregate as analysis
from dlscale.analysis import tables
from dlscale.archive import artifact as dlartifact
from dlscale.catalog import CONFIG_SCHEMA
from dlscale.events import write_atomic
from dlscale.study import matrix as dlstudy
from dlscale.study import validation

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


def make_study(tmp_path: Path) -> Path:
    """A study folder: config.yaml, every run's events and log, the four tables, a figure
    and a report, all as `make demo` leaves them (tables made by dlscale.analysis.aggregate)."""
    root = tmp_path / "study"
    root.mkdir()
    (root / "config.yaml").write_text(yaml.safe_dump(STUDY))
    validated = validation.validate_config(dict(STUDY), validation.load_schema(CONFIG_SCHEMA), root)
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


def make_archive(study: Path) -> Path:
    """The study in one archive, as `make artifact` packs it."""
    with contextlib.chdir(study):
        made = dlartifact.make_artifact("results", ["config.yaml"], "results/artifact.tar.gz")
    assert made["study"]["runs"] == {"rows": 4, "ok": 4, "failed": 0}
    return study / "results" / "artifact.tar.gz"
