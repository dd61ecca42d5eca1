"""The benchmarks' arithmetic and tables (pure functions), their registry and worker command
line, plus the FLOP count (in the torch venv), the commbench TCP reference and the figures
for real. No timing is asserted anywhere: benchmarks report, tests check correctness."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
from helpers.paths import REPO, torch_python

from benchmarks import comm_efficiency, harness_overhead, stats, summary, timing, worker_cli, workflow_scale
from benchmarks.comm_efficiency import comm_table
from benchmarks.compute_efficiency import efficiency_table
from benchmarks.harness_overhead import overhead_table
from dlscale.thresholds import threshold


def test_summarize_is_dlscale_stats_interval_and_drops_failed_repeats():
    from dlscale.analysis.stats import median_interval

    s = stats.summarize([3.0, 1.0, float("nan"), 2.0, 10.0, None])
    assert (s.median, s.low, s.high, s.n) == (2.5, 1.0, 10.0, 4)  # up to 5 repeats: the range
    empty = stats.summarize([float("nan")])
    assert empty.n == 0 and math.isnan(empty.median)
    assert s.as_row("x") == {"x_median": 2.5, "x_low": 1.0, "x_high": 10.0, "x_n": 4}
    one = stats.summarize([4.0])
    assert one.median == 4.0 and math.isnan(one.low) and one.n == 1  # one repeat: no interval
    many = [float(v) for v in (9, 1, 5, 3, 7, 2, 8, 4, 6, 10)]
    wide = median_interval(many)  # 10 repeats: order statistics, narrower than the range
    assert (stats.summarize(many).low, stats.summarize(many).high) == (wide.low, wide.high) == (2.0, 9.0)


def test_ratios_are_paired_per_repeat():
    # Repeat 1 was slow for both arms: pairing cancels it, dividing medians would not.
    runner, bare = [100.0, 50.0, 98.0], [100.0, 50.0, 100.0]
    assert stats.paired_ratios(runner, bare) == [1.0, 1.0, 0.98]
    r = stats.ratio_summary(runner, bare)
    assert (r.median, r.low, r.high) == (1.0, 0.98, 1.0)
    assert math.isnan(stats.paired_ratios([1.0], [0.0])[0])
    with pytest.raises(ValueError, match="unpaired"):
        stats.paired_ratios([1.0, 2.0], [1.0])


def test_arm_order_rotates_so_each_arm_leads_equally_often():
    arms = ("runner", "bare", "peak")
    orders = [timing.arm_order(r, arms) for r in range(6)]
    assert orders[0] == ["runner", "bare", "peak"] and orders[1] == ["bare", "peak", "runner"]
    assert all(sorted(o) == sorted(arms) for o in orders)
    firsts = [o[0] for o in orders]
    assert {a: firsts.count(a) for a in arms} == {"runner": 2, "bare": 2, "peak": 2}
    assert timing.arm_order(3, []) == []


def test_gap_throughput_roofline_bandwidth_verdict():
    assert timing.median_gap([0.0, 1.0, 3.0, 4.0]) == 1.0
    # gaps 1, 2, 1, 5: the lowest, and the 10th percentile of four (the lower order statistic)
    assert timing.quantile_gap([0.0, 1.0, 3.0, 4.0, 9.0], 0.0) == 1.0
    assert timing.quantile_gap([0.0, 1.0, 3.0, 4.0, 9.0], 0.1) == 1.0
    assert timing.quantile_gap([0.0, 1.0, 3.0, 4.0, 9.0], 1.0) == 5.0
    with pytest.raises(ValueError):
        timing.quantile_gap([0.0, 1.0], 1.5)
    with pytest.raises(ValueError):
        timing.median_gap([1.0])
    assert timing.throughput(64, 0.5) == 128.0 and math.isnan(timing.throughput(64, 0.0))
    assert timing.finite_median([3.0, None, float("nan"), 1.0]) == 2.0
    assert math.isnan(timing.finite_median([]))
    assert stats.roofline_fraction(100.0, 1e9, 2e11) == 0.5
    assert stats.bandwidth(1e6, 0.5) == 2e6
    harness = threshold("harness_ratio").passes
    assert stats.verdict(0.98, harness) == "pass" and stats.verdict(0.96, harness) == "miss"
    assert stats.verdict(12.0, workflow_scale.below(20.0)) == "pass"
    assert stats.verdict(float("nan"), harness) == "n/a"


def test_interval_verdict_reads_the_whole_interval():
    """A median's verdict comes from its interval: pass only when all of it keeps the
    reference, miss only when all of it breaks it, undecided in between or with one repeat."""
    harness = threshold("harness_ratio")  # at least 0.97
    at_most = threshold("validation_error")  # at most 0.10
    verdict = stats.interval_verdict
    assert verdict(stats.Summary(0.99, 0.975, 1.01, 5), harness) == "pass"
    assert verdict(stats.Summary(0.97, 0.97, 0.98, 3), harness) == "pass"  # the bound passes
    assert verdict(stats.Summary(0.95, 0.94, 0.969, 5), harness) == "miss"
    assert verdict(stats.Summary(0.99, 0.95, 1.01, 5), harness) == "undecided"  # median passes
    assert verdict(stats.Summary(0.95, 0.93, 0.98, 5), harness) == "undecided"  # median misses
    assert verdict(stats.Summary(0.99, math.nan, math.nan, 1), harness) == "undecided"
    assert verdict(stats.Summary(math.nan, math.nan, math.nan, 0), harness) == "n/a"
    assert verdict(stats.Summary(0.05, 0.02, 0.08, 3), at_most) == "pass"
    assert verdict(stats.Summary(0.20, 0.12, 0.30, 3), at_most) == "miss"
    assert verdict(stats.Summary(0.08, 0.05, 0.12, 3), at_most) == "undecided"


def _raw() -> pd.DataFrame:
    rows = []
    for repeat, (runner, bare, peak) in enumerate(
        [(95.0, 100.0, 4e10), (50.0, 50.0, 2e10), (99.0, 100.0, 4e10)]
    ):
        base = {"framework": "torch", "model": "lenet", "batch": 64, "threads": 1, "repeat": repeat}
        rows.append(
            {
                **base,
                "arm": "runner",
                "samples_per_s": runner,
                "samples_per_cpu_s": runner * 2,
                "samples_per_cpu_q_s": runner * 3 + repeat,
            }
        )
        rows.append({**base, "arm": "bare", "samples_per_s": bare, "samples_per_cpu_s": bare * 2,
                     "samples_per_cpu_q_s": bare * 3})  # fmt: skip
        rows.append({**base, "arm": "peak", "peak_flops": peak, "peak_flops_cpu": peak})
    return pd.DataFrame(rows)


def test_overhead_table_pairs_runner_and_bare():
    table = overhead_table(_raw())
    row = table.iloc[0]
    assert (row["ratio_median"], row["ratio_low"], row["ratio_high"]) == (0.99, 0.95, 1.0)
    assert row["cpu_ratio_median"] == 0.99
    # paired per repeat: 285/300, 151/150, 299/300
    assert row["cpu_q_ratio_median"] == pytest.approx(299 / 300) and row["cpu_q_ratio_n"] == 3
    assert row["cpu_q_ratio_high"] == pytest.approx(151 / 150)
    # Medians at or above 0.97, intervals reaching below it (0.95): undecided, not pass.
    assert (row["verdict"], row["verdict_cpu_q"]) == ("undecided", "undecided")
    assert row["target"] == threshold("harness_ratio").value
    assert row["runner_samples_per_s_median"] == 95.0


def _bigdl_raw() -> pd.DataFrame:
    """BigDL's three arms: runner and bare on the standalone cluster, bare_local on local[1]."""
    rows = []
    for repeat, (runner, bare, local) in enumerate([(30.0, 31.0, 40.0), (20.0, 20.0, 25.0)]):
        base = {"framework": "bigdl", "model": "alexnet", "batch": 16, "threads": 1, "repeat": repeat}
        rows += [{**base, "arm": "runner", "samples_per_s": runner}, {**base, "arm": "bare", "samples_per_s": bare},
                 {**base, "arm": "bare_local", "samples_per_s": local}]  # fmt: skip
    return pd.DataFrame(rows)


