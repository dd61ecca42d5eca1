"""Snakemake glue: list a real ILSVRC-style source (files, labels by sorted class name, order).

Output ``listing`` (JSON); params ``source``, ``split``, ``seed``, ``val_labels``.
"""

import logging


def main(smk) -> None:
    from dlscale.base.logsetup import log_to
    from dlscale.data import imagenet

    log_to(smk.log[0])
    try:
        listing = imagenet.list_split(
            smk.params.source,
            smk.params.split,
            seed=int(smk.params.seed),
            val_labels=smk.params.val_labels or None,
        )
        listing.write(smk.output.listing)
        logging.info(
            "%s: %d images in %d classes, listing sha256 %s",
            listing.root,
            len(listing),
            len(listing.classes),
            listing.sha256,
        )
    except Exception:
        logging.exception("imagenet_listing failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
