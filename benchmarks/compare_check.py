"""Does ``python -m dlscale.compare`` find what changed, and only that, on this machine?

Three small studies are made by the workflow on the local profile, as a user makes them:
BASE, SAME (an independent repeat of BASE) and CHANGED (BASE with one setting of one
framework changed, ``--change``). They are run interleaved, one repeat of each per round in
a rotating order, so that the machine's drift over the minutes falls on all three alike
(Hoefler & Belli, SC15: compare side by side; repeats are the samples). Then BASE is
compared with SAME and with CHANGED, and the counts of ``improved``, ``regressed`` and
``no change`` per comparison are written to ``OUT/summary.md`` and ``OUT/summary.json``.

Expected: SAME changes nothing beyond what its intervals allow (a false change needs a 95 %
interval clear of 1 and of the noise floor, and a rank test at p < 0.05: dlscale.compare.comparison);
CHANGED changes some of the changed framework's cell-metrics and nothing of the other
frameworks'.
The command exits 1 when CHANGED misses its change or changes another framework.

``make compare-check`` (about 8 minutes on 2 cores with the defaults; not part of ``make
test``: its studies are too long for the suite).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from benchmarks.common import ENVS_DIR, REPO, log
from dlscale.base import atomic
from dlscale.compare.comparison import IMPROVED, REGRESSED
from dlscale.thresholds import threshold

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
#: The studies' shared set-up: two frameworks on LeNet at 1 and 2 nodes (throughput,
#: exposed-communication share and efficiency are compared), no tuning, no
#: micro-benchmarks, enough timed iterations for a stable per-run median.
BASE_STUDY: dict[str, Any] = {
    "frameworks": ["torch", "tensorflow"],
    "models": ["lenet"],
    "nodes": [1, 2],
    "iterations": 40,
    "warmup": 3,
}
STUDIES = ("base", "same", "changed")


def parse_change(text: str) -> tuple[str, str, Any]:
    """``FRAMEWORK.OPTION=VALUE`` (VALUE read as YAML: ``false``, ``2``, ``mkl``)."""
    try:
        target, value = text.split("=", 1)
        framework, option = target.split(".", 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--change {text!r}: expected FRAMEWORK.OPTION=VALUE") from None
    return framework, option, yaml.safe_load(value)


def study_config(name: str, repeats: int, change: tuple[str, str, Any]) -> dict[str, Any]:
    config = {**BASE_STUDY, "repeats": repeats, "envs_dir": str(ENVS_DIR)}
    if name == "changed":
        framework, option, value = change
        config[framework] = {option: value}
    return config


def snakemake(workdir: Path, *targets: str, timeout: float = 1800) -> None:
    cmd = [
        *SNAKEMAKE, *targets, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--profile", str(REPO / "profiles" / "local"), "--configfile", str(workdir / "study.yaml"),
    ]  # fmt: skip
    with open(workdir / "snakemake.log", "a", encoding="utf-8") as logfile:
        proc = subprocess.run(cmd, stdout=logfile, stderr=subprocess.STDOUT, timeout=timeout, cwd=workdir)
    if proc.returncode != 0:
        raise SystemExit(f"compare-check: the study in {workdir} failed (see {workdir / 'snakemake.log'})")


def run_interleaved(out: Path, repeats: int, change: tuple[str, str, Any]) -> None:
    """One more repeat of every study per round, the order rotating each round."""
    for round_ in range(repeats):
        order = STUDIES[round_ % 3 :] + STUDIES[: round_ % 3]
        for name in order:
            workdir = out / name
            workdir.mkdir(parents=True, exist_ok=True)
            atomic.write_text(workdir / "study.yaml", yaml.safe_dump(study_config(name, round_ + 1, change)))
            started = time.monotonic()
            snakemake(workdir, "results/runs.csv")
            log(f"round {round_ + 1}/{repeats}: {name} ({time.monotonic() - started:.0f} s)")


def compare(out: Path, new: str) -> pd.DataFrame:
    target = out / f"base-vs-{new}"
    cmd = [sys.executable, "-m", "dlscale.compare.comparison", str(out / "base" / "results"), str(out / new / "results"),
           "--out", str(target)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"compare-check: dlscale.compare.comparison failed: {proc.stderr[-2000:]}")
    return pd.read_csv(target / "comparison.csv")


def judge(same: pd.DataFrame, changed: pd.DataFrame, framework: str) -> dict[str, Any]:
    """Counts per comparison, and whether CHANGED found a change of the changed framework
    (any of its cell-metrics: a slower compute shows at 1 node and as a smaller exposed
    share, and may be hidden by communication at 2) and none of the other frameworks'."""

    def counts(table: pd.DataFrame) -> dict[str, int]:
        return {str(k): int(v) for k, v in table["change"].value_counts().items()}

    moved = changed["change"].isin([IMPROVED, REGRESSED])
    mine = changed["framework"].eq(framework)
    return {
        "same": counts(same),
        "changed": counts(changed),
        "changed_framework_found": bool((moved & mine).any()),
        "other_frameworks_changed": int((moved & ~mine).sum()),
        "same_changed": int(same["change"].isin([IMPROVED, REGRESSED]).sum()),
        "same_cells": len(same),
    }


def summary_markdown(result: dict[str, Any], same: pd.DataFrame, changed: pd.DataFrame) -> str:
    shown = ["framework", "nodes", "metric", "base_median", "new_median", "ratio", "ratio_lower", "ratio_upper",
             "coverage", "p_value", "change"]  # fmt: skip
    lines = [
        f"# compare-check ({result['date']}, {result['repeats']} repeats, interleaved,"
        f" noise floor {result['noise_floor']:g})",
        "",
        f"Change: `{result['change']}`. SAME: {result['same_changed']} of {result['same_cells']} cell-metrics "
        f"changed. CHANGED: a change of the changed framework "
        f"{'found' if result['changed_framework_found'] else 'NOT found'}; "
        f"{result['other_frameworks_changed']} cell-metric(s) of the other frameworks changed.",
        "",
        "## BASE vs SAME",
        "",
        same[shown].to_markdown(index=False, floatfmt=".3g"),
        "",
        "## BASE vs CHANGED",
        "",
        changed[shown].to_markdown(index=False, floatfmt=".3g"),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "results" / "compare-check")
    parser.add_argument("--repeats", type=int, default=6, help="repeats per study (6: bootstrap intervals)")
    parser.add_argument("--change", type=parse_change, default="torch.mkldnn=false")
    parser.add_argument("--compare-only", action="store_true", help="compare the studies already in --out")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.compare_only:
        run_interleaved(args.out, args.repeats, args.change)
    same, changed = compare(args.out, "same"), compare(args.out, "changed")
    framework, option, value = args.change
    result = {
        **judge(same, changed, framework),
        "change": f"{framework}.{option}={value}",
        "repeats": args.repeats,
        "noise_floor": threshold("compare_noise_floor").value,
        "date": time.strftime("%Y-%m-%d"),
    }
    atomic.write_text(args.out / "summary.json", json.dumps(result, indent=2) + "\n")
    atomic.write_text(args.out / "summary.md", summary_markdown(result, same, changed))
    log(json.dumps(result))
    return 0 if result["changed_framework_found"] and not result["other_frameworks_changed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
