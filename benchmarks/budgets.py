"""``python -m benchmarks.budgets`` (``make bench-budgets``): the demo held to its budgets.

Runs the default study (``config.yaml``) as ``make demo`` does, into a fresh working folder
with this checkout's environments and the machine's caches (warm: nothing is built but the
study itself), then says where its time went and whether it kept its budgets
(``dlscale.thresholds``: ``demo_warm_wall``, ``demo_timed_share``):

- the invocation's wall, timed around Snakemake by this process;
- Snakemake's own log split by what ran (``dlscale.analysis.snakelog``: the runs, the tuning
  race, the environments, the analysis, no job at all);
- the runs' wall split from their events (the study's ``results/wall_split.csv``: timed
  steps, warm-up, start-up by part, evaluation, gaps), per framework;
- other work on the machine over the whole invocation (``dlscale.host.contention``, the
  probe each run has, here around Snakemake): the runs' own probes see only the runs, so a
  neighbour during the tuning race, the micro-benchmarks or the analysis went unseen. This
  process adopts the daemons the study detaches (``become_subreaper``), so their CPU time
  is the demo's, not a neighbour's.

``--repeats N`` runs the demo N times, one after another, each into a fresh folder: the
samples. Each budget is then the median of its N values with the median's interval
(``dlscale.analysis.stats.median_interval``: the range below 6 samples), and its verdict is
the interval's: pass when all of it keeps the budget, miss when none of it does, undecided
when it straddles the reference. One demo (the default) is one sample: no interval, the
verdict is its value's.

Writes ``budgets.csv`` (one row per budget: measured, interval, reference, verdict),
``samples.csv`` (one row per demo), ``demo_split.csv`` (the Snakemake log's split) and
``demo_wall_split.csv`` (the runs' split), both of the last demo, and ``budgets.md`` under
``--out``; exit 0 when every budget is kept, 1 when one is missed or undecided, 2 when a demo
failed or left a process running. A benchmark, not a test: its numbers are wall times on a
shared machine.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks import stats
from benchmarks.common import REPO, log, write_csv
from dlscale.analysis import snakelog
from dlscale.analysis.stats import median_interval
from dlscale.base import atomic
from dlscale.base.sysutil import become_subreaper
from dlscale.host.contention import CONTENDED, ContentionProbe, launcher_cpu_s, reap_adopted
from dlscale.thresholds import Threshold, threshold

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


#: How long the daemons a demo detached may take to end after Snakemake exits. The study
#: stops its Spark clusters itself (the Snakefile's onsuccess/onerror), so this is only a
#: bound for a straggler; one still running after it is reported, not killed.
ADOPTED_GRACE_S = 30.0


@dataclass(frozen=True)
class Invocation:
    """One Snakemake invocation as this process saw it."""

    status: int
    wall_s: float
    other_share: float  # other work + steal over the whole invocation, share of the CPUs
    contended: bool  # ``other_share`` fails ``CONTENDED`` (the runs' threshold)
    own_cpu_s: float  # the command's CPU time, its adopted daemons' included
    left_running: tuple[int, ...] = ()  # adopted processes alive ADOPTED_GRACE_S after it


@dataclass(frozen=True)
class Sample:
    """One demo's values of the budgets' measures."""

    wall_s: float
    timed_share: float
    contended: int = 0  # runs the runs' probe flagged
    invocation_contended: bool = False  # other work over the whole invocation


def timed_share(split: pd.DataFrame) -> float:
    """The study's timed share: the ``all`` row of its ``wall_split.csv`` (NaN without one)."""
    everything = split.loc[split["framework"] == "all"]
    return float(everything["timed_share"].iloc[0]) if len(everything) else float("nan")


def verdicts(wall_s: float, split: pd.DataFrame, contended: int = 0) -> pd.DataFrame:
    """One demo's verdicts (``summary`` of one sample): ``split`` is the study's
    ``wall_split.csv``, whose ``all`` row holds the runs' timed share."""
    return summary([Sample(wall_s, timed_share(split), contended)])


