"""Checks made before any job runs, so that a study fails at once rather than halfway."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class PreflightError(RuntimeError):
    """The environment cannot hold the study's results; the message says what and why."""


def check_writable(directory: str | os.PathLike[str]) -> None:
    """Fail unless files can be created in ``directory`` (created if missing).

    Tried for real (a temporary file) rather than with os.access: root passes os.access
    on a read-only mount, and a full or read-only file system is what this is meant to
    catch.
    """
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".dlscale-write-test-"):
            pass
    except OSError as err:
        raise PreflightError(f"results directory '{path}' is not writable: {err.strerror}") from None
