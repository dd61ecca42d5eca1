"""Shared fixtures: paths of the repository and of its virtual environments."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ENVS_DIR = Path(os.environ.get("DLSCALE_ENVS_DIR", REPO / ".venvs"))
SCHEMA = REPO / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def schema() -> dict:
    from dlscale.study import load_schema

    return load_schema(SCHEMA)