def summary(samples: Sequence[Sample]) -> pd.DataFrame:
    """One row per budget: the median of the samples' values and its interval, the
    threshold's reference, and the verdict (``verdict``).

    A miss or an undecided verdict while the contention probe flagged runs, or a whole
    invocation, reads ``... (contended)``: a demo on a busy machine cannot tell the demo's
    cost from its neighbours'.
    """
    contended = sum(sample.contended for sample in samples)
    contended_demos = sum(sample.invocation_contended for sample in samples)
    measures = {
        "demo_warm_wall": [sample.wall_s for sample in samples],
        "demo_timed_share": [sample.timed_share for sample in samples],
    }
    rows = []
    for name, what in BUDGETS.items():
        ref = threshold(name)
        values = measures[name]
        interval = median_interval(values)
        finite = sum(1 for value in values if math.isfinite(value))
        summary = stats.Summary(interval.value, interval.low, interval.high, finite)
        rows.append(
            {
                "budget": name,
                "measures": what,
                "samples": len(samples),
                "measured": round(interval.value, 3),
                "low": round(interval.low, 3),
                "high": round(interval.high, 3),
                "interval": interval.method,
                "reference": ref.value,
                "unit": ref.unit,
                "passes_when": ">= reference" if ref.higher_is_better else "<= reference",
                "verdict": verdict(ref, summary, contended + contended_demos),
                "contended_runs": contended,
                "contended_demos": contended_demos,
            }
        )
    return pd.DataFrame.from_records(rows)


def verdict(ref: Threshold, summary: stats.Summary, contended: int = 0) -> str:
    """``pass``, ``miss``, ``undecided`` or ``unknown`` for a budget's median and interval:
    with an interval, ``benchmarks.stats.interval_verdict`` (every benchmark's reading of an
    interval against a threshold); a single demo has none, and its value decides."""
    if summary.median != summary.median:
        return "unknown"
    if summary.n > 1:
        outcome = stats.interval_verdict(summary, ref)
    else:
        outcome = stats.verdict(summary.median, ref.passes)
    return f"{outcome} (contended)" if contended and outcome != "pass" else outcome


def markdown(
    budgets: pd.DataFrame,
    log_split: pd.DataFrame,
    split: pd.DataFrame,
    info: str,
    samples: pd.DataFrame | None = None,
) -> str:
    """budgets.md: the verdicts, the demos (``samples``, one row each), then both splits of
    the last demo, as tables."""
    parts = [
        "# The demo against its budgets (`make bench-budgets`)",
        info,
        "## Budgets\n\n" + budgets.to_markdown(index=False),
    ]
    if samples is not None:
        parts.append("## The demos (one sample each)\n\n" + samples.to_markdown(index=False, floatfmt=".3f"))
    parts += [
        "## What filled the invocation (Snakemake's log of the last demo, whole seconds)\n\n"
        + log_split.to_markdown(index=False, floatfmt=".0f"),
        "## The runs' wall of the last demo, split from their events (seconds; shares of the runs' wall)\n\n"
        + split.to_markdown(index=False, floatfmt=".3g"),
    ]
    return "\n\n".join(parts) + "\n"


