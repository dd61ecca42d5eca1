"""Snakemake glue: Fashion-MNIST (Debian package or a user directory), verified, as shards.

Outputs ``summary`` (JSON of ``verify_fashion_mnist``), ``idx`` (directory of the four
uncompressed idx files), ``shards`` (the training set as a shard set, images NHWC with one
channel) and ``heldout`` (the test split, the held-out set runs evaluate on); params ``source`` ("debian" or a directory) and ``shard_size``. Fails, with the
reason in the log, unless the files are byte-identical to canonical Fashion-MNIST.
"""

import json
import logging


def main(smk) -> None:
    from dlscale.base import atomic
    from dlscale.base.logsetup import log_to
    from dlscale.data import fashion_mnist
    from dlscale.data.mnist import read_idx
    from dlscale.data.shards import ShardSet, write_shards

    log_to(smk.log[0])
    try:
        source = str(smk.params.source)
        idx = fashion_mnist.import_fashion_mnist(source, smk.output.idx)
        summary = fashion_mnist.verify_fashion_mnist(idx)
        summary["source"] = (
            f"Debian dataset-fashion-mnist ({fashion_mnist.DEBIAN_DIR})" if source == "debian" else source
        )
        out = write_shards(
            smk.output.shards,
            read_idx(idx["train_images"])[..., None],
            read_idx(idx["train_labels"]),
            dataset="fashion-mnist",
            split="train",
            num_classes=10,
            shard_size=int(smk.params.shard_size),
            source=f"Fashion-MNIST train idx ({summary['source']}, MD5-verified)",
        )
        write_shards(
            smk.output.heldout,
            read_idx(idx["test_images"])[..., None],
            read_idx(idx["test_labels"]),
            dataset="fashion-mnist",
            split="test",
            num_classes=10,
            shard_size=int(smk.params.shard_size),
            source=f"Fashion-MNIST t10k idx ({summary['source']}, MD5-verified): the held-out set",
        )
        atomic.write_bytes(smk.output.summary, (json.dumps(summary, indent=1) + "\n").encode())
        logging.info("Fashion-MNIST verified: %s; wrote %r", summary, ShardSet(out, verify=True))
    except Exception:
        logging.exception("fashion_mnist failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
