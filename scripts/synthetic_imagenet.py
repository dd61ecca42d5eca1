"""Snakemake glue: write a seeded synthetic ImageNet-shaped shard set.

Outputs ``shards`` (directory) and ``heldout`` (the held-out split: ``heldout_samples``
samples after the training set's in the same seeded sequence); params ``num_samples``,
``heldout_samples``, ``seed``, ``shard_size``, ``image_size``, ``num_classes``.
"""

import logging


def main(smk) -> None:
    from dlscale.base.logsetup import log_to
    from dlscale.data.shards import ShardSet
    from dlscale.data.synthetic import make_synthetic_imagenet

    log_to(smk.log[0])
    try:
        params = {
            key: int(getattr(smk.params, key))
            for key in ("num_samples", "seed", "shard_size", "image_size", "num_classes")
        }
        out = make_synthetic_imagenet(smk.output.shards, **params)
        logging.info("wrote %r with %s", ShardSet(out), params)
        held = {**params, "num_samples": int(smk.params.heldout_samples)}
        out = make_synthetic_imagenet(
            smk.output.heldout, **held, first_index=params["num_samples"], split="heldout"
        )
        logging.info("wrote the held-out %r", ShardSet(out))
    except Exception:
        logging.exception("synthetic_imagenet failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
