"""One logging set-up for every Snakemake script: the rule's log file, one format."""

from __future__ import annotations

import logging
import os

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_to(path: str | os.PathLike[str]) -> None:
    """Send this process's logging (INFO and up) to the rule's ``log:`` file.

    ``force`` replaces handlers set by imports, so that nothing goes to Snakemake's
    own output instead of the rule's log.
    """
    logging.basicConfig(filename=path, level=logging.INFO, format=FORMAT, force=True)
