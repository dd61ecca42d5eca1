"""The torch runner's tunable CPU settings: described for the run record, applied in a rank.

``describe`` is what the launcher records in run_start (``settings``, with the thread
variables every rank gets); ``apply`` sets them inside a rank, before the model is
built. Options: ``mkldnn`` (oneDNN kernels, torch.backends.mkldnn.enabled),
``channels_last`` (memory format of the ImageNet-sized CNNs) and
``channels_last_all_models`` (that memory format for every model, or none; null: the
former's rule); threads come from ``threads_per_rank``.
No torch import at module level: the launcher imports this from the workflow's python.
"""

from __future__ import annotations

from typing import Any

from dlscale import catalog
from dlscale.runspec import RunSpec


def has_layout(spec: RunSpec) -> bool:
    """Whether the run's model has 4-D tensors a memory format lays out (its convolutions,
    ``catalog.Model.convolutional``); without, every memory format computes the same."""
    return catalog.model(spec.model).convolutional


def channels_last(spec: RunSpec) -> bool:
    """Whether a run of ``spec`` trains in channels_last: ``channels_last_all_models`` when
    set (true or false, for every model), else the ``channels_last`` option for the
    ImageNet-sized CNNs only (the rule every spec written before the former existed meant).
    Never for a model without convolutions (``catalog.Model.convolutional``): it has no 4-D
    tensor to lay out, so either way it computes the same.

    The one rule for everyone who lays out a model or a batch: the runner's feeds and model
    (``dlscale.runners.torch.data``, ``train``), the run record (``describe``) and the
    benchmark's bare loop (``benchmarks.torch_worker``), so that the bare loop can never run
    another memory format than the runner it is compared with.
    """
    if not has_layout(spec):
        return False
    forced = spec.options.get("channels_last_all_models")
    if forced is not None:
        return bool(forced)
    return _by_rule(spec)


def _by_rule(spec: RunSpec) -> bool:
    """The layout the ``channels_last`` option's rule gives: the ImageNet-sized CNNs only."""
    return bool(spec.options["channels_last"]) and not spec.mnist_sized


def describe(spec: RunSpec) -> dict[str, Any]:
    """The settings a run of ``spec`` uses, by name (engine, memory format, threads)."""
    mkldnn = bool(spec.options["mkldnn"])
    out: dict[str, Any] = {
        "engine": "onednn" if mkldnn else "native",
        "mkldnn": mkldnn,
        "channels_last": channels_last(spec),
        "intra_op_threads": spec.threads_per_rank,
    }
    forced = spec.options.get("channels_last_all_models")
    # Recorded when set, as in the spec (older records unchanged), where it decides the
    # layout: not for a model without convolutions (it computes as without it), nor where it
    # forces the layout the rule gives anyway (false on LeNet, true on AlexNet). A setting
    # that changes nothing then has the record of one that is unset, and the tuning grid
    # races it once (``dlscale.tune.grid.model_grid_report``).
    if forced is not None and has_layout(spec) and bool(forced) != _by_rule(spec):
        out["channels_last_all_models"] = bool(forced)
    return out


def apply(torch: Any, spec: RunSpec) -> None:
    """Set the run's engine in this rank (torch imported by the caller)."""
    torch.backends.mkldnn.enabled = bool(spec.options["mkldnn"])