def test_overhead_table_splits_deployment_from_harness():
    table = overhead_table(pd.concat([_raw(), _bigdl_raw()], ignore_index=True)).set_index("framework")
    bigdl = table.loc["bigdl"]
    # harness: runner / bare on the same deployment, paired: 30/31, 20/20
    assert bigdl["ratio_median"] == pytest.approx((30 / 31 + 1.0) / 2)
    assert bigdl["ratio_low"] == pytest.approx(30 / 31) and bigdl["ratio_n"] == 2
    # deployment: bare standalone / bare local, paired: 31/40, 20/25
    assert bigdl["deployment_ratio_low"] == pytest.approx(0.775) and bigdl["deployment_ratio_high"] == 0.8
    assert bigdl["bare_local_samples_per_s_median"] == 32.5
    assert table.loc["torch", "deployment_ratio_n"] == 0  # no local arm: no deployment ratio


def test_bigdl_alone_with_a_failed_arm_keeps_the_other_arms():
    """A bench of BigDL alone (no CPU-time column anywhere: pd.NA, as ``measure`` fills it)
    where one repeat's local arm failed: the harness ratio pairs both repeats, the
    deployment ratio the one it has, and the failure is reported with its arm."""
    raw = _bigdl_raw()
    raw = raw[~((raw["repeat"] == 1) & (raw["arm"] == "bare_local"))]
    failed = {"framework": "bigdl", "model": "alexnet", "batch": 16, "threads": 1, "repeat": 1, "arm": "failed",
              "failure": "bare_local arm: exit 1: java.lang.OutOfMemoryError: Java heap space"}  # fmt: skip
    raw = pd.concat([raw, pd.DataFrame([failed])], ignore_index=True)
    for name in harness_overhead.RAW_COLUMNS:
        if name not in raw:
            raw[name] = pd.NA
    row = overhead_table(raw[list(harness_overhead.RAW_COLUMNS)]).iloc[0]
    assert row["ratio_n"] == 2 and row["ratio_median"] == pytest.approx((30 / 31 + 1.0) / 2)
    assert row["deployment_ratio_n"] == 1 and row["deployment_ratio_median"] == pytest.approx(31 / 40)
    assert row["cpu_ratio_n"] == 0
    assert harness_overhead.failures(raw) == [
        "bigdl/alexnet: bare_local arm: exit 1: java.lang.OutOfMemoryError: Java heap space"
    ]
    # each repeat's fraction against its own peak: the runner's repeats, not the peaks', count
    peaks = pd.DataFrame([{"framework": "bigdl", "model": "alexnet", "batch": 16, "threads": 1, "repeat": r,
                           "arm": "peak", "peak_flops": 1e9 * (r + 1)} for r in (0, 1)])  # fmt: skip
    runner_lost = raw[~((raw["repeat"] == 0) & (raw["arm"] == "runner"))]
    flops = pd.DataFrame({"model": ["alexnet"], "flops_per_sample": [1e7]})
    fraction = efficiency_table(pd.concat([runner_lost, peaks], ignore_index=True), flops).iloc[0]
    assert fraction["fraction_n"] == 1 and fraction["fraction_median"] == pytest.approx(20.0 * 1e7 / 2e9)
    assert fraction["bare_fraction_n"] == 2