def describe_samples(budgets: pd.DataFrame) -> str:
    """The line budgets.md opens with about the samples: how many, and what interval."""
    wall = budgets.set_index("budget").loc["demo_warm_wall"]
    if int(wall["samples"]) < 2:
        return "One demo, one sample: no interval."
    return (
        f"{int(wall['samples'])} demos, one after another, each a sample: the median of each budget's"
        f" values with its interval ({wall['interval']}; dlscale.analysis.stats.median_interval)."
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.budgets", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench")
    parser.add_argument("--work", type=Path, help="the demos' working folder (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the working folder (default: removed)")
    parser.add_argument("--cores", help="Snakemake's --cores (default: the local profile's, as make demo)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="demos, one after another: the samples (default 1: no interval)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: at least one demo")
    return args


def run_invocation(command: Sequence[str], cwd: Path, grace_s: float = ADOPTED_GRACE_S) -> Invocation:
    """Run ``command`` and measure other work on this machine's CPUs over all of it.

    The command's CPU time is this process's children's, the daemons it detached included
    (adopted: ``become_subreaper``, reaped here after it exits); the rest of the CPUs' busy
    time is a neighbour's. The wall is Snakemake's alone, not the wait for its daemons.
    """
    if not become_subreaper():
        log("budgets: this kernel will not adopt the study's daemons: their CPU reads as other work")
    probe = ContentionProbe()
    own_before = launcher_cpu_s()
    probe.start()
    started = time.perf_counter()
    status = subprocess.run(list(command), cwd=cwd, check=False).returncode
    wall_s = time.perf_counter() - started
    left = reap_adopted(grace_s)
    own_cpu_s = launcher_cpu_s() - own_before
    fields = probe.stop(own_cpu_s=own_cpu_s)
    other = float(fields["other_busy_share"]) + float(fields["steal_share"])
    return Invocation(status, wall_s, round(other, 4), bool(fields["contended"]), own_cpu_s, tuple(left))


def run_demo(work: Path, snakemake: Path, cores: str | None) -> Invocation:
    """One demo into the empty folder ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    return run_invocation(demo_command(work, snakemake, cores), work)


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
    samples: list[Sample] = []
    rows: list[dict[str, object]] = []
    try:
        for repeat in range(args.repeats):
            folder = work if args.repeats == 1 else work / f"demo{repeat + 1}"
            log(
                f"budgets: demo {repeat + 1} of {args.repeats}, the default study into {folder} (load {load})"
            )
            demo = run_demo(folder, snakemake, args.cores)
            if demo.status != 0 or demo.left_running:
                why = (
                    f"exit {demo.status}"
                    if demo.status != 0
                    else f"left running: pids {list(demo.left_running)}"
                )
                print(f"benchmarks.budgets: demo {repeat + 1} failed ({why}) after {demo.wall_s:.0f} s;"
                      f" kept in {folder}", file=sys.stderr)  # fmt: skip
                args.keep = True
                return 2
            split = pd.read_csv(folder / "results" / "wall_split.csv")
            runs = pd.read_csv(folder / "results" / "runs.csv")
            sample = Sample(demo.wall_s, timed_share(split), contended_runs(runs), demo.contended)
            samples.append(sample)
            rows.append(
                {"demo": repeat + 1, "load_before": str(load), "wall_s": sample.wall_s,
                 "timed_share": sample.timed_share, "other_share": demo.other_share,
                 "contended": demo.contended, "contended_runs": sample.contended, "runs": len(runs)}
            )  # fmt: skip
            load = [round(v, 2) for v in os.getloadavg()]
        with open(invocation_log(folder), encoding="utf-8") as handle:
            log_split = snakelog.time_split(snakelog.jobs(handle))
        budgets = summary(samples)
        table = pd.DataFrame.from_records(rows)
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(budgets, args.out / "budgets.csv")
        write_csv(table, args.out / "samples.csv")
        write_csv(log_split, args.out / "demo_split.csv")
        write_csv(split, args.out / "demo_wall_split.csv")
        info = (
            f"Measured {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC on {os.cpu_count()} cores;"
            f" {sum(s.contended for s in samples)} of {int(table['runs'].sum())} runs contended"
            f" (the contention probe, runs.csv); {sum(s.invocation_contended for s in samples)} of"
            f" {len(samples)} demos contended over the whole invocation (other work and steal above"
            f" {CONTENDED.value} of the CPUs, the runs' threshold: `other_share`)."
            f" {describe_samples(budgets)}"
        )
        atomic.write_text(args.out / "budgets.md", markdown(budgets, log_split, split, info, table))
        print(budgets.to_string(index=False))
        return 0 if (budgets["verdict"] == "pass").all() else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
