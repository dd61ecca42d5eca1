"""TensorFlow runner: one process of a run, in the study's chosen distributed mode.

``tensorflow.strategy`` in the study config picks the mode (``mwms``: ring all-reduce
between workers, see ``mwms.py``; ``ps``: parameter servers and a chief that drives the
workers, see ``ps.py``, with the servers in ``server.py``). Thread pools are set
explicitly (intra/inter op, from the plan) and recorded with the versions; oneDNN stays on
(it doubled TensorFlow's CPU speed on these machines).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dlscale.runners.common import RunContext
from dlscale.runners.tensorflow import steps
from dlscale.runspec import RunSpec


def import_tensorflow() -> Any:
    """TensorFlow with the run's settings applied before its runtime starts."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    steps.configure(tf)
    return tf


def versions() -> dict[str, str]:
    tf = import_tensorflow()
    import keras

    threads = steps.configure(tf)
    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
        "strategy": os.environ.get("DLSCALE_TF_STRATEGY", "mwms"),
        "intra_op_threads": str(threads["intra_op"]),
        "inter_op_threads": str(threads["inter_op"]),
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1"),
        "backend": "grpc",
    }


def peers(ctx: RunContext) -> list[tuple[str, str]]:
    """Every task of the run's cluster spec, which this process must reach (checked by
    dlscale.runners.common before any gRPC server starts)."""
    from dlscale.runners.tensorflow import cluster as cluster_mod

    return cluster_mod.peers_of(cluster_mod.cluster_of(os.environ, ctx.placement))


def exits_without_teardown(spec: RunSpec) -> bool:
    """A worker alone (mwms at one rank: no strategy, no server, no peer) exits without the
    interpreter's teardown once its end is written (``common.exit_skipping_teardown``):
    TensorFlow's teardown took 0.65-0.80 s of every run and releases nothing outside the
    process (docs/wall-time.md). Not with peers: a collective's receiver pulls the sender's
    buffer, and a worker that left at once failed its peer's last read ("Socket closed ...
    RecvBuf", 2026-12-05); the teardown's time covers that race."""
    return spec.world_size == 1 and spec.options["strategy"] == "mwms"


def train(ctx: RunContext) -> None:
    tf = import_tensorflow()
    strategy = ctx.spec.options["strategy"]
    if strategy == "mwms":
        from dlscale.runners.tensorflow import mwms

        mwms.train(ctx, tf)
    elif strategy == "ps":
        from dlscale.runners.tensorflow import ps

        ps.train(ctx, tf)
    else:
        raise ValueError(f"unknown tensorflow.strategy {strategy!r} (expected mwms or ps)")