def test_local_mode_heap_holds_the_driver_and_the_executor():
    from benchmarks.bigdl_worker import jvm_bytes, local_heap

    assert jvm_bytes("3g") == 3 << 30 and jvm_bytes("512m") == 512 << 20 and jvm_bytes("1048576") == 1 << 20
    assert local_heap("3g", "6g") == "9216m" and local_heap("512m", "1g") == "1536m"


def test_summary_leads_with_every_framework_model_ratio(tmp_path):
    from dlscale import catalog

    failed = pd.DataFrame([{"framework": "caffe", "model": "resnet50", "batch": 8, "threads": 1, "repeat": -1,
                            "arm": "failed", "failure": "timed out after 2700 s"}])  # fmt: skip
    raw = pd.concat([_raw(), _bigdl_raw(), failed], ignore_index=True)
    assert harness_overhead.failures(raw) == ["caffe/resnet50: timed out after 2700 s"]
    efficiency_table(  # a failed cell has no arms: no fractions, no error
        pd.concat([_raw(), failed], ignore_index=True),
        pd.DataFrame({"model": ["lenet", "alexnet", "resnet50"], "flops_per_sample": [1.0] * 3}),
    )
    overhead_table(raw).to_csv(tmp_path / "harness_overhead.csv", index=False)
    text = summary.build(tmp_path)
    lead = text.split("## Harness ratio, every framework x model")[1].split("\n## ")[0]
    assert text.index("## Harness ratio, every framework x model") < text.index("## 1. Harness overhead")
    lines = [line for line in lead.splitlines() if line.startswith("| ")]
    assert lines[0] == "| framework | " + " | ".join(catalog.MODEL_NAMES) + " |"
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in lines[1:]}
    assert set(catalog.FRAMEWORK_NAMES) <= set(rows)
    lenet = catalog.MODEL_NAMES.index("lenet")
    alexnet = catalog.MODEL_NAMES.index("alexnet")
    assert rows["torch"][lenet] == "0.990 [0.950, 1.000] n=3 **undecided**"  # reaches below 0.97
    assert rows["torch"][alexnet].rstrip(" |") == "not measured"
    assert rows["bigdl"][alexnet].startswith("0.984 [0.968, 1.000] n=2 **undecided**")
    deployment = rows["bigdl deployment (bare standalone / bare local)"]
    assert deployment[alexnet] == "0.788 [0.775, 0.800] n=2"  # no mark: not the harness
    assert "torch deployment (bare standalone / bare local)" not in rows
    assert rows["caffe"][catalog.MODEL_NAMES.index("resnet50")].startswith("failed: timed out after 2700 s")
    assert "coverage 5 repeats 94%, 3 repeats 75%, 2 repeats 50%" in lead
    for share, mark in ((0.9, "miss"), (0.98, "pass")):  # every repeat's runner at share x its bare
        raw = _raw()
        bare = raw[raw["arm"] == "bare"].set_index("repeat")["samples_per_s"]
        runner = raw["arm"] == "runner"
        raw.loc[runner, "samples_per_s"] = raw.loc[runner, "repeat"].map(bare) * share
        overhead_table(raw).to_csv(tmp_path / "harness_overhead.csv", index=False)
        assert f"{share:.3f} [{share:.3f}, {share:.3f}] n=3 **{mark}**" in summary.build(tmp_path)


def test_median_coverage_is_the_order_statistic_interval():
    assert summary.median_coverage(5) == pytest.approx(1 - 2 / 32)
    assert summary.median_coverage(2) == pytest.approx(0.5) and summary.median_coverage(1) == 0.0
    assert summary.median_coverage(10) == pytest.approx(1 - 2 * 11 / 1024)  # [x_(2), x_(9)]


