"""results/bench/summary.md: every benchmark's table with its target and a pass/miss column.

Reads the csv files the benchmarks wrote (any may be missing: a benchmark that was not run
or not covered is said so, never left blank), and prints a short table for the terminal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.workflow_scale import AGGREGATE_TARGET_S, PLAN_TARGET_S
from dlscale import catalog
from dlscale.analysis.stats import median_interval
from dlscale.base import atomic
from dlscale.thresholds import threshold


def fmt(value: Any, digits: int = 2) -> str:
    """A number for a table cell ('-' for missing), with ``digits`` decimals."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)) or pd.isna(value):
        return "-"
    return f"{float(value):.{digits}f}"


def fmt_range(row: Any, prefix: str, digits: int = 2, scale: float = 1.0) -> str:
    """``median [low, high]`` of the ``<prefix>_median/_low/_high`` columns of a row
    (``median [one repeat]`` where a single repeat gives no interval, '-' for none)."""
    med, lo, hi = (row.get(f"{prefix}_{k}") for k in ("median", "low", "high"))
    if med is None or pd.isna(med):
        return "-"
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return f"{float(med) * scale:.{digits}f} [one repeat]"
    med, lo, hi = (float(v) * scale for v in (med, lo, hi))
    return f"{med:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _read(out_dir: Path, name: str) -> pd.DataFrame | None:
    path = out_dir / f"{name}.csv"
    if not path.exists():
        return None
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])  # "n/a" is a verdict
    return None if table.empty else table


def median_coverage(n: int) -> float:
    """Coverage of the interval ``dlscale.analysis.stats`` gives the median of ``n`` repeats (it
    depends on ``n`` alone): 5 repeats 0.94, 3 0.75, 2 0.5, 1 none (0)."""
    coverage = median_interval(range(n)).coverage
    return 0.0 if math.isnan(coverage) else coverage


def ratio_cell(row: Mapping[str, Any] | None, prefix: str = "ratio", mark: bool = True) -> str:
    """``median [low, high] n=N pass|miss|undecided`` of one framework x model ratio, for the
    lead table (the mark: the csv's own verdict, ``stats.interval_verdict``'s)."""
    if row is None:
        return "not measured"
    text = fmt_range(row, prefix, 3)
    if text == "-":
        failure = row.get("failure")
        return f"failed: {failure}" if isinstance(failure, str) and failure else "no ratio"
    n = int(row.get(f"{prefix}_n") or 0)
    cell = f"{text} n={n}"
    return f"{cell} **{row['verdict']}**" if mark else cell


def lead_section(table: pd.DataFrame | None) -> str:
    """Every framework x model harness ratio in one table (catalog order), with a pass/miss
    mark against the target; a framework whose bare loop also ran in its plainest
    deployment gets a second row: that deployment's ratio (not the harness: no mark)."""
    head = f"## Harness ratio, every framework x model (runner / fair bare loop; target >= {threshold('harness_ratio').value})\n\n"
    rows_by_key = {} if table is None else {(r["framework"], r["model"]): r for r in table.to_dict("records")}
    models = list(catalog.MODEL_NAMES)
    rows = []
    for framework in catalog.FRAMEWORK_NAMES:
        rows.append([framework, *(ratio_cell(rows_by_key.get((framework, m))) for m in models)])
        deployed = [rows_by_key.get((framework, m)) for m in models]
        if any(r is not None and pd.notna(r.get("deployment_ratio_median")) for r in deployed):
            rows.append(
                [f"{framework} deployment (bare standalone / bare local)",
                 *(ratio_cell(r, "deployment_ratio", mark=False) if r is not None else "not measured"
                   for r in deployed)]
            )  # fmt: skip
    coverage = ", ".join(f"{n} repeats {median_coverage(n):.0%}" for n in (5, 3, 2))
    note = (
        "\nEach cell: the median over repeats of the paired ratio runner / bare (wall-time"
        " throughput, both arms side by side in one run, order rotated), its interval over those"
        f" repeats, n = repeats, and the mark against {threshold('harness_ratio').value} read from that interval:"
        " pass when all of it is at or above the target, miss when all of it is below, undecided when"
        " it reaches both sides or there is a single repeat (more repeats decide). The interval is"
        " dlscale.analysis.stats' distribution-free confidence interval of the median (the study's"
        " verdicts use the same): [min, max] up to 5 repeats, order statistics from 6, with"
        f" coverage {coverage}. The bare loop is fed a fresh batch per step from the"
        " normalised set in memory, as a plain training loop is (benchmarks.bare_common). Details"
        " and CPU-time ratios: section 1.\n"
    )
    return head + markdown_table(["framework", *models], rows) + "\n" + note


