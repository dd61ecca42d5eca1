"""The check shared by the runners' sharded-evaluation tests (torch, Caffe, JAX): a metric
from every rank's share of the held-out set, summed, is the whole set's."""

from __future__ import annotations

from typing import Any

import pytest


def check_shares(out: dict[str, Any]) -> None:
    """Each model's metric from the shares summed is the whole set's: top-1 the same count,
    MSE within float32 inference rounding (3 shares batch the set differently: 1e-10
    relative measured in Caffe). ``out``: model -> {"whole", "2", "3"} -> {metric: [value,
    samples]}, as the tests' subprocesses print it."""
    assert set(out) == {"lenet", "autoencoder"}
    for model, found in out.items():
        [(metric, (value, samples))] = found["whole"].items()
        assert samples == 10_000 and metric == ("mse" if model == "autoencoder" else "top1")
        for world in ("2", "3"):
            [(other, (sharded, counted))] = found[world].items()
            assert (other, counted) == (metric, samples)
            if metric == "top1":
                assert sharded == value, (model, world)  # whole counts: exactly the same number
            else:
                assert sharded == pytest.approx(value, rel=1e-6), (model, world)