def test_efficiency_table_uses_each_repeats_own_peak():
    flops = pd.DataFrame({"model": ["lenet"], "flops_per_sample": [2e8]})
    row = efficiency_table(_raw(), flops).iloc[0]
    # fractions per repeat: 95*2e8/4e10, 50*2e8/2e10, 99*2e8/4e10 = 0.475, 0.5, 0.495
    assert row["fraction_median"] == pytest.approx(0.495)
    assert row["fraction_low"] == pytest.approx(0.475)
    assert row["bare_fraction_high"] == pytest.approx(0.5)
    assert row["peak_flops_median"] == 4e10
    # CPU-time throughput is twice the wall one here, against the same peak
    assert row["cpu_fraction_median"] == pytest.approx(0.99)


def test_comm_table_ratios_against_tcp_and_mpi():
    raw = pd.DataFrame(
        [
            {"repeat": r, "transport": t, "nbytes": 4000, "bytes_per_s": bw}
            for r, scale in enumerate((1.0, 0.5))
            for t, bw in (("tcp", 2e9 * scale), ("mpi", 1e9 * scale), ("torch", 1e9 * scale))
        ]
    )
    flops = pd.DataFrame({"model": ["lenet"], "gradient_bytes": [4000]})
    row = comm_table(raw, flops, ["torch"]).iloc[0]
    assert row["model"] == "lenet" and row["nbytes"] == 4000
    assert row["vs_tcp_median"] == 0.5 and row["vs_tcp_low"] == 0.5
    assert row["vs_mpi_median"] == 1.0
    assert row["tcp_bytes_per_s_high"] == 2e9


@pytest.mark.parametrize("runs", [100, 1000, 10000])
def test_generated_studies_have_exactly_the_asked_runs(runs, schema):
    from dlscale.study import matrix, validation

    config = workflow_scale.study_of_size(runs, "/nonexistent/envs")
    validated = validation.validate_config(config, schema, REPO)
    assert len(matrix.expand_runs(validated)) == runs
    with pytest.raises(ValueError):
        workflow_scale.study_of_size(101, "x")


def test_synthetic_events_aggregate_as_ok_runs(tmp_path):
    from dlscale import catalog
    from dlscale.analysis import tables

    paths = workflow_scale.write_synthetic_study(tmp_path, runs=20)
    assert len(paths) == 20
    runs, iterations = tables.load_events(paths)
    assert runs["status"].eq("ok").all(), runs[["run_id", "reason"]]
    assert set(runs["nodes"]) == set(workflow_scale.AGG_NODES)
    lenet = runs[runs["model"].eq("lenet")]
    assert lenet["timed_iterations"].eq(catalog.model("lenet").iterations).all()
    assert len(iterations) == sum(
        (catalog.model(model).iterations + workflow_scale.AGG_WARMUP) * nodes
        for model, nodes in zip(runs["model"], runs["nodes"], strict=True)
    )


def test_summary_tables_have_targets_and_verdicts(tmp_path):
    overhead_table(_raw()).to_csv(tmp_path / "harness_overhead.csv", index=False)
    pd.DataFrame(
        [{"task": "snakemake -n", "runs": 10000, "wall_s_median": 25.0, "wall_s_low": 24.0,
          "wall_s_high": 30.0, "cpu_s_median": 15.0, "peak_rss_mb_max": 400.0,
          "loadavg_1m_median": 8.0, "target_s": 20.0, "verdict": "miss", "verdict_cpu": "pass"}]
    ).to_csv(tmp_path / "workflow_scale.csv", index=False)  # fmt: skip
    text = summary.build(tmp_path)
    assert "| torch | lenet | 64 | 1 | 3 |" in text
    assert "0.990 [0.950, 1.000]" in text and "0.990 [0.950, 1.000] n=3 **undecided**" in text
    assert "25.0 [24.0, 30.0]" in text and "| miss | pass |" in text
    assert "## 3. Communication efficiency" in text and "Not measured." in text
    assert "Where a BigDL iteration goes" in text
    short = summary.short_table(tmp_path)
    assert "harness  torch" in short and "scale    snakemake -n" in short


def test_fmt_helpers():
    assert summary.fmt(float("nan")) == "-" and summary.fmt(1.234, 1) == "1.2"
    assert summary.fmt_range({"x_median": 1.0, "x_low": 0.5, "x_high": 2.0}, "x", 1) == "1.0 [0.5, 2.0]"
    assert summary.fmt_range({"x_median": 1.0}, "x") == "1.00 [one repeat]"
    assert summary.fmt_range({"x_median": float("nan")}, "x") == "-"
    assert summary.markdown_table(["a", "b"], [["1", "2"]]).splitlines() == [
        "| a | b |",
        "|---|---|",
        "| 1 | 2 |",
    ]


def test_commbench_rows_become_one_median_a_size():
    """A commbench run's rows, reduced to the bench's one value a size: only the arm's own
    library, op and world; the median of its operations; Spark's whole-row bytes keyed by
    the size asked for (its bandwidth counted from what it moved)."""
    from benchmarks.common import commbench_sizes

    rows = [
        {"library": "spark", "op": "shuffle", "world": "2", "nbytes": "1703936", "seconds": s}
        for s in ("0.3", "0.1", "0.2")
    ]
    rows += [{"library": "spark", "op": "shuffle", "world": "1", "nbytes": "1703936", "seconds": "9"}]
    rows += [{"library": "spark", "op": "job", "world": "2", "nbytes": "0", "seconds": "9"}]
    rows += [{"library": "spark", "op": "shuffle", "world": "2", "nbytes": "4194304", "seconds": "9"}]
    found = commbench_sizes(rows, [1724320, 11349256], "spark", "shuffle")
    assert found == [
        {"nbytes": 1724320, "moved": 1703936, "seconds": 0.2, "library": "spark", "op": "shuffle"}
    ]


