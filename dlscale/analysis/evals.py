"""Eval events -> what each run learned: final held-out quality, and time to a target quality.

A run's ``eval`` events (rank 0, between training iterations, ``dlscale.events``) are
checked against their run like every other event, then summarised per run:

* ``quality_metric`` / ``final_quality``: the model's primary metric (``dlscale.quality``)
  at the run's last evaluation; ``learned``: whether that is clearly better than chance
  (None where chance is unknown, e.g. synthetic data whose labels carry no signal).
* With a target (the run's spec's ``quality_target``, or one given to the analysis for runs
  copied from anywhere): ``reached_target``, and ``time_to_target_s``, the ``train_s`` of the
  first evaluation that met it (timed training seconds, warm-up and evaluation excluded:
  MLPerf's time to train, on the training clock). A run that never met it is not converged
  and has no time to target; the verdicts count it as such.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dlscale import quality
from dlscale.data import fashion_mnist, mnist
from dlscale.events import EventError

#: Per-run columns this module adds to the runs table (NaN / empty for a failed run).
QUALITY_COLUMNS: tuple[str, ...] = (
    "quality_metric",
    "final_quality",
    "final_top5",
    "learned",
    "evals",
    "eval_s",
    "target_metric",
    "target_value",
    "reached_target",
    "time_to_target_s",
    "iterations_to_target",
)

#: The measured ones (NaN for a failed run, as every measured column): the others name the question.
MEASURED_QUALITY_COLUMNS: tuple[str, ...] = tuple(
    c for c in QUALITY_COLUMNS if c not in ("quality_metric", "target_metric", "target_value")
)

#: Columns of the evals table (one row per eval event).
EVAL_COLUMNS: tuple[str, ...] = (
    "run_id",
    "framework",
    "model",
    "dataset",
    "nodes",
    "ranks_per_node",
    "network",
    "batch_per_rank",
    "repeat",
    "iteration",
    "metric",
    "value",
    "samples",
    "eval_s",
    "train_s",
    "heldout",
)


#: Samples of each known held-out split: the test sets' canonical shapes, which dlscale.data
#: checks on every fetch. An evaluation of another count left some of the split out.
HELDOUT_SAMPLES: Mapping[str, int] = {
    name: int(module.CANONICAL["shapes"]["test_images"][0])
    for name, module in (("mnist", mnist), ("fashion-mnist", fashion_mnist))
}


@dataclass(frozen=True)
class Target:
    """A quality to train to: ``metric`` at ``value`` or better."""

    metric: str
    value: float

    def met_by(self, value: float) -> bool:
        return quality.meets(self.metric, value, self.value)


_TARGET_TEXT = re.compile(r"^(?P<model>[a-z0-9]+)=(?P<metric>[a-z0-9]+):(?P<value>[-+0-9.eE]+)$")


def parse_target(text: str) -> tuple[str, Target]:
    """``MODEL=METRIC:VALUE`` (``lenet=top1:0.98``) -> (model, Target); ValueError naming
    what is wrong."""
    match = _TARGET_TEXT.match(text.strip())
    if match is None:
        raise ValueError(f"--target {text!r}: expected MODEL=METRIC:VALUE, e.g. lenet=top1:0.98")
    model, metric, raw = match["model"], match["metric"], match["value"]
    try:
        metrics = quality.metrics_of(model)
    except KeyError as err:
        raise ValueError(f"--target {text!r}: {err.args[0]}") from None
    if metric not in metrics:
        raise ValueError(f"--target {text!r}: {model} is evaluated with {', '.join(metrics)}, not {metric!r}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"--target {text!r}: {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (metric != "mse" and value > 1):
        raise ValueError(f"--target {text!r}: {raw} is not a {metric} value")
    return model, Target(metric, value)


def spec_target(start: Mapping[str, Any]) -> Target | None:
    """The target the run trained to (its spec's ``quality_target``), if any."""
    target = (start.get("spec") or {}).get("quality_target")
    if isinstance(target, Mapping) and target.get("metric") in quality.METRICS:
        value = target.get("value")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return Target(str(target["metric"]), float(value))
    return None


def _hits_of(value: float, samples: int) -> bool:
    """Whether a top-k ``value`` is a share of ``samples`` (hits / samples, within float32's
    rounding of the share): a value that is not was not counted over that many samples."""
    hits = value * samples
    return abs(hits - round(hits)) <= max(0.01, 2.0**-22 * samples)


def check_evals(path: str, start: Mapping[str, Any], evals: Iterable[tuple[int, dict[str, Any]]]) -> None:
    """What the schema cannot say about a run's eval events: rank 0 evaluates, with a metric
    of its model, at most once per metric and iteration, always over the whole held-out set
    (the same samples each time, as many as a known split has, top-k a share of them), and
    the training clock it reports never runs backwards. EventError names ``FILE:LINE``."""
    model = str(start["model"])
    metrics = quality.metrics_of(model)
    seen: dict[tuple[int, str], int] = {}
    clock: list[tuple[int, float, int]] = []
    first_samples: tuple[int, int] | None = None
    for line, event in evals:
        where = f"{path}:{line}: eval event"
        samples = int(event["samples"])
        known = HELDOUT_SAMPLES.get(str(event.get("heldout") or ""))
        if known is not None and samples != known:
            raise EventError(
                f"{where}: {samples} samples evaluated, but the {event['heldout']} held-out split has {known}"
            )
        if first_samples is None:
            first_samples = (samples, line)
        elif samples != first_samples[0]:
            raise EventError(
                f"{where}: {samples} samples evaluated, but line {first_samples[1]} evaluated"
                f" {first_samples[0]}: every evaluation of a run covers the whole held-out set"
            )
        if event["rank"] != 0:
            raise EventError(f"{where}: rank {event['rank']} evaluated; only rank 0 evaluates")
        if event["metric"] not in metrics:
            raise EventError(
                f"{where}: metric {event['metric']!r} is not one {model} is evaluated with ({', '.join(metrics)})"
            )
        if event["metric"] in ("top1", "top5") and event["value"] > 1:
            raise EventError(
                f"{where}: {event['metric']}={event['value']!r} is above 1 (a share of the samples)"
            )
        if event["metric"] in ("top1", "top5") and not _hits_of(float(event["value"]), samples):
            raise EventError(
                f"{where}: {event['metric']}={event['value']!r} is not a share of its {samples} samples"
            )
        key = (event["iteration"], event["metric"])
        if key in seen:
            raise EventError(
                f"{where}: a second {event['metric']} evaluation at iteration {event['iteration']} (first at line {seen[key]})"
            )
        seen[key] = line
        clock.append((event["iteration"], float(event["train_s"]), line))
    clock.sort()
    for (it_a, train_a, line_a), (it_b, train_b, line_b) in zip(clock, clock[1:], strict=False):
        if it_b > it_a and train_b < train_a:
            raise EventError(
                f"{path}:{line_b}: eval event: train_s={train_b} at iteration {it_b} is below"
                f" train_s={train_a} at iteration {it_a} (line {line_a}): the training clock ran backwards"
            )


def check_evals_within(path: str, evals: Iterable[tuple[int, dict[str, Any]]], completed: int) -> None:
    """An evaluation cannot come after more iterations than the run reported."""
    for line, event in evals:
        if event["iteration"] > completed:
            raise EventError(
                f"{path}:{line}: eval event: after {event['iteration']} iterations, but the run"
                f" reported {completed}"
            )


def target_stop(evals: Iterable[dict[str, Any]], target: Target | None) -> int | None:
    """The iterations completed at the first evaluation that met ``target`` (where a run
    with that target stopped training), or None."""
    if target is None:
        return None
    met = [e["iteration"] for e in evals if e["metric"] == target.metric and target.met_by(float(e["value"]))]
    return min(met) if met else None


def summarise(
    evals: list[dict[str, Any]], model: str, dataset: str | None, target: Target | None
) -> dict[str, Any]:
    """The quality columns of one run from its eval events (``QUALITY_COLUMNS``)."""
    primary = quality.primary_metric(model)
    ordered = sorted(evals, key=lambda e: e["iteration"])
    mine = [e for e in ordered if e["metric"] == primary]
    top5 = [e for e in ordered if e["metric"] == "top5"]
    final = float(mine[-1]["value"]) if mine else math.nan
    heldout = str(mine[-1].get("heldout") or dataset or "") if mine else str(dataset or "")
    learned = quality.learned(primary, final, heldout) if mine else None
    row: dict[str, Any] = {
        "quality_metric": primary,
        "final_quality": final,
        "final_top5": float(top5[-1]["value"]) if top5 else math.nan,
        "learned": learned,
        "evals": len(ordered),
        "eval_s": float(sum(float(e["eval_s"]) for e in ordered)) if ordered else math.nan,
        "target_metric": target.metric if target else None,
        "target_value": target.value if target else math.nan,
        "reached_target": None,
        "time_to_target_s": math.nan,
        "iterations_to_target": math.nan,
    }
    if target is not None:
        hits = [e for e in ordered if e["metric"] == target.metric and target.met_by(float(e["value"]))]
        row["reached_target"] = bool(hits)
        if hits:
            row["time_to_target_s"] = float(hits[0]["train_s"])
            row["iterations_to_target"] = int(hits[0]["iteration"])
    return row
