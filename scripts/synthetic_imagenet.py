"""Snakemake glue: write a seeded synthetic ImageNet-shaped shard set.

Output ``shards`` (directory); params ``num_samples``, ``seed``, ``shard_size``,
``image_size``, ``num_classes``.
"""

import logging


def main(smk) -> None:
    from dlscale.data.shards import ShardSet
    from dlscale.data.synthetic import make_synthetic_imagenet
    from dlscale.logsetup import log_to

    log_to(smk.log[0])
    try:
        params = {
            key: int(getattr(smk.params, key))
            for key in ("num_samples", "seed", "shard_size", "image_size", "num_classes")
        }
        out = make_synthetic_imagenet(smk.output.shards, **params)
        logging.info("wrote %r with %s", ShardSet(out), params)
    except Exception:
        logging.exception("synthetic_imagenet failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