def overhead_section(table: pd.DataFrame | None) -> str:
    head = f"## 1. Harness overhead (runner / bare loop throughput; target >= {threshold('harness_ratio').value})\n\n"
    if table is None:
        return head + "Not measured.\n"
    rows = [
        [r["framework"], r["model"], str(r["batch"]), str(r["threads"]), fmt(r.get("ratio_n"), 0),
         fmt_range(r, "runner_samples_per_s", 1), fmt_range(r, "bare_samples_per_s", 1),
         fmt_range(r, "ratio", 3), fmt_range(r, "cpu_ratio", 3), fmt_range(r, "cpu_q_ratio", 3),
         fmt(r["target"]), r["verdict"], str(r.get("verdict_cpu", "n/a")), str(r.get("verdict_cpu_q", "n/a"))]
        for r in table.to_dict("records")
    ]  # fmt: skip
    header = ["framework", "model", "batch", "threads", "repeats", "runner img/s", "bare img/s", "ratio (wall)",
              "ratio (CPU time)", "ratio (CPU p10)", "target", "verdict (wall)", "verdict (CPU)",
              "verdict (CPU p10)"]  # fmt: skip
    note = (
        "\nimg/s from the wall time between successive iterations (the whole loop body: data,"
        " step, events). The CPU-time ratio uses the process's CPU time per iteration instead:"
        " being descheduled by a neighbour costs wall time but no CPU time, so on a shared node"
        " it is the steadier measure of what the harness itself costs. The CPU p10 ratio takes"
        " the 10th percentile of the per-iteration CPU times instead of their median: a"
        " neighbour on the other core also inflates CPU time (caches, memory bandwidth), only"
        " ever upwards, so the low quantile is each loop's own cost (benchmarks.timing."
        "quantile_gap; the steadiest of the three on a loaded host). BigDL: one process per"
        " arm (one SparkContext per Python process), fewer repeats (each arm is a JVM start);"
        " the runner is the study's run through dlscale.launch on its own Spark standalone"
        " cluster (driver, master, worker, executor: separate JVMs), the bare loop is"
        " DistriOptimizer on the same standalone deployment started by the runner's own code"
        " (the harness's ratio), and again on local[1] (one JVM; bare / that = the"
        " deployment's ratio, in the lead table), all timed from BigDL's own log lines; no"
        " CPU-time ratio (the work is in JVMs outside the measuring process).\n"
    )
    return head + markdown_table(header, rows) + "\n" + note


def breakdown_section(table: pd.DataFrame | None) -> str:
    head = "### Where a BigDL iteration goes (medians over repeats, seconds)\n\n"
    if table is None:
        return head + "Not measured.\n"
    rows = [
        [r["framework"], r["model"], r["arm"], str(r["repeats"]), fmt(r["iteration_s"], 3), fmt(r["step_s"], 3),
         fmt(r["compute_s"], 3), fmt(r["sync_s"], 3), fmt(r["between_s"], 3)]
        for r in table.to_dict("records")
    ]  # fmt: skip
    header = ["framework", "model", "arm", "repeats", "iteration", "BigDL step", "compute",
              "sync (step - compute)", "between steps"]  # fmt: skip
    note = (
        "\nFrom BigDL's log (dlscale.parse.bigdl): compute = forward/backward + the weight update on"
        " the executor; sync = the rest of BigDL's step (parameter exchange through Spark's block"
        " manager and the Spark job that carries it), present even with one executor; between"
        " steps = the loop's wall time per iteration minus BigDL's step. A runner/bare gap in"
        " sync comes from the deployment (a standalone cluster's driver-executor RPC vs local"
        " mode's one JVM: the study's set-up), not from the harness.\n"
    )
    return head + markdown_table(header, rows) + "\n" + note


