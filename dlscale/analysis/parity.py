"""The parity check: proof that every framework runs the same optimisation.

Runs with the shared initialisation (run spec ``init: shared``: the same initial weights,
``dlscale.data.initweights``; the same global batches, ``dlscale.data.shards.GlobalBatchSlices``;
the reference optimiser semantics in every runner) compute the same sequence of losses up
to float32 rounding. This module compares each such run's first iterations with the
reference framework's 1-rank run of the same model, seed and global batch:

* at 1 node, frameworks against the reference: the same work in each framework;
* at N nodes, synchronous data parallelism against 1 node at the same global batch (the
  gradient of N slices averaged is the gradient of the whole batch).

A run passes when every compared loss lies within its tolerance of the reference's
(``tolerance_for``: the float32 rounding of a sum of the loss's terms, ``parity_eps_factor``
times ``eps32 x sqrt(terms)``, as measured: ``docs/thresholds.md``), and
its initial weights' digest equals the reference's. A failure names the framework and the
first iteration that differs. Frameworks whose semantics differ by design (BigDL's FP16
parameter exchange, parameter servers' asynchronous updates) are expected to fail; the
table says so (``designed_difference``) and the verdicts keep them out of "same work".
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dlscale import catalog
from dlscale.base import atomic
from dlscale.base.untrusted import write_csv
from dlscale.events import read_events
from dlscale.runspec import scheduled_rate
from dlscale.thresholds import threshold

#: The framework every other is compared with, and the losses compared per run (catalog).
REFERENCE = catalog.PARITY_REFERENCE
DEFAULT_ITERATIONS = catalog.PARITY_ITERATIONS

#: Differences by design (the catalog's), measured by the check and named where a framework fails it.
DESIGNED_DIFFERENCES: Mapping[str, str] = catalog.DIFFERENCES

#: float32's unit roundoff: the relative error of one rounding.
EPS32 = 2.0**-24
#: Pixels per image the AutoEncoder's loss averages over, beside the batch.
LOSS_TERMS_PER_SAMPLE: Mapping[str, int] = {"lenet": 1, "autoencoder": 28 * 28}


def tolerance_for(
    model: str, global_batch: int, factor: float = threshold("parity_eps_factor").value
) -> float:
    """The relative loss tolerance of ``model`` at ``global_batch``: ``factor`` times the
    typical float32 rounding of a sum of the loss's terms in another order,
    ``eps32 x sqrt(terms)`` (LeNet's loss averages one term a sample, the AutoEncoder's one
    a pixel, so its sum is 784 times longer and its spread about 28 times wider)."""
    terms = global_batch * LOSS_TERMS_PER_SAMPLE.get(model, 1)
    return factor * EPS32 * math.sqrt(terms)


PARITY_COLUMNS: tuple[str, ...] = (
    "model",
    "framework",
    "setup",
    "nodes",
    "ranks_per_node",
    "world_size",
    "global_batch",
    "seed",
    "run_id",
    "reference",
    "iterations",
    "max_rel_diff",
    "worst_iteration",
    "first_failed_iteration",
    "tolerance",
    "init_matches",
    "lr_rule",
    "lr_matches",
    "passes",
    "designed_difference",
    "reason",
)


@dataclass(frozen=True)
class ParityRun:
    """What the check needs of one run: who, where, and its loss per iteration."""

    run_id: str
    framework: str
    setup: str
    model: str
    nodes: int
    ranks_per_node: int
    world_size: int
    global_batch: int
    seed: int
    losses: tuple[float, ...]
    init_sha256: str | None
    #: The learning-rate schedule: (base rate, rate at the run's global batch, warm-up ramp
    #: steps) and the rule's name; a run is compared only with a reference on the same one.
    schedule: tuple[float, float, int] = (0.0, 0.0, 0)
    lr_rule: str = "fixed"
    #: The rate each iteration's step used, as the run recorded it (None where it did not).
    rates: tuple[float | None, ...] = ()

    def rate_at(self, step: int) -> float:
        """The schedule's rate of ``step`` (the rule every runner applies)."""
        return scheduled_rate(*self.schedule, step)


