"""A learning rate that changes during a Caffe run, with torch's momentum rule.

Caffe's SGD keeps ``v = m v + lr g; w -= v``, torch's ``b = m b + g; w -= lr b``: the two
agree while the rate is fixed, not while a warm-up ramp changes it (Caffe's history holds
the rates of past steps; Goyal et al. 2017 call the fix "momentum correction"). pycaffe does
not expose the solver's history, so a run with a ramp runs the solver with momentum 0 and
base_lr 1, and this callback, after the gradient average, keeps the momentum buffer ``b``
and leaves ``lr_t b`` in the gradient blobs: Caffe's update then subtracts exactly
torch's step. A run whose rate does not change keeps Caffe's own solver (``solver_rates``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.runners.caffe.models import learnable_blobs
from dlscale.runspec import RunSpec


def solver_rates(spec: RunSpec) -> tuple[float, float]:
    """(base_lr, momentum) of the run's Caffe solver: the rule's rate and the spec's
    momentum for a fixed rate; 1 and 0 for a ramp (``TorchMomentum`` does both)."""
    if spec.warmup_ramp:
        return 1.0, 0.0
    return spec.target_learning_rate, spec.momentum


class TorchMomentum:
    """Torch's momentum SGD at the spec's rate of each step, written into the gradients.

    Registered after the gradient all-reduce (the solver calls its callbacks in the order
    they were added), so ``b`` accumulates the averaged gradient, as every framework's does.
    ``step`` is the optimiser step about to run; the runner advances it after each step.
    """

    def __init__(self, solver: Any, spec: RunSpec):
        self.spec = spec
        self.step = 0
        #: The rate of the last step applied (recorded on its iteration event).
        self.last_rate = spec.learning_rate_at(0)
        self.diffs = [blob.diff for _, _, blob in learnable_blobs(solver.net)]
        self.buffers = [np.zeros_like(diff) for diff in self.diffs]
        solver.add_callback(self._on_start, self._on_gradients_ready)

    def _on_start(self) -> None:
        pass

    def _on_gradients_ready(self) -> None:
        rate = self.last_rate = self.spec.learning_rate_at(self.step)
        momentum = self.spec.momentum
        for diff, buffer in zip(self.diffs, self.buffers, strict=True):
            buffer *= momentum
            buffer += diff
            np.multiply(buffer, rate, out=diff)
        self.step += 1