def compute_section(table: pd.DataFrame | None) -> str:
    head = "## 2. Compute efficiency (achieved FLOP/s / float32 matmul peak, same threads)\n\n"
    if table is None:
        return head + "Not measured.\n"
    rows = [
        [r["framework"], r["model"], str(r["threads"]), fmt(r["flops_per_sample"] / 1e9, 3),
         fmt_range(r, "achieved_flops", 2, 1e-9), fmt_range(r, "peak_flops", 1, 1e-9),
         fmt_range(r, "fraction", 3), fmt_range(r, "bare_fraction", 3), fmt_range(r, "cpu_fraction", 3)]
        for r in table.to_dict("records")
    ]  # fmt: skip
    header = ["framework", "model", "threads", "GFLOP/sample", "achieved GFLOP/s", "peak GFLOP/s",
              "fraction (runner)", "fraction (bare)", "fraction (runner, CPU time)"]  # fmt: skip
    note = (
        "\nFLOPs per sample: matmuls and convolutions of forward + backward (torch FlopCounterMode,"
        " flops.csv), the same count for every framework. Wall-time fractions on both sides; the"
        " last column uses process CPU time on both sides (steady on a shared node). Fractions"
        " near or above 1 are not an error: the count is of direct convolution, while torch runs"
        " some 3x3 convolutions with fewer multiplies (NNPACK/oneDNN Winograd-style kernels)."
        " The peak is each framework's own float32 matmul in its venv, best of 1024 and 2048:"
        " torch.mm (MKL), tf.linalg.matmul (oneDNN/Eigen), numpy's OpenBLAS for Caffe (its BLAS)"
        " and BigDL (whose MKL is inside the JVM).\n"
    )
    return head + markdown_table(header, rows) + "\n" + note


def comm_section(table: pd.DataFrame | None) -> str:
    head = "## 3. Communication efficiency (2 processes on loopback; MB/s = 1e6 bytes / s)\n\n"
    if table is None:
        return head + "Not measured.\n"
    rows = [
        [r["framework"], str(r["model"]), fmt(r["nbytes"] / 1e6, 1), fmt(r.get("vs_tcp_n"), 0),
         fmt_range(r, "framework_bytes_per_s", 0, 1e-6), fmt_range(r, "tcp_bytes_per_s", 0, 1e-6),
         fmt_range(r, "mpi_bytes_per_s", 0, 1e-6), fmt_range(r, "vs_tcp", 3), fmt_range(r, "vs_mpi", 3)]
        for r in table.to_dict("records")
    ]  # fmt: skip
    header = ["framework", "model", "gradient MB", "paired repeats", "framework MB/s", "TCP ping-pong MB/s", "MPI allreduce MB/s",
              "vs TCP", "vs MPI"]  # fmt: skip
    note = (
        "\nEvery transfer is timed by its dlscale.commbench module (the scaling model's"
        " micro-benchmarks), its median over a few operations per repeat. Ratios are paired per"
        " repeat (a framework with fewer repeats pairs with the references of its own repeats)."
        " TCP: half a ping-pong's round trip; MPI: Open MPI's MPI_Allreduce of one flat buffer."
        " torch: gloo all-reduce of the flat gradient; TensorFlow: MWMS ring all-reduce (gRPC);"
        " Caffe: one MPI_Allreduce per blob; BigDL: Spark's block exchange (shuffle) of the"
        " gradient between two executors, without the Spark job that carries it in a step.\n"
    )
    return head + markdown_table(header, rows) + "\n" + note


def scale_section(table: pd.DataFrame | None) -> str:
    head = (
        f"## 4. Workflow scale (targets: 10,000 runs plan in < {PLAN_TARGET_S:.0f} s;"
        f" 1,000 runs aggregate in < {AGGREGATE_TARGET_S:.0f} s)\n\n"
    )
    if table is None:
        return head + "Not measured.\n"
    rows = [
        [r["task"], str(r["runs"]), fmt_range(r, "wall_s", 1), fmt(r["cpu_s_median"], 1),
         fmt(r["peak_rss_mb_max"], 0), fmt(r["loadavg_1m_median"], 1), fmt(r["target_s"], 0),
         str(r["verdict"]), str(r.get("verdict_cpu", "n/a"))]
        for r in table.to_dict("records")
    ]  # fmt: skip
    header = ["task", "runs", "wall s", "CPU s", "peak RSS MB", "load (1 min)", "target s",
              "verdict (wall)", "verdict (CPU)"]  # fmt: skip
    note = (
        "\nWall time is what a user waits; on a shared, oversubscribed node it stretches with the"
        " load, so the CPU time of the process (user + system, from its own rusage) is given"
        " beside it as the figure a quiet node would show.\n"
    )
    return head + markdown_table(header, rows) + "\n" + note


