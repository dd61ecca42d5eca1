"""The ``dlscale`` command: one console command with a subcommand per tool.

``dlscale <subcommand> ARGS`` calls the same ``main(argv)`` as ``python -m <module> ARGS``
(both stay; the workflow's rules use the module forms), so help, output and exit codes
(2 for bad input) are the tool's own. A subcommand's module is imported only when it is
named, so ``dlscale --help`` does not load pandas or the plotting stack.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Subcommand:
    """A subcommand: the module whose ``main(argv)`` it runs and what it is for."""

    module: str  # what ``python -m`` names
    summary: str
    entry: str = ""  # the module holding ``main`` when ``python -m`` runs a package's __main__

    def main(self) -> Callable[[Sequence[str]], int]:
        return importlib.import_module(self.entry or self.module).main


#: In the README's order: a study's results, handing them over, the checks, then the host tools.
SUBCOMMANDS: dict[str, Subcommand] = {
    "analyse": Subcommand(
        "dlscale.analysis",
        "the aggregation on run folders copied from anywhere (RUNS --out DIR): runs, cells, findings",
        "dlscale.analysis.aggregate",
    ),
    "figures": Subcommand(
        "dlscale.figures",
        "draw and check the study's figures from the tables in a results folder",
        "dlscale.figures.__main__",
    ),
    "parity": Subcommand(
        "dlscale.analysis.parity",
        "did every framework do the same work: first losses against the reference's 1-rank run",
    ),
    "compare": Subcommand(
        "dlscale.compare",
        "studies against each other, cell by cell with intervals (BASE NEW [MORE ...] --out DIR)",
        "dlscale.compare.comparison",
    ),
    "artifact": Subcommand(
        "dlscale.archive.artifact", "one archive per study, to hand it to someone else (make artifact)"
    ),
    "verify": Subcommand(
        "dlscale.archive.verify",
        "check a handed-over study: checksums, then the tables recomputed from its events",
    ),
    "replay": Subcommand(
        "dlscale.perfmodel.replay", "published scaling measurements replayed through the study's projection"
    ),
    "parse": Subcommand(
        "dlscale.parse", "a native BigDL or Caffe log as events on stdout", "dlscale.parse.__main__"
    ),
    "placement": Subcommand(
        "dlscale.host.placement", "run a command bound to this node's address towards a peer (Spark)"
    ),
    "netns": Subcommand("dlscale.host.netns", "run a command on an emulated node (its network namespace)"),
    "roofline": Subcommand("dlscale.host.roofline", "measure this host's matmul peak per thread count"),
    "sitecheck": Subcommand(
        "dlscale.host.sitecheck", "inside a 2-node SLURM job: what the frameworks need across nodes"
    ),
    "envs": Subcommand("dlscale.envs", "the per-framework venvs: lock, check and build them"),
}


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [
        "usage: dlscale <subcommand> [ARGS ...]",
        "       dlscale <subcommand> --help",
        "",
        "Distributed deep-learning frameworks compared on CPU clusters. The study itself runs",
        "with Snakemake (`make demo`, `snakemake --profile slurm`); these are its tools, each",
        "also `python -m <module>` with the same arguments and exit codes (2: bad input).",
        "",
        "subcommands:",
    ]
    for name, sub in SUBCOMMANDS.items():
        lines.append(f"  {name:<{width}}  {sub.summary}")
        lines.append(f"  {'':<{width}}  (python -m {sub.module})")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(usage())
        return 0
    name, rest = args[0], args[1:]
    sub = SUBCOMMANDS.get(name)
    if sub is None:
        sys.stderr.write(usage())
        print(f"dlscale: unknown subcommand {name!r} (choose from {', '.join(SUBCOMMANDS)})", file=sys.stderr)
        return 2
    entry = sub.main()
    sys.argv = [f"dlscale {name}", *rest]  # what argparse calls the program where it is not told
    return entry(rest)


if __name__ == "__main__":
    raise SystemExit(main())
