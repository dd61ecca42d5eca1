"""Snakemake glue: convert one part of the listing (wildcard ``part``) into its own shards.

Input ``listing``; output ``part`` (directory); params ``parts``, ``image_size``, ``resize``,
``shard_size``. Progress (images done, skipped, images/s) goes to the log.
"""

import logging


def main(smk) -> None:
    from dlscale.base.logsetup import log_to
    from dlscale.data import imagenet

    log_to(smk.log[0])
    try:
        listing = imagenet.Listing.read(smk.input.listing)
        index = imagenet.convert_part(
            listing,
            int(smk.wildcards.part),
            int(smk.params.parts),
            smk.output.part,
            image_size=int(smk.params.image_size),
            resize=int(smk.params.resize),
            shard_size=int(smk.params.shard_size),
        )
        logging.info(
            "part %d/%d: %d converted, %d skipped, in %.1f s",
            index["part"] + 1,
            index["parts"],
            index["converted"],
            len(index["skipped"]),
            index["seconds"],
        )
    except Exception:
        logging.exception("imagenet_part failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
