"""Snakemake glue: build a framework's virtual environment (see dlscale.envs)."""

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))

from dlscale.envs import build_venv

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
build_venv(snakemake.params.venv, snakemake.input.requirements, snakemake.output.marker)
