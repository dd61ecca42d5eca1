"""Held-out quality: the metrics a run is judged by, which way is better, and what chance is.

Throughput alone can be bought by doing less or different work (MLPerf's reason for time to
train to a target quality), so every run ends with an evaluation on a held-out split and
the verdicts never crown a framework whose model did not learn. This module is the one
list of metrics and their rules; the runners measure, ``dlscale.analysis.tables`` reads the eval
events, ``dlscale.analysis.cells`` decides. Standard library only: runners' venvs import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dlscale import catalog, thresholds


@dataclass(frozen=True)
class Metric:
    """A held-out quality measure: its name, its direction and how to read it."""

    name: str
    higher_is_better: bool
    meaning: str


METRICS: Mapping[str, Metric] = MappingProxyType(
    {
        m.name: m
        for m in (
            Metric("top1", True, "share of held-out samples whose highest-scored class is the label"),
            Metric("top5", True, "share of held-out samples whose label is among the five highest-scored"),
            Metric("mse", False, "mean squared error of the reconstruction, pixels on [0, 1]"),
        )
    }
)
METRIC_NAMES: tuple[str, ...] = tuple(METRICS)

#: Classes per dataset (top-k chance is k / classes).
NUM_CLASSES: Mapping[str, int] = MappingProxyType({"mnist": 10, "fashion-mnist": 10, "imagenet": 1000})

#: Pixel mean and standard deviation of each greyscale dataset's training set on [0, 1]
#: (MNIST's are canonical, STACK.md; Fashion-MNIST's the same computation on Debian's
#: dataset-fashion-mnist).
PIXEL_STATS: Mapping[str, tuple[float, float]] = MappingProxyType(
    {"mnist": (0.1306604763, 0.3081078039), "fashion-mnist": (0.2860402, 0.3530242)}
)

#: Metrics each model is evaluated with; the first is the one a target and a verdict use.
MODEL_METRICS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"lenet": ("top1",), "autoencoder": ("mse",), "alexnet": ("top1", "top5"), "resnet50": ("top1", "top5")}
)

#: How far from chance a model must be to count as having learned (dlscale.thresholds, with
#: the measurements in docs/thresholds.md), both in multiples of chance: top-k at least...
LEARNED_TOPK = thresholds.threshold("learned_topk_factor")
#: ...and a reconstruction error at most this share of chance's.
LEARNED_MSE = thresholds.threshold("learned_mse_share")


def metrics_of(model: str) -> tuple[str, ...]:
    """The metrics ``model`` is evaluated with (KeyError naming an unknown model)."""
    catalog.model(model)
    return MODEL_METRICS[model]


def primary_metric(model: str) -> str:
    return metrics_of(model)[0]


def metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown quality metric {name!r} (known: {', '.join(METRIC_NAMES)})") from None


def meets(name: str, value: float, target: float) -> bool:
    """Whether ``value`` of metric ``name`` reaches ``target`` (NaN never does)."""
    if value != value:
        return False
    return value >= target if metric(name).higher_is_better else value <= target


def chance_level(name: str, dataset: str) -> float:
    """The quality of a model that learned nothing: k / classes for top-k; for the
    reconstruction MSE, that of an autoencoder whose output stays at the sigmoid's 0.5
    everywhere, as an untrained one's does: E[(x - 1/2)^2] = variance + (mean - 1/2)^2. NaN
    where the dataset has no known level (synthetic data, whose labels are drawn at random)."""
    if dataset.endswith("synthetic"):
        return float("nan")  # random labels: nothing to learn, no level to beat
    if name in ("top1", "top5"):
        classes = NUM_CLASSES.get(dataset)
        if not classes:
            return float("nan")
        return min(1.0, (1 if name == "top1" else 5) / classes)
    if name == "mse":
        if dataset not in PIXEL_STATS:
            return float("nan")
        mean, std = PIXEL_STATS[dataset]
        return std**2 + (mean - 0.5) ** 2
    raise KeyError(f"unknown quality metric {name!r} (known: {', '.join(METRIC_NAMES)})")


def learned(name: str, value: float, dataset: str) -> bool | None:
    """Whether a held-out ``value`` shows the model learned: top-k at least
    ``LEARNED_TOPK`` x chance (or perfect, where that is above 1), MSE at most ``LEARNED_MSE``
    x chance's: the thresholds' ``passes`` on ``value / chance``. None where chance is unknown."""
    chance = chance_level(name, dataset)
    if value != value or chance != chance:
        return None
    if metric(name).higher_is_better:
        return value >= 1.0 or LEARNED_TOPK.passes(value / chance)
    return LEARNED_MSE.passes(value / chance)


#: How a run that stopped on a non-finite loss says so (``runners.common.NonFiniteLoss``):
#: a diverged run, an outcome of its learning rate and batch, not a fault of the harness.
#: The analysis counts it as diverged (``analysis.batch_scaling``); the workflow does not
#: redo it (``study.jobs.failed_attempts``): the same seed and rate diverge again.
_DIVERGED_REASON = re.compile(r"loss became (?:nan|inf|-inf)\b", re.IGNORECASE)


def diverged_reason(value: float, iteration: int, rank: int) -> str:
    """The failure reason of a run whose loss became ``value`` (NaN or infinite)."""
    return f"loss became {value} at iteration {iteration} on rank {rank}"


def says_diverged(reason: str | None) -> bool:
    """Whether a run's failure reason says its loss became NaN or infinite."""
    return bool(reason) and _DIVERGED_REASON.search(str(reason)) is not None