def startup_section(table: pd.DataFrame | None) -> str:
    head = "## 5. Start-up cost (launcher start to first timed iteration, apart from training)\n\n"
    if table is None:
        return head + "Not measured.\n"
    rows = [
        [r["framework"], r["model"], fmt_range(r, "startup_s", 2), fmt_range(r, "to_first_step_s", 2),
         fmt_range(r, "warmup_s", 2), fmt(r["median_step_s"], 4), fmt(r["startup_in_steps"], 0),
         str(r.get("runs", "-")), str(r.get("source", "launch"))]
        for r in table.to_dict("records")
    ]  # fmt: skip
    header = ["framework", "model", "start-up s", "to first step s", "warm-up s", "median step s",
              "start-up / step", "runs", "source"]  # fmt: skip
    note = (
        "\nEvery figure is from a real `dlscale.launch` run of the study's single-rank spec. BigDL's"
        " come from its training runner arms (each one a whole launch: JVM, Spark standalone"
        " cluster, SparkContext) rather than from extra launches, which would cost a minute each.\n"
    )
    return head + markdown_table(header, rows) + "\n" + note


def header(info: dict[str, Any]) -> str:
    lines = ["# dlscale benchmarks", ""]
    lines.append(
        "Every figure is a median with its interval over repeats (dlscale.analysis.stats); ratios are paired per repeat"
        " (both arms measured side by side in the same repeat, order rotated)."
    )
    lines.append("")
    for key in (
        "started_utc",
        "host",
        "cpus",
        "git_sha",
        "repeats",
        "loadavg_start",
        "loadavg_end",
        "wall_s",
    ):
        if key in info:
            lines.append(f"- {key}: {info[key]}")
    if info.get("not_covered"):
        lines.append(f"- frameworks without a benchmark entry yet: {', '.join(info['not_covered'])}")
    return "\n".join(lines) + "\n"


def build(out_dir: Path) -> str:
    info_path = out_dir / "run_info.json"
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    sections = [
        header(info),
        lead_section(_read(out_dir, "harness_overhead")),
        overhead_section(_read(out_dir, "harness_overhead")),
        breakdown_section(_read(out_dir, "step_breakdown")),
        compute_section(_read(out_dir, "compute_efficiency")),
        comm_section(_read(out_dir, "comm_efficiency")),
        scale_section(_read(out_dir, "workflow_scale")),
        startup_section(_read(out_dir, "startup")),
    ]
    return "\n".join(sections)


#: The terminal's one line per row of each benchmark's csv, in the order printed.
SHORT_LINES: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    (
        "harness_overhead",
        lambda r: (
            f"harness  {r['framework']:<10} {r['model']:<12} ratio {fmt_range(r, 'ratio', 3):<24}"
            f" {r['verdict']:<9} cpu {fmt_range(r, 'cpu_ratio', 3):<24} {r.get('verdict_cpu', 'n/a')}"
        ),
    ),
    (
        "compute_efficiency",
        lambda r: (
            f"roofline {r['framework']:<10} {r['model']:<12} fraction {fmt_range(r, 'fraction', 3):<24}"
            f" cpu {fmt_range(r, 'cpu_fraction', 3)}"
        ),
    ),
    (
        "comm_efficiency",
        lambda r: (
            f"comm     {r['framework']:<10} {str(r['model']):<12} vs TCP {fmt_range(r, 'vs_tcp', 2)}"
            f"  vs MPI {fmt_range(r, 'vs_mpi', 2)}"
        ),
    ),
    (
        "workflow_scale",
        lambda r: (
            f"scale    {r['task']:<28} {r['runs']:>6} runs  wall {fmt_range(r, 'wall_s', 1)} s"
            f"  cpu {fmt(r['cpu_s_median'], 1)} s  {r['verdict']}"
        ),
    ),
    ("startup", lambda r: f"startup  {r['framework']:<10} {r['model']:<12} {fmt_range(r, 'startup_s', 2)} s"),
)


def short_table(out_dir: Path) -> str:
    """The headline ratios, one line each, for the terminal."""
    lines = []
    for name, line in SHORT_LINES:
        table = _read(out_dir, name)
        if table is not None:
            lines += [line(r) for r in table.to_dict("records")]
    return "\n".join(lines)


def write(out_dir: Path) -> Path:
    return atomic.write_text(out_dir / "summary.md", build(out_dir))