def read_run(path: str | Path) -> ParityRun | None:
    """A shared-initialisation run's losses (the mean over its ranks' losses of each
    iteration: each rank reports its slice's mean), or None for any other run."""
    events = read_events(path)
    start, end = events[0], events[-1]
    spec = start.get("spec") or {}
    if spec.get("init") != "shared" or end.get("status") != "ok":
        return None
    per_iteration: dict[int, list[float]] = {}
    rates: dict[int, float | None] = {}
    digest = None
    for event in events:
        if event["event"] != "iteration":
            continue
        if event.get("loss") is not None:
            per_iteration.setdefault(int(event["iteration"]), []).append(float(event["loss"]))
        if event.get("rank", 0) == 0:
            rates[int(event["iteration"])] = event.get("lr")
        digest = digest or event.get("init_sha256")
    losses = tuple(sum(v) / len(v) for _, v in sorted(per_iteration.items()))
    lr = start.get("learning_rate") or {}
    base = float(lr.get("lr_base_rate", spec.get("learning_rate", 0.0)))
    strategy = (spec.get("options") or {}).get("strategy")
    setup = start["framework"] + (f"-{strategy}" if strategy == "ps" else "")
    return ParityRun(
        run_id=str(start["run_id"]),
        framework=str(start["framework"]),
        setup=setup,
        model=str(start["model"]),
        nodes=int(start["nodes"]),
        ranks_per_node=int(start["ranks_per_node"]),
        world_size=int(start["world_size"]),
        global_batch=int(start.get("global_batch") or start["batch"] * start["world_size"]),
        seed=int(spec.get("seed", -1)),
        losses=losses,
        init_sha256=digest,
        schedule=(base, float(lr.get("lr_rate", base)), int(lr.get("lr_warmup_iterations", 0))),
        lr_rule=str(lr.get("lr_rule", "fixed")),
        rates=tuple(rates[i] for i in sorted(rates)),
    )


#: The reference's learning rates summed over the steps before a compared loss, at most
#: (``docs/thresholds.md``): float32 rounding differences grow as the weights travel, and
#: the tolerance was measured over 20 steps at rate 0.01. Beyond it, larger rates turn the
#: same rounding into differences no wrong collective is needed for.
RATE_BUDGET = threshold("parity_rate_budget").value


def steps_within_budget(reference: ParityRun, iterations: int, budget: float = RATE_BUDGET) -> int:
    """How many of the first ``iterations`` losses the check compares: the loss of step t
    while the reference's rates of steps 0..t-1 sum to at most ``budget``."""
    travelled = 0.0
    for step in range(iterations):
        if travelled > budget * (1 + 1e-9):
            return step
        travelled += reference.rate_at(step)
    return iterations


def compare(run: ParityRun, reference: ParityRun, iterations: int, tolerance: float) -> dict[str, Any]:
    """One run against the reference: the largest relative loss difference over the first
    ``iterations`` (those within the rate budget: ``steps_within_budget``), where it is,
    the first iteration beyond ``tolerance``, and why. The recorded rates are checked over
    all ``iterations``: a rate is exact, whatever the rounding of the losses."""
    n = min(steps_within_budget(reference, iterations), len(run.losses), len(reference.losses))
    rate_steps = min(iterations, len(run.rates))
    diffs = [
        abs(a - b) / max(abs(b), 1e-12) for a, b in zip(run.losses[:n], reference.losses[:n], strict=True)
    ]
    worst = max(range(n), key=diffs.__getitem__) if n else None
    failed = next((i for i, d in enumerate(diffs) if not d <= tolerance), None)
    init_matches = (
        None
        if run.init_sha256 is None or reference.init_sha256 is None
        else run.init_sha256 == reference.init_sha256
    )
    wrong_rate = first_wrong_rate(run, rate_steps)
    lr_matches = None if not any(r is not None for r in run.rates[:rate_steps]) else wrong_rate is None
    passes = n > 0 and failed is None and init_matches is not False and lr_matches is not False
    designed = DESIGNED_DIFFERENCES.get(run.setup) or DESIGNED_DIFFERENCES.get(run.framework)
    if n == 0:
        reason = "no losses to compare"
    elif wrong_rate is not None:
        # A designed difference never excuses this one: the rates are the study's, not the framework's.
        designed = None
        reason = (
            f"{run.framework} ignored the learning-rate rule ({run.lr_rule}): iteration {wrong_rate} ran at"
            f" {run.rates[wrong_rate]:.6g}, the rule gives {run.rate_at(wrong_rate):.6g}"
        )
    elif init_matches is False:
        reason = f"{run.framework} did not start from the shared weights (digest differs from {reference.framework}'s)"
    elif failed is not None:
        reason = (
            f"{run.framework} differs from {reference.framework} at iteration {failed}: loss"
            f" {run.losses[failed]:.6g} vs {reference.losses[failed]:.6g} (relative {diffs[failed]:.2e} >"
            f" {tolerance:.1e})"
        )
        if designed:
            reason += f"; by design: {designed}"
    else:
        reason = f"the first {n} losses agree within {tolerance:.1e}"
        if n < min(iterations, len(run.losses), len(reference.losses)):
            reason += f" (the steps whose preceding rates sum to at most {RATE_BUDGET:g})"
    return {
        "model": run.model,
        "framework": run.framework,
        "setup": run.setup,
        "nodes": run.nodes,
        "ranks_per_node": run.ranks_per_node,
        "world_size": run.world_size,
        "global_batch": run.global_batch,
        "seed": run.seed,
        "run_id": run.run_id,
        "reference": reference.run_id,
        "iterations": n,
        "max_rel_diff": diffs[worst] if worst is not None else math.nan,
        "worst_iteration": worst,
        "first_failed_iteration": failed,
        "tolerance": tolerance,
        "init_matches": init_matches,
        "lr_rule": run.lr_rule,
        "lr_matches": lr_matches,
        "passes": passes,
        "designed_difference": designed if not passes else None,
        "reason": reason,
    }


