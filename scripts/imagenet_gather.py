"""Snakemake glue: gather the converted parts into the ImageNet shard set (hard links, no copy).

Inputs ``listing`` and ``parts`` (directories, in part order); output ``shards``. The set is
checked (sizes and headers) once written.
"""

import logging


def main(smk) -> None:
    from dlscale.base.logsetup import log_to
    from dlscale.data import imagenet
    from dlscale.data.shards import ShardSet

    log_to(smk.log[0])
    try:
        listing = imagenet.Listing.read(smk.input.listing)
        out = imagenet.gather(listing, list(smk.input.parts), smk.output.shards)
        shards = ShardSet(out)
        logging.info(
            "wrote %r: %d shards, %d of %d images (%d skipped), mean %.6f std %.6f",
            shards,
            len(shards.index["shards"]),
            shards.num_samples,
            shards.index["listed"],
            shards.index["skipped_count"],
            shards.mean,
            shards.std,
        )
    except Exception:
        logging.exception("imagenet_gather failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
