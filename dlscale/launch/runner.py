"""The framework runner's light launcher module, which lays a run out (``plan``), says its
CPU settings and whether it would listen on every interface."""

from __future__ import annotations

import importlib
from types import ModuleType


def runner_launcher(framework: str) -> ModuleType:
    """The runner's light launcher module (``dlscale.runners.<framework>.launcher``)."""
    return importlib.import_module(f"dlscale.runners.{framework}.launcher")