def test_the_tcp_reference_comes_from_commbench(tmp_path):
    """The reference arm runs ``dlscale.commbench.tcp`` (the scaling model's ping-pong) and
    gives one row a size for the communication table."""
    from benchmarks.common import CommJob

    job = CommJob("tcp", sys.executable, [4096, 1 << 20], 2, 120.0)
    rows = comm_efficiency.tcp(job)
    assert [r["nbytes"] for r in rows] == [4096, 1 << 20] and all(r["seconds"] > 0 for r in rows)
    assert {(r["library"], r["op"]) for r in rows} == {("tcp", "pingpong")}


MLP_FLOPS_CODE = """
import json, torch
from torch import nn
from benchmarks.torch_worker import count_flops
mlp = nn.Sequential(nn.Linear(10, 5), nn.ReLU(), nn.Linear(5, 3))
x, y = torch.randn(4, 10), torch.randint(0, 3, (4,))
print(json.dumps({"mlp": count_flops(mlp, x, y, nn.CrossEntropyLoss()) / 4}))
"""


def test_flop_count_matches_hand_counts():
    """Forward + backward FLOPs (2 per multiply-add) of matmuls and convolutions, counted in
    the torch venv (dlscale installed there: nothing on PYTHONPATH); LeNet's through the
    torch worker's real command line (``flops``), as ``make bench`` asks for it.

    MLP 10-5-3 per sample: forward 2*(50+15) = 130; backward: weight grads 130, input grad
    of the second layer 30 (the input needs no grad) -> 290. LeNet (Caffe's): forward MACs
    conv1 20*24*24*25 + conv2 50*8*8*500 + ip1 800*500 + ip2 500*10 = 2,293,000 -> 4,586,000
    FLOPs; backward: weight grads 4,586,000 + input grads of all but conv1 4,010,000.
    """
    from benchmarks import torch_bench
    from dlscale import catalog

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(torch_python()), "-c", MLP_FLOPS_CODE],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["mlp"] == 290
    (lenet,) = torch_bench.flops(torch_python(), ["lenet"], timeout_s=300)
    assert lenet["model"] == "lenet" and lenet["flops_per_sample"] == 2 * 4_586_000 + 4_010_000
    assert (
        lenet["parameters"] == catalog.PARAMETERS["lenet"]
        and lenet["gradient_bytes"] == 4 * lenet["parameters"]
    )


def test_every_framework_has_a_benchmark_entry_and_comm_jobs_know_their_models():
    from benchmarks.common import CommJob
    from benchmarks.registry import FRAMEWORKS, covered
    from dlscale import catalog

    found, missing = covered(catalog.FRAMEWORK_NAMES)
    # A bench module is optional for a framework (``make bench`` reports one without it as
    # "not covered"): a new catalog entry is three places, its benchmarks a later addition.
    # The frameworks whose benchmarks are written stay covered.
    assert {"torch", "tensorflow", "bigdl", "caffe"} <= {e.name for e in found}
    assert sorted([e.name for e in found] + missing) == sorted(catalog.FRAMEWORK_NAMES)
    assert list(FRAMEWORKS) == [e.name for e in found]  # keyed and ordered by the catalog
    assert all(e.training and e.comm for e in found)
    assert CommJob("torch", "python", [4], 1, 1.0).models == {}
    # BigDL's arms are a JVM start each: capped repeats, never zero
    bigdl = FRAMEWORKS["bigdl"]
    assert bigdl.repeats(5, "training") == bigdl.max_repeats["training"] and bigdl.repeats(1, "comm") == 1
    assert FRAMEWORKS["torch"].repeats(5, "training") == 5


def test_a_catalog_framework_without_a_bench_module_is_reported_not_covered(monkeypatch):
    from benchmarks import registry
    from dlscale import catalog

    first, *others = registry.FRAMEWORKS
    found, missing = registry.covered(catalog.FRAMEWORK_NAMES, {n: registry.FRAMEWORKS[n] for n in others})
    assert missing == [n for n in catalog.FRAMEWORK_NAMES if n not in others] and first in missing
    assert [e.name for e in found] == others
    # what the registry does for a framework whose benchmarks/<name>_bench.py does not exist
    monkeypatch.setattr(registry, "bench_module", lambda framework: f"benchmarks.{framework}_no_such_bench")
    assert registry._entry(first) is None


