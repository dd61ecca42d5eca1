"""One logging set-up for every entry point: a Snakemake script's rule log file, or a
command's own streams with the short prefix people grep for in its log."""

from __future__ import annotations

import logging
import os
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_to(path: str | os.PathLike[str]) -> None:
    """Send this process's logging (INFO and up) to the rule's ``log:`` file.

    ``force`` replaces handlers set by imports, so that nothing goes to Snakemake's
    own output instead of the rule's log.
    """
    logging.basicConfig(filename=path, level=logging.INFO, format=FORMAT, force=True)


class _Below(logging.Filter):
    """Lets through records under ``level`` (progress on stdout, trouble on stderr)."""

    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


def log_to_streams(name: str, prefix: str) -> logging.Logger:
    """Send logger ``name`` (and its children) to this process's streams as ``[prefix] message``:
    INFO to stdout, WARNING and up to stderr, flushed at once.

    For a command whose output a rule redirects into its log together with that of the
    processes it starts (the launcher and its ranks in ``run.log``): each line is flushed
    so that it lands in order among theirs, and the prefix says whose it is. It does not
    propagate to the root logger (no line twice); calling it again replaces its handlers.
    """
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    form = logging.Formatter(f"[{prefix}] %(message)s")
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(_Below(logging.WARNING))
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    for handler in (out, err):
        handler.setFormatter(form)
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger
