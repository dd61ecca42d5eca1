"""The TensorFlow runner's tunable CPU settings: one place for their names and values.

``env`` is what every process of a run gets (the runner reads the pool sizes back in
``steps.configure``; TF_ENABLE_ONEDNN_OPTS is read by TensorFlow itself at import);
``describe`` is what the launcher records in run_start (``settings``). Options:
``intra_op_threads`` (null: the rank's threads), ``inter_op_threads``, ``onednn``.
No TensorFlow import: the launcher imports this.
"""

from __future__ import annotations

from typing import Any

from dlscale.runners.tensorflow import steps
from dlscale.runspec import RunSpec


def intra_op_threads(spec: RunSpec) -> int:
    """The intra-op pool: the option, or (absent / null) the rank's threads."""
    return int(spec.options.get("intra_op_threads") or spec.threads_per_rank)


def env(spec: RunSpec) -> dict[str, str]:
    """The variables that carry the settings to every process of the run."""
    return {
        "TF_ENABLE_ONEDNN_OPTS": "1" if spec.options.get("onednn", True) else "0",
        steps.ENV_INTRA: str(intra_op_threads(spec)),
        steps.ENV_INTER: str(spec.options["inter_op_threads"]),
    }


def describe(spec: RunSpec) -> dict[str, Any]:
    """The settings a run of ``spec`` uses, by name."""
    onednn = bool(spec.options.get("onednn", True))
    return {
        "engine": "onednn" if onednn else "eigen",
        "TF_ENABLE_ONEDNN_OPTS": env(spec)["TF_ENABLE_ONEDNN_OPTS"],
        "intra_op_threads": intra_op_threads(spec),
        "inter_op_threads": int(spec.options["inter_op_threads"]),
    }
