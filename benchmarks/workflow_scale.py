"""Benchmark 4: the workflow's own scale: planning big studies and aggregating their events.

* ``snakemake -n`` (a dry run, as a user checks a plan) on generated studies of 100, 1,000
  and 10,000 runs, in a temporary directory whose ``envs_dir`` is temporary too, so nothing
  is built: wall time, CPU time and peak memory (from ``wait4``, the child's own rusage).
* Aggregation of 1,000 runs' events (synthetic, shaped like a real study's: every rank's
  iterations, warm-up included) through ``dlscale.analysis.aggregate``, as the aggregate rule does it.

Targets: 10,000 runs plan in under 20 s; 1,000 runs aggregate in under 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from benchmarks.common import REPO, log, write_csv
from benchmarks.stats import summarize, verdict
from dlscale import catalog

PLAN_SIZES = (100, 1000, 10000)
PLAN_TARGET_S = 20.0  # for the largest size
AGGREGATE_RUNS = 1000
AGGREGATE_TARGET_S = 10.0
AGG_NODES = (1, 2, 4, 8, 16)
AGG_WARMUP = 3
#: The one framework of the generated studies (any would do; torch's runs need no inputs
#: besides its venv and data).
FRAMEWORK = "torch"


def study_of_size(runs: int, envs_dir: str) -> dict[str, Any]:
    """A valid study of exactly ``runs`` runs: every catalog model x n node counts x r repeats.

    ``runs`` must be models x n x r with n <= r as close as possible (with the 4 models:
    100 = 4x5x5, 1,000 = 4x10x25, 10,000 = 4x50x50), so both the node and the repeat axes
    are exercised.
    """
    models = list(catalog.MODEL_NAMES)
    if runs % len(models):
        raise ValueError(f"{runs} runs is not a multiple of the {len(models)} models")
    cells = runs // len(models)
    nodes = max(n for n in range(1, int(cells**0.5) + 1) if cells % n == 0)
    return {
        "frameworks": [FRAMEWORK],
        "models": models,
        "nodes": list(range(1, nodes + 1)),
        "repeats": cells // nodes,
        "envs_dir": envs_dir,
    }


def run_measured(cmd: list[str], cwd: Path, log_path: Path, timeout_s: float) -> dict[str, float]:
    """Run ``cmd`` to completion; its wall time, CPU time and peak RSS (its own rusage)."""
    with open(log_path, "w", encoding="utf-8") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        timer = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n{tail}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}


def plan_once(runs: int, tmp: Path) -> dict[str, float]:
    work = tmp / f"plan{runs}"
    work.mkdir(exist_ok=True)
    (work / "study.yaml").write_text(yaml.safe_dump(study_of_size(runs, str(tmp / "envs"))))
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(work), "--profile", str(REPO / "profiles" / "local"),
        "--configfile", str(work / "study.yaml"), "-n",
    ]  # fmt: skip
    result = run_measured(cmd, work, work / "dryrun.log", timeout_s=900)
    text = (work / "dryrun.log").read_text(encoding="utf-8", errors="replace")
    planned = planned_jobs(text).get("train")
    if planned != runs:
        raise RuntimeError(
            f"dry run of {runs} runs planned {planned} training jobs; see {work / 'dryrun.log'}"
        )
    return result


def planned_jobs(dry_run_output: str) -> dict[str, int]:
    """Rule -> job count, from the first "Job stats" table that ``snakemake -n`` prints."""
    lines = dry_run_output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Job stats:"), len(lines))
    counts: dict[str, int] = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        match = re.fullmatch(r"\s*([A-Za-z_]\w*)\s+(\d+)\s*", line)
        if match and match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


def synthetic_events(run_id: str, nodes: int, iterations: int, warmup: int, rng: random.Random) -> list[dict]:
    """The events file a launcher writes for an ok run of ``nodes`` single-rank nodes."""
    framework, model, _, batch, repeat = run_id.split("/")
    start = 1.7e9 + rng.random() * 1e6
    events: list[dict[str, Any]] = [
        {
            "event": "run_start", "run_id": run_id, "framework": framework, "model": model,
            "nodes": nodes, "ranks_per_node": 1, "batch": int(batch[1:]), "repeat": int(repeat[1:]),
            "dataset": catalog.model(model).datasets[0], "scaling": "weak",
            "global_batch": int(batch[1:]) * nodes, "world_size": nodes,
            "hosts": [f"vm/node{r}" for r in range(nodes)], "threads_per_rank": 1,
            "versions": {framework: "0.0"}, "config_sha256": "0" * 64, "git_sha": "bench",
            "launcher": "local", "loadavg": [1.0, 1.0, 1.0], "startup_s": 2.0, "spec": {}, "time": start,
        }
    ]  # fmt: skip
    now = start + 2.0
    for iteration in range(warmup + iterations):
        step = 0.01 * (1 + rng.random())
        now += step
        for rank in range(nodes):
            events.append(
                {
                    "event": "iteration", "rank": rank, "iteration": iteration, "samples": int(batch[1:]),
                    "step_s": step, "compute_s": step * 0.8, "comm_s": step * 0.15,
                    "loss": 2.3 / (1 + iteration), "warmup": iteration < warmup, "time": now,
                }
            )  # fmt: skip
    events.append({"event": "run_end", "status": "ok", "reason": None, "loadavg": [1.0, 1.0, 1.0],
                   "wall_s": now - start, "warnings": [], "time": now})  # fmt: skip
    return events


def write_synthetic_study(root: Path, runs: int = AGGREGATE_RUNS) -> list[Path]:
    """Events of a study of ``runs`` runs shaped like the default one (its iteration counts,
    batches and warm-up, node counts 1 to 16), spread over the catalog's models: a realistic
    aggregation load."""
    from dlscale.events import dumps

    rng = random.Random(0)
    repeats = runs // (len(catalog.MODELS) * len(AGG_NODES))
    paths = []
    for model in catalog.MODELS.values():
        for nodes in AGG_NODES:
            for repeat in range(repeats):
                run_id = f"{FRAMEWORK}/{model.name}/n{nodes}x1/b{model.batch_per_rank}/r{repeat}"
                path = root / "runs" / run_id / "events.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                events = synthetic_events(run_id, nodes, model.iterations, AGG_WARMUP, rng)
                path.write_text("".join(dumps(e) + "\n" for e in events), encoding="utf-8")
                paths.append(path)
    return paths


def aggregate_worker(list_file: Path, out_dir: Path) -> dict[str, float]:
    """What the aggregate rule does (scripts/aggregate.py), timed in this process."""
    t0 = time.perf_counter()
    from dlscale.analysis import aggregate, tables

    imported = time.perf_counter()
    paths = list_file.read_text(encoding="utf-8").split()
    runs, iterations = tables.load_events(paths)
    table = aggregate.findings(runs)
    aggregate.write_tables(
        runs, iterations, table,
        runs_csv=out_dir / "runs.csv", runs_parquet=out_dir / "runs.parquet",
        iterations_parquet=out_dir / "iterations.parquet", findings_csv=out_dir / "findings.csv",
    )  # fmt: skip
    done = time.perf_counter()
    if len(runs) != len(paths) or not runs["status"].eq("ok").all():
        raise RuntimeError(f"aggregation of {len(paths)} synthetic runs gave {len(runs)} rows, not all ok")
    return {"import_s": imported - t0, "aggregate_s": done - imported, "iteration_rows": len(iterations)}


def aggregate_once(list_file: Path, tmp: Path, repeat: int) -> dict[str, float]:
    out = tmp / f"agg{repeat}"
    out.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "benchmarks.workflow_scale", "aggregate", str(list_file), str(out)]
    measured = run_measured(cmd, REPO, out / "aggregate.log", timeout_s=600)
    inner = json.loads((out / "result.json").read_text(encoding="utf-8"))
    return {**measured, **inner}


def measure(repeats: int, plan_sizes: tuple[int, ...] = PLAN_SIZES) -> tuple[list[dict], list[dict]]:
    """Raw rows of the dry runs (size x repeat) and of the aggregations (repeat)."""
    plans, aggregations = [], []
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-scale-") as name:
        tmp = Path(name)
        for repeat in range(repeats):
            for runs in plan_sizes:
                log(f"workflow scale repeat {repeat + 1}/{repeats}: snakemake -n, {runs} runs")
                plans.append(
                    {"runs": runs, "repeat": repeat, "loadavg_1m": os.getloadavg()[0], **plan_once(runs, tmp)}
                )
        log(f"writing {AGGREGATE_RUNS} runs' synthetic events")
        paths = write_synthetic_study(tmp / "events")
        list_file = tmp / "events.txt"
        list_file.write_text("\n".join(map(str, paths)), encoding="utf-8")
        for repeat in range(repeats):
            log(f"workflow scale repeat {repeat + 1}/{repeats}: aggregate {AGGREGATE_RUNS} runs")
            aggregations.append(
                {"runs": AGGREGATE_RUNS, "repeat": repeat, "loadavg_1m": os.getloadavg()[0],
                 **aggregate_once(list_file, tmp, repeat)}
            )  # fmt: skip
    return plans, aggregations


def below(target_s: float) -> Callable[[float], bool]:
    """The pass rule of a wall- or CPU-time target: strictly under it."""
    return lambda seconds: seconds < target_s


def scale_table(plans: list[dict], aggregations: list[dict]) -> pd.DataFrame:
    """One row per measured task: wall time (median and interval), CPU time, peak memory, verdict."""

    rows = []
    largest = max((p["runs"] for p in plans), default=0)
    for runs in sorted({p["runs"] for p in plans}):
        group = [p for p in plans if p["runs"] == runs]
        wall = summarize(p["wall_s"] for p in group)
        target = PLAN_TARGET_S if runs == largest else float("nan")
        rows.append(
            {"task": "snakemake -n", "runs": runs, **wall.as_row("wall_s"),
             "cpu_s_median": summarize(p["cpu_s"] for p in group).median,
             "peak_rss_mb_max": max(p["peak_rss_mb"] for p in group),
             "loadavg_1m_median": summarize(p["loadavg_1m"] for p in group).median,
             "target_s": target,
             "verdict": verdict(wall.median, below(target)) if runs == largest else "n/a",
             "verdict_cpu": verdict(summarize(p["cpu_s"] for p in group).median, below(target))
             if runs == largest else "n/a"}
        )  # fmt: skip
    if aggregations:
        wall = summarize(a["aggregate_s"] for a in aggregations)
        rows.append(
            {"task": "aggregate (dlscale.analysis.aggregate)", "runs": AGGREGATE_RUNS, **wall.as_row("wall_s"),
             "cpu_s_median": summarize(a["cpu_s"] for a in aggregations).median,
             "peak_rss_mb_max": max(a["peak_rss_mb"] for a in aggregations),
             "loadavg_1m_median": summarize(a["loadavg_1m"] for a in aggregations).median,
             "target_s": AGGREGATE_TARGET_S, "verdict": verdict(wall.median, below(AGGREGATE_TARGET_S)),
             "verdict_cpu": verdict(summarize(a["cpu_s"] for a in aggregations).median, below(AGGREGATE_TARGET_S))}
        )  # fmt: skip
    return pd.DataFrame(rows)


def write(plans: list[dict], aggregations: list[dict], out_dir: Path) -> pd.DataFrame:
    write_csv(pd.DataFrame(plans), out_dir / "workflow_scale_raw.csv")
    write_csv(pd.DataFrame(aggregations), out_dir / "aggregate_raw.csv")
    table = scale_table(plans, aggregations)
    write_csv(table, out_dir / "workflow_scale.csv")
    return table


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.workflow_scale aggregate LIST OUT``: one timed aggregation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    agg = sub.add_parser("aggregate")
    agg.add_argument("list_file", type=Path)
    agg.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    result = aggregate_worker(args.list_file, args.out_dir)
    (args.out_dir / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
