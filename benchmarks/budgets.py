"""``python -m benchmarks.budgets`` (``make bench-budgets``): the demo held to its budgets.

Runs the default study (``config.yaml``) as ``make demo`` does, into a fresh working folder
with this checkout's environments and the machine's caches (warm: nothing is built but the
study itself), then says where its time went and whether it kept its budgets
(``dlscale.thresholds``: ``demo_warm_wall``, ``demo_timed_share``):

- the invocation's wall, timed around Snakemake by this process;
- Snakemake's own log split by what ran (``dlscale.analysis.snakelog``: the runs, the tuning
  race, the environments, the analysis, no job at all);
- the runs' wall split from their events (the study's ``results/wall_split.csv``: timed
  steps, warm-up, start-up by part, evaluation, gaps), per framework.

Writes ``budgets.csv`` (one row per budget: measured, reference, verdict), ``demo_split.csv``
(the Snakemake log's split), ``demo_wall_split.csv`` (the runs' split) and ``budgets.md`` under
``--out``; exit 0 when every budget is kept, 1 when one is missed, 2 when the demo failed. A
benchmark, not a test: its numbers are wall times on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from benchmarks.common import REPO, log, write_csv
from dlscale.analysis import snakelog
from dlscale.base import atomic
from dlscale.thresholds import threshold

#: The budgets this benchmark holds the demo to, by threshold name, with what each measures.
BUDGETS = {
    "demo_warm_wall": "the invocation's wall (s)",
    "demo_timed_share": "timed steps / the runs' wall",
}


def demo_command(work: Path, snakemake: Path, cores: str | None = None) -> list[str]:
    """``make demo``'s Snakemake call, into ``work``, on this checkout's environments."""
    return [
        str(snakemake),
        "--snakefile",
        str(REPO / "Snakefile"),
        "--profile",
        str(REPO / "profiles" / "local"),
        "--configfile",
        str(REPO / "config.yaml"),
        "--directory",
        str(work),
        *(["--cores", cores] if cores else []),
        "--config",
        f"envs_dir={REPO / '.venvs'}",
    ]


def invocation_log(work: Path) -> Path:
    """The newest Snakemake log of the study in ``work`` (the invocation just made)."""
    logs = sorted((work / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        raise FileNotFoundError(f"no Snakemake log under {work / '.snakemake' / 'log'}")
    return logs[-1]


def contended_runs(runs: pd.DataFrame) -> int:
    """How many of the demo's runs the contention probe flagged (``runs.csv``'s
    ``contended``): a neighbour's CPU inflates their wall and shrinks their timed share,
    so a budget missed beside them is not the demo's alone (``verdicts`` says so)."""
    if "contended" not in runs:
        return 0
    return int(runs["contended"].astype(str).str.lower().eq("true").sum())


def verdicts(wall_s: float, split: pd.DataFrame, contended: int = 0) -> pd.DataFrame:
    """One row per budget: the measured value, the threshold's reference, pass or miss.

    ``split`` is the study's ``wall_split.csv``; its ``all`` row holds the runs' timed share.
    A miss while ``contended`` runs shared the machine reads ``miss (contended)``: one demo
    on a busy machine cannot tell the demo's cost from its neighbours'.
    """
    everything = split.loc[split["framework"] == "all"]
    share = float(everything["timed_share"].iloc[0]) if len(everything) else float("nan")
    measured = {"demo_warm_wall": wall_s, "demo_timed_share": share}
    rows = []
    for name, what in BUDGETS.items():
        ref = threshold(name)
        value = measured[name]
        rows.append(
            {
                "budget": name,
                "measures": what,
                "measured": round(value, 3),
                "reference": ref.value,
                "unit": ref.unit,
                "passes_when": ">= reference" if ref.higher_is_better else "<= reference",
                "verdict": "pass"
                if ref.passes(value)
                else ("unknown" if value != value else ("miss (contended)" if contended else "miss")),
                "contended_runs": contended,
            }
        )
    return pd.DataFrame.from_records(rows)


def markdown(budgets: pd.DataFrame, log_split: pd.DataFrame, split: pd.DataFrame, info: str) -> str:
    """budgets.md: the verdicts, then both splits, as tables."""
    return (
        "\n\n".join(
            [
                "# The demo against its budgets (`make bench-budgets`)",
                info,
                "## Budgets\n\n" + budgets.to_markdown(index=False),
                "## What filled the invocation (Snakemake's log, whole seconds)\n\n"
                + log_split.to_markdown(index=False, floatfmt=".0f"),
                "## The runs' wall, split from their events (seconds; shares of the runs' wall)\n\n"
                + split.to_markdown(index=False, floatfmt=".3g"),
            ]
        )
        + "\n"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.budgets", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench")
    parser.add_argument("--work", type=Path, help="the demo's working folder (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the working folder (default: removed)")
    parser.add_argument("--cores", help="Snakemake's --cores (default: the local profile's, as make demo)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    snakemake = Path(sys.executable).with_name("snakemake")
    work = args.work or Path(tempfile.mkdtemp(prefix="dlscale-budgets-"))
    if args.work and any(args.work.iterdir() if args.work.exists() else []):
        print(
            f"benchmarks.budgets: --work {args.work} is not empty: the demo must start fresh", file=sys.stderr
        )
        return 2
    work.mkdir(parents=True, exist_ok=True)
    load = [round(v, 2) for v in os.getloadavg()]
    log(f"budgets: the default study into {work} (load {load})")
    started = time.perf_counter()
    status = subprocess.run(demo_command(work, snakemake, args.cores), cwd=work, check=False).returncode
    wall_s = time.perf_counter() - started
    try:
        if status != 0:
            print(f"benchmarks.budgets: the demo failed (exit {status}) after {wall_s:.0f} s; kept in {work}",
                  file=sys.stderr)  # fmt: skip
            args.keep = True
            return 2
        with open(invocation_log(work), encoding="utf-8") as handle:
            log_split = snakelog.time_split(snakelog.jobs(handle))
        split = pd.read_csv(work / "results" / "wall_split.csv")
        runs = pd.read_csv(work / "results" / "runs.csv")
        contended = contended_runs(runs)
        budgets = verdicts(wall_s, split, contended)
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(budgets, args.out / "budgets.csv")
        write_csv(log_split, args.out / "demo_split.csv")
        write_csv(split, args.out / "demo_wall_split.csv")
        info = (
            f"Measured {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC on {os.cpu_count()} cores,"
            f" load average {load} before the demo; {wall_s:.0f} s of wall;"
            f" {contended} of {len(runs)} runs contended"
            " (the contention probe, runs.csv). One demo, one sample: no interval."
        )
        atomic.write_text(args.out / "budgets.md", markdown(budgets, log_split, split, info))
        print(budgets.to_string(index=False))
        return 0 if (budgets["verdict"] == "pass").all() else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
