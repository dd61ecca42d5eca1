"""Seeded synthetic ImageNet-shaped data, for throughput benchmarks where no ImageNet is at hand.

Throughput of the ImageNet models depends on tensor shapes, not on pixel content, so random
images of the right shape measure the same compute and communication. Each sample is drawn
from its own generator seeded by ``(seed, sample index)``: the bytes of a sample depend only
on the seed and its index, not on the shard size or on how many samples came before, and a
set of any size is generated one shard at a time without holding it whole in memory.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dlscale.data.shards import ShardWriter

DATASET = "imagenet-synthetic"


def synthetic_sample(seed: int, index: int, image_size: int, num_classes: int) -> tuple[np.ndarray, int]:
    """Sample ``index`` of the set for ``seed``: a uint8 (image_size, image_size, 3) image and a label."""
    rng = np.random.default_rng([seed, index])
    label = int(rng.integers(0, num_classes))
    return rng.integers(0, 256, size=(image_size, image_size, 3), dtype=np.uint8), label


def make_synthetic_imagenet(
    out_dir: str | os.PathLike[str],
    *,
    num_samples: int,
    seed: int,
    shard_size: int,
    image_size: int = 224,
    num_classes: int = 1000,
    first_index: int = 0,
    split: str = "train",
) -> Path:
    """Write ``num_samples`` synthetic samples as a shard set at ``out_dir`` (atomically).

    Same seed, same bytes. Memory use is one shard. Returns ``out_dir``. ``first_index``
    starts the samples further along the same sequence: the held-out split takes the
    samples after the training set's, so the two never share one.
    """
    if num_samples < 1 or shard_size < 1 or image_size < 1 or num_classes < 1:
        raise ValueError(
            f"num_samples ({num_samples}), shard_size ({shard_size}), image_size ({image_size}) and "
            f"num_classes ({num_classes}) must all be >= 1"
        )
    if first_index < 0:
        raise ValueError(f"first_index {first_index} must be >= 0")
    if seed < 0:
        raise ValueError(f"seed {seed} must be >= 0 (numpy seed sequences take no negative entropy)")
    source = f"synthetic: numpy default_rng([seed={seed}, sample index]), uniform pixels and labels"
    with ShardWriter(out_dir, dataset=DATASET, split=split, num_classes=num_classes, source=source) as writer:
        for start in range(0, num_samples, shard_size):
            count = min(shard_size, num_samples - start)
            images = np.empty((count, image_size, image_size, 3), dtype=np.uint8)
            labels = np.empty(count, dtype=np.int64)
            for i in range(count):
                images[i], labels[i] = synthetic_sample(
                    seed, first_index + start + i, image_size, num_classes
                )
            writer.add(images, labels)
        return writer.commit()
