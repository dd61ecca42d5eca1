"""``python -m benchmarks`` (``make bench``): run the benchmarks, write results/bench/.

Order: FLOP counts (the sizes and counts the others need), training (harness overhead and
compute efficiency, from the same side-by-side runs), communication, start-up, workflow
scale; then summary.md, the figures and a short table on the terminal. A benchmark that
fails is reported (and the command exits 1) after the others have run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

from benchmarks import (
    comm_efficiency,
    compute_efficiency,
    figures,
    harness_overhead,
    startup,
    summary,
    torch_bench,
    workflow_scale,
)
from benchmarks.common import REPO, FrameworkBench, bench_studies, framework_python, write_csv
from benchmarks.data import datasets
from benchmarks.registry import covered
from dlscale import catalog
from dlscale.base import atomic
from dlscale.base.sysutil import git_sha

BENCHMARKS = ("training", "comm", "startup", "scale")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="repeats of every measurement (default 5)")
    parser.add_argument(
        "--scale-repeats",
        type=int,
        default=None,
        help="repeats of the workflow-scale runs (default min(3, repeats))",
    )
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    parser.add_argument(
        "--frameworks", nargs="+", choices=catalog.FRAMEWORK_NAMES, default=list(catalog.FRAMEWORK_NAMES)
    )
    parser.add_argument("--models", nargs="+", choices=catalog.MODEL_NAMES, default=list(catalog.MODEL_NAMES))
    parser.add_argument(
        "--uncapped",
        action="store_true",
        help="every framework runs the asked repeats (default: BigDL's arms, a JVM start each, are capped"
        " so that the whole bench fits a session; see each entry's max_repeats)",
    )
    return parser.parse_args(argv)


def selected(args: argparse.Namespace) -> tuple[list[FrameworkBench], list[str]]:
    """The benchmark entries of the asked frameworks (uncapped if asked), and those without one."""
    entries, not_covered = covered(args.frameworks)
    if args.uncapped:
        entries = [dataclasses.replace(e, max_repeats={}) for e in entries]
    return entries, not_covered


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    entries, not_covered = selected(args)
    info = {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "git_sha": git_sha(REPO),
        "repeats": args.repeats,
        "uncapped": args.uncapped,
        "loadavg_start": [round(v, 2) for v in os.getloadavg()],
        "frameworks": [e.name for e in entries],
        "not_covered": not_covered,
    }
    errors: list[str] = []
    studies = bench_studies([*args.models, *startup.STARTUP_MODELS])

    def attempt(name: str, work) -> None:  # noqa: ANN001 - a thunk
        try:
            work()
        except Exception as err:  # noqa: BLE001 - report, run the rest, exit 1 at the end
            traceback.print_exc()
            errors.append(f"{name}: {type(err).__name__}: {err}")

    flops = compute_efficiency.flops_table(
        torch_bench.flops(framework_python("torch"), list(catalog.MODEL_NAMES))
    )
    write_csv(flops, out / "flops.csv")
    data = datasets(out / "data") if {"training", "startup"} & set(args.only) else {}

    measured: dict[str, object] = {}
    if "training" in args.only:

        def training() -> None:
            raw = harness_overhead.measure(entries, args.models, studies, data, args.repeats)
            measured["training"] = raw
            harness_overhead.write(raw, out)
            compute_efficiency.write(raw, flops, out)
            failed = harness_overhead.failures(raw)
            if failed:  # written above with their reasons; the command still exits 1
                raise RuntimeError("; ".join(failed))

        attempt("training", training)
    if "comm" in args.only:
        sizes = {int(flops.set_index("model").loc[m, "gradient_bytes"]): m for m in args.models}

        def comm() -> None:
            raw = comm_efficiency.measure(entries, sorted(sizes), args.repeats, models=sizes)
            comm_efficiency.write(raw, flops, [e.name for e in entries if e.comm], out)

        attempt("comm", comm)
    if "startup" in args.only:
        # At most 3 start-ups each: BigDL's (a Spark cluster and two JVMs) take about a minute.
        repeats = min(3, args.repeats)
        # BigDL's come from its training runner arms (each a whole launch) when those ran.
        attempt("startup", lambda: startup.write(
            startup.measure(entries, studies, data, repeats, training_raw=measured.get("training")), out
        ))  # fmt: skip
    if "scale" in args.only:
        repeats = args.scale_repeats or min(3, args.repeats)
        attempt("scale", lambda: workflow_scale.write(*workflow_scale.measure(repeats), out))

    info["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    info["wall_s"] = round(time.time() - started, 1)
    if errors:
        info["errors"] = errors
    atomic.write_text(out / "run_info.json", json.dumps(info, indent=2))
    path = summary.write(out)
    try:
        written = figures.write(out)
    except Exception as err:  # noqa: BLE001 - figures are a convenience; tables stand alone
        errors.append(f"figures: {type(err).__name__}: {err}")
        written = []
    print(summary.short_table(out))
    print(f"\nsummary: {path}; figures: {', '.join(str(p.name) for p in written) or 'none'};"
          f" {info['wall_s']} s")  # fmt: skip
    for error in errors:
        print(f"FAILED {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
