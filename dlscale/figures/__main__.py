"""``python -m dlscale.figures RESULTS_DIR``: the study's figures from the tables the
aggregation wrote into RESULTS_DIR (``python -m dlscale.analysis RUNS_DIR --out
RESULTS_DIR``, or a workflow's results/), drawn into RESULTS_DIR/figures as the workflow's
figures rule draws them, then checked panel by panel against those tables."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dlscale.figures.shown import check_figures
from dlscale.figures.study import draw_figures, figure_paths, read_results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.figures",
        description="Draw the study's figures (html, svg, png) from the aggregation's tables in "
        "RESULTS_DIR (runs.parquet, iterations.parquet, cells.csv, evals.csv) and check that each "
        "panel shows exactly its table's rows.",
    )
    parser.add_argument("results_dir", help="folder with the aggregation's tables (e.g. results)")
    parser.add_argument("--out", help="folder for the figures (default: RESULTS_DIR/figures)")
    parser.add_argument(
        "--check-only", action="store_true", help="draw nothing: check the figures already in the folder"
    )
    args = parser.parse_args(argv)
    try:
        tables = read_results(args.results_dir)
    except FileNotFoundError as err:
        print(f"python -m dlscale.figures: {err}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.results_dir) / "figures"
    if not args.check_only:
        out.mkdir(parents=True, exist_ok=True)
        for path in draw_figures(tables, figure_paths(out)):
            print(path)
    problems = check_figures(tables, out)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
