"""Batches prepared before the step: one rule for every runner's ``input: memory`` feed.

A runner's loop is timed from one iteration event to the next, so whatever it does per
step besides the framework's own step is harness cost (benchmarks/harness_overhead.py).
Converting each batch from uint8 to normalised float32 inside the loop was that cost:
four passes over the batch in numpy or torch, 5-12% of a LeNet step. So every runner
normalises its whole part once, before training (outside every iteration), in its own
framework's conversion code, and per step only gathers the batch's rows, which is what a
plain training loop over an in-memory dataset does (``benchmarks.bare_common``'s fair bare
loops do the same gather).

A part too large for that (a real ImageNet part: 0.6 MB of float32 per 224x224 image) is
converted one batch at a time as before; its steps take seconds, against milliseconds of
conversion. ``input: pipeline`` is unchanged: its workers convert ahead of the step.
Framework-neutral: numpy only.
"""

from __future__ import annotations

import numpy as np

#: Most float32 bytes a rank's normalised part may take to be prepared whole. MNIST's
#: 60,000 images are 188 MB (split among the node's ranks); the synthetic ImageNet set of
#: the tests and benchmarks a few MB per sample dozen. 1 GiB keeps a rank's memory well
#: inside a node's share while covering every MNIST-sized run.
PREPARED_LIMIT_BYTES = 1 << 30


def prepare_whole(images: np.ndarray, limit: int = PREPARED_LIMIT_BYTES) -> bool:
    """Whether a part of uint8 ``images`` is normalised whole, before training."""
    return int(images.size) * 4 <= limit