def test_bench_modules_never_import_the_registry():
    """No import circle: the registry imports the bench modules, they import common."""
    import ast

    from benchmarks.registry import FRAMEWORKS

    for framework in FRAMEWORKS:  # the catalog's frameworks that have a bench module
        tree = ast.parse((REPO / "benchmarks" / f"{framework}_bench.py").read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "benchmarks.registry" not in imported, framework


def test_worker_command_lines_round_trip(tmp_path, capsys):
    """The driver builds a worker's arguments from the table the worker parses them with."""
    from benchmarks.common import bench_spec, bench_studies, worker_command

    spec = bench_spec(bench_studies(["lenet"]), "torch", "lenet")
    cmd = worker_command("py", "torch", "training", spec=spec, data=tmp_path, repeats=2)
    assert cmd[:4] == ["py", "-m", "benchmarks.torch_worker", "training"]
    args = worker_cli.parse_args(["training"], cmd[3:])
    assert args.spec == spec and args.data == tmp_path and args.repeats == 2
    flops = worker_cli.parse_args(["flops"], worker_cli.arguments("flops", models=["lenet", "alexnet"]))
    assert flops.models == ["lenet", "alexnet"]
    assert "allreduce" not in worker_cli.COMMANDS  # communication is dlscale.commbench's
    assert worker_cli.arguments("bare", peak=True)[-1] == "--peak" and "--peak" not in worker_cli.arguments(
        "bare", peak=False
    )
    with pytest.raises(TypeError, match="no option 'repeats'"):
        worker_cli.arguments("flops", repeats=1)

    def rows(args):
        yield {"model": args.models[0], "n": 1}
        print("progress, not a row")

    assert worker_cli.main({"flops": rows}, ["flops", "--models", "lenet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[0]) == {"model": "lenet", "n": 1}
    from benchmarks.common import parse_json_lines

    assert parse_json_lines("\n".join(out)) == [{"model": "lenet", "n": 1}]


def test_bench_iterations_and_repeats_follow_the_catalog():
    from benchmarks.common import (
        IMAGENET_MAX_REPEATS,
        MNIST_BENCH_ITERATIONS,
        bench_iterations,
        training_repeats,
    )
    from dlscale import catalog

    for name, model in catalog.MODELS.items():
        warmup, timed = bench_iterations(name)
        assert warmup >= 1 and timed >= 3
        if model.mnist_sized:
            assert (warmup, timed) == MNIST_BENCH_ITERATIONS and training_repeats(name, 5) == 5
        else:
            assert timed <= model.iterations and training_repeats(name, 5) == IMAGENET_MAX_REPEATS
    assert bench_iterations("alexnet") == (1, 4) and bench_iterations("resnet50") == (1, 3)


def test_planned_jobs_read_from_a_dry_run():
    text = "Building DAG of jobs...\nJob stats:\njob      count\n-----  -------\nall          1\ntrain      100\ntotal      101\n"
    assert workflow_scale.planned_jobs(text) == {"all": 1, "train": 100}


def test_figures_are_saved_whole_as_html_and_png(tmp_path):
    from benchmarks import figures

    overhead_table(_raw()).to_csv(tmp_path / "harness_overhead.csv", index=False)
    flops = pd.DataFrame({"model": ["lenet"], "flops_per_sample": [2e8]})
    efficiency_table(_raw(), flops).to_csv(tmp_path / "compute_efficiency.csv", index=False)
    written = figures.write(tmp_path)
    assert [p.name for p in written] == ["training.html", "training.png"]
    assert all(p.stat().st_size > 0 for p in written)
    assert (tmp_path / "training.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_comm_table_pairs_a_framework_with_fewer_repeats_on_its_own_repeats():
    rows = [{"repeat": r, "transport": "tcp", "nbytes": 4000, "bytes_per_s": bw}
            for r, bw in enumerate((2e9, 1e9, 4e9))]  # fmt: skip
    rows += [{"repeat": r, "transport": "mpi", "nbytes": 4000, "bytes_per_s": 1e9} for r in range(3)]
    rows += [{"repeat": 1, "transport": "bigdl", "nbytes": 4000, "bytes_per_s": 5e8}]
    flops = pd.DataFrame({"model": ["lenet"], "gradient_bytes": [4000]})
    row = comm_table(pd.DataFrame(rows), flops, ["bigdl", "torch"]).iloc[0]
    assert row["framework"] == "bigdl" and row["vs_tcp_n"] == 1
    assert row["vs_tcp_median"] == 0.5  # against repeat 1's TCP (1e9), not the median (2e9)
    assert row["tcp_bytes_per_s_n"] == 3  # the reference columns keep every repeat


def _bigdl_events(warmup: int, steps: list[float], gap: float = 0.05) -> list[dict]:
    events, clock = [], 100.0
    for i, step in enumerate(steps):
        clock += step + gap
        events.append({"iteration": i, "time": clock, "step_s": step, "compute_s": step / 2,
                       "comm_s": step / 2, "warmup": i < warmup})  # fmt: skip
    return events


def test_bigdl_log_rates_from_iteration_events():
    from benchmarks.timing import log_rates

    events = _bigdl_events(2, [5.0, 1.0, 0.45, 0.45, 0.45, 0.95])
    rates = log_rates(list(reversed(events)), warmup=2, batch=64)  # order does not matter
    # gaps from the end of the last warm-up iteration: 0.5, 0.5, 0.5, 1.0
    assert rates["samples_per_s"] == pytest.approx(128.0)
    assert rates["self_timed_samples_per_s"] == pytest.approx(64 / 0.45)
    assert rates["compute_s"] == pytest.approx(0.225) and rates["comm_s"] == pytest.approx(0.225)
    assert math.isnan(rates["samples_per_cpu_s"])
    no_metrics = [{**e, "compute_s": None, "comm_s": None} for e in events]
    assert math.isnan(log_rates(no_metrics, 2, 64)["comm_s"])
    with pytest.raises(ValueError):
        log_rates(events, warmup=0, batch=64)
    with pytest.raises(ValueError):
        log_rates(events[:3], warmup=2, batch=64)


def test_step_breakdown_splits_bigdl_iterations_only():
    from benchmarks.harness_overhead import step_breakdown

    raw = _raw().assign(step_s=math.nan, compute_s=math.nan, comm_s=math.nan)
    base = {"framework": "bigdl", "model": "lenet", "batch": 64, "threads": 1}
    for repeat in range(2):
        raw.loc[len(raw)] = {**base, "repeat": repeat, "arm": "runner", "samples_per_s": 128.0,
                             "step_s": 0.4, "compute_s": 0.25, "comm_s": 0.15}  # fmt: skip
        raw.loc[len(raw)] = {**base, "repeat": repeat, "arm": "bare", "samples_per_s": 160.0,
                             "step_s": 0.35, "compute_s": 0.25, "comm_s": 0.10}  # fmt: skip
    table = step_breakdown(raw).set_index("arm")
    assert list(table["framework"]) == ["bigdl", "bigdl"] and table.loc["runner", "repeats"] == 2
    assert table.loc["runner", "iteration_s"] == pytest.approx(0.5)
    assert table.loc["runner", "between_s"] == pytest.approx(0.1)
    assert table.loc["bare", "sync_s"] == pytest.approx(0.10)
    assert step_breakdown(_raw()).empty


def test_startup_fields_and_reuse_of_launcher_runner_arms():
    from benchmarks.common import startup_fields
    from benchmarks.startup import reused_rows, startup_table

    events = [
        {"event": "run_start", "time": 10.0, "startup_s": 31.0},
        *(
            {"event": "iteration", "rank": 0, "time": 40.0 + i, "step_s": 1.0, "warmup": i < 1}
            for i in range(3)
        ),
        {"event": "run_end", "wall_s": 45.0},
    ]
    fields = startup_fields(events)
    assert fields["to_first_step_s"] == 29.0 and fields["warmup_s"] == 2.0
    assert fields["median_step_s"] == 1.0 and fields["wall_s"] == 45.0
    raw = pd.DataFrame(
        [{"framework": "bigdl", "model": m, "repeat": 0, "arm": a, **fields}
         for m in ("lenet", "autoencoder") for a in ("runner", "bare")]
        + [{"framework": "torch", "model": "lenet", "repeat": 0, "arm": "runner"}]
    )  # fmt: skip
    rows = reused_rows(raw, "bigdl", ("lenet",))
    assert len(rows) == 1 and rows[0]["source"] == "training runner arm" and rows[0]["startup_s"] == 31.0
    assert reused_rows(raw, "torch", ("lenet",)) == [] and reused_rows(None, "bigdl", ("lenet",)) == []
    table = startup_table(pd.DataFrame(rows))
    assert table.iloc[0]["runs"] == 1 and table.iloc[0]["source"] == "training runner arm"


def test_bare_loop_helpers(tmp_path):
    import numpy as np

    from benchmarks import bare_common

    images = np.arange(2 * 2 * 2 * 1, dtype=np.uint8).reshape(2, 2, 2, 1)
    ae = bare_common.normalised(images, "autoencoder", 0.5, 0.25, nchw=True)
    assert ae.shape == (2, 1, 2, 2) and ae.dtype == np.float32 and ae.flags.c_contiguous
    # Canonical strides, as the torch runner's tensors have (not the transposed view's, which
    # numpy already calls C-contiguous when there is one channel).
    assert ae.strides == (16, 16, 8, 4)
    assert ae[0, 0, 0, 1] == np.float32(1) / np.float32(255)
    cls = bare_common.normalised(images, "lenet", 0.5, 0.25, nchw=False)
    assert cls.shape == (2, 2, 2, 1) and cls[0, 0, 0, 0] == np.float32(-2.0)
    # 64 samples per step, one step per 0.5 s after the warm-up stamp at index 1
    assert bare_common.intervals_throughput(64, [0.0, 5.0, 5.5, 6.0, 6.5], first=1) == 128.0
    # the lowest gap after the warm-up stamp (0.25 s) for the CPU-time quantile
    assert bare_common.intervals_throughput(64, [0.0, 5.0, 5.5, 5.75, 6.5], first=1, q=0.0) == 256.0
    peak = bare_common.matmul_peak(bare_common.numpy_matmul, sizes=(32,), seconds=0.01)
    assert peak["peak_flops"] > 0 and peak["peak_flops_cpu"] > 0


def test_runner_arm_times_a_runner_from_its_events(tmp_path):
    """The framework-neutral runner arm, on a stand-in train(ctx) that records iterations."""
    from benchmarks.common import bench_spec, bench_studies
    from benchmarks.runner_arm import rotate_arms, runner_arm

    spec = bench_spec(bench_studies(["lenet"]), "torch", "lenet", iterations=(1, 4))
    seen = []

    def train(ctx):
        seen.append(ctx.spec)
        for i in range(ctx.total_iterations):
            ctx.record_iteration(i, samples=spec.batch, step_s=0.001, compute_s=0.001, comm_s=0.0, loss=1.0)

    row = runner_arm(train, spec, tmp_path, tmp_path, 0)
    assert seen == [spec]  # the runner receives the RunSpec itself
    assert set(row) == {
        "samples_per_s",
        "samples_per_cpu_s",
        "samples_per_cpu_q_s",
        "self_timed_samples_per_s",
    }
    assert row["self_timed_samples_per_s"] == pytest.approx(spec.batch / 0.001)
    assert row["samples_per_s"] > 0
    rows = list(rotate_arms(spec, 2, {"a": lambda r: {"x": r}, "b": lambda r: {"x": -r}}))
    assert [(r["arm"], r["repeat"], r["x"]) for r in rows] == [
        ("a", 0, 0),
        ("b", 0, 0),
        ("b", 1, -1),
        ("a", 1, 1),
    ]
    assert {(r["model"], r["batch"], r["threads"]) for r in rows} == {
        ("lenet", spec.batch, spec.threads_per_rank)
    }


def test_a_failed_workers_reason_leads_with_its_error_line():
    """A failed arm's row names its cause (the summary cell holds 300 characters), not only
    the command: the last stderr line that states an error, stack frames skipped."""
    from benchmarks.common import BenchError, error_line, finish, start

    java = "Exception in thread main\norg.apache.spark.SparkException: Job aborted\n\tat org.x.Y(Y.scala:1)\n"
    assert error_line(java) == "org.apache.spark.SparkException: Job aborted"
    assert error_line("warming up\nall fine\n") == ""
    cmd = [
        sys.executable,
        "-c",
        "import sys; print('progress', file=sys.stderr); raise ValueError('bad batch')",
    ]
    with pytest.raises(BenchError) as err:
        finish(start(cmd, dict(os.environ)), cmd, timeout=60)
    first = str(err.value).splitlines()[0]
    assert first.startswith("exit 1: ValueError: bad batch (") and "-c" in first


class _Optimizer:
    """Stands in for BigDL's Optimizer: logs iterations, then behaves as asked after them."""

    def __init__(self, logged: list[int], total: int, after: str) -> None:
        self.logged, self.total, self.after = logged, total, after
        self.cancelled = __import__("threading").Event()

    def optimize(self) -> None:
        done = self.total - 1 if self.after == "fails-early" else self.total
        self.logged.append(done)
        if self.after == "hangs":
            self.cancelled.wait(30)  # the gather, until its Spark job is cancelled
            raise RuntimeError("Job cancelled")
        if self.after in ("fails", "fails-early"):
            raise RuntimeError("java.io.NotSerializableException: in getModel")

    def cancelAllJobs(self) -> None:  # noqa: N802 - SparkContext's name
        self.cancelled.set()


@pytest.mark.parametrize("after", ["returns", "fails", "hangs", "fails-early"])
def test_bigdl_bare_loop_keeps_its_iterations_whatever_the_gather_does(monkeypatch, tmp_path, after):
    """The bare arm is its logged iterations: a post-training gather that fails or hangs
    (seen: ResNet-50, local[1] AlexNet) is a warning and is cut short; a run that did not
    log every iteration still fails with optimize's own error."""
    from benchmarks import bigdl_worker

    logged: list[int] = []
    monkeypatch.setattr(bigdl_worker, "iterations_logged", lambda path: logged[-1] if logged else 0)
    monkeypatch.setattr(bigdl_worker, "GATHER_GRACE_S", 0.5)
    monkeypatch.setattr(bigdl_worker, "POLL_S", 0.05)
    optimizer = _Optimizer(logged, total=5, after=after)

    def run() -> str | None:
        return bigdl_worker.optimize_until_logged(optimizer, optimizer, tmp_path / "driver.log", 5)

    if after == "fails-early":
        with pytest.raises(RuntimeError, match="NotSerializable"):
            run()
        return
    outcome = run()
    if after == "returns":
        assert outcome is None and not optimizer.cancelled.is_set()
    elif after == "fails":
        assert outcome.startswith("the post-training gather failed: RuntimeError: java.io.NotSerializable")
    else:
        assert optimizer.cancelled.is_set() and outcome.startswith("the post-training gather was cancelled")


def test_uncapped_bench_runs_the_asked_repeats_for_every_framework():
    """BigDL's arms are capped (a JVM start each) unless ``--uncapped`` asks for all of them."""
    from benchmarks.__main__ import parse_args, selected

    capped, _ = selected(parse_args(["--frameworks", "bigdl", "torch", "--repeats", "5"]))
    uncapped, _ = selected(parse_args(["--frameworks", "bigdl", "torch", "--repeats", "5", "--uncapped"]))
    assert {e.name for e in capped} == {e.name for e in uncapped} == {"bigdl", "torch"}
    by_name = {e.name: e for e in capped}
    assert by_name["bigdl"].repeats(5, "training") < 5 and by_name["torch"].repeats(5, "training") == 5
    assert all(e.repeats(5, "training") == 5 for e in uncapped)