#: How far a recorded rate may be from the rule's: float32 holds a rate to 6e-8 relative
#: (TensorFlow keeps it in a float32 variable), and BigDL prints it with at least 6 digits.
RATE_RTOL = 1e-5


def first_wrong_rate(run: ParityRun, iterations: int) -> int | None:
    """The first of the first ``iterations`` steps whose recorded rate is not the rule's."""
    for step, rate in enumerate(run.rates[:iterations]):
        if rate is not None and not math.isclose(rate, run.rate_at(step), rel_tol=RATE_RTOL):
            return step
    return None


def check(
    runs: Iterable[ParityRun],
    iterations: int = DEFAULT_ITERATIONS,
    tolerance: float | None = None,
    reference: str = REFERENCE,
) -> pd.DataFrame:
    """The parity table (``PARITY_COLUMNS``): every shared-initialisation run against the
    reference framework's 1-rank run of its model, seed and global batch, within
    ``tolerance`` (None: ``tolerance_for`` the model and global batch)."""
    runs = list(runs)
    references = {
        (r.model, r.seed, r.global_batch, r.schedule): r
        for r in sorted(runs, key=lambda r: r.run_id)
        if r.framework == reference and r.world_size == 1
    }
    rows = []
    for run in sorted(runs, key=lambda r: (r.model, r.global_batch, r.world_size, r.framework, r.run_id)):
        ref = references.get((run.model, run.seed, run.global_batch, run.schedule))
        if ref is None:
            row = {name: None for name in PARITY_COLUMNS}
            row.update(model=run.model, framework=run.framework, setup=run.setup, nodes=run.nodes,
                       ranks_per_node=run.ranks_per_node, world_size=run.world_size,
                       global_batch=run.global_batch, seed=run.seed, run_id=run.run_id, passes=None,
                       reason=f"n/a: no 1-rank {reference} run of {run.model} at global batch {run.global_batch},"
                       f" seed {run.seed}{_schedule_words(run)} to compare with")  # fmt: skip
            rows.append(row)
            continue
        if run is ref:
            continue
        rtol = tolerance if tolerance is not None else tolerance_for(run.model, run.global_batch)
        rows.append(compare(run, ref, iterations, rtol))
    return pd.DataFrame(rows, columns=list(PARITY_COLUMNS))


def _schedule_words(run: ParityRun) -> str:
    base, rate, ramp = run.schedule
    if run.lr_rule == "fixed" and ramp == 0:
        return ""
    return f", {run.lr_rule} rate {rate:.6g}" + (
        f" after a {ramp}-step warm-up from {base:.6g}" if ramp else ""
    )


def parity_table(
    paths: Iterable[str | Path],
    iterations: int = DEFAULT_ITERATIONS,
    tolerance: float | None = None,
    reference: str = REFERENCE,
) -> pd.DataFrame:
    """The parity table of the shared-initialisation runs among ``paths`` (events files)."""
    runs = [r for r in (read_run(p) for p in sorted(paths, key=str)) if r is not None]
    return check(runs, iterations, tolerance, reference)


def write_table(table: pd.DataFrame, target: str | Path) -> Path:
    return atomic.replace_with(target, lambda tmp: write_csv(table, tmp))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dlscale.analysis.parity RUNS_DIR --out DIR``: the parity table of shared-init runs."""
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.analysis.parity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("runs_dir", help="folder searched for events.jsonl files of init: shared runs")
    parser.add_argument("--out", required=True, help="folder for parity.csv")
    parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, help="losses compared per run")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="relative loss tolerance (default: per model, tolerance_for)",
    )
    parser.add_argument("--reference", default=REFERENCE, help="the framework every other is compared with")
    args = parser.parse_args(argv)
    table = parity_table(
        Path(args.runs_dir).rglob("events.jsonl"), args.iterations, args.tolerance, args.reference
    )
    if table.empty:
        print(f"{args.runs_dir}: no ok run with init: shared", file=sys.stderr)
        return 2
    target = write_table(table, Path(args.out) / "parity.csv")
    for row in table.itertuples():
        verdict = "n/a " if row.passes is None else ("PASS" if row.passes else "FAIL")
        print(f"{verdict} {row.run_id}: {row.reason}")
    print(target)
    return 0 if not table["passes"].eq(False).any() else 1


if __name__ == "__main__":
    raise SystemExit(main())
