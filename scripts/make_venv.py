"""Snakemake glue: build a framework's virtual environment (see dlscale.envs)."""



from dlscale.envs import build_venv
from dlscale.logsetup import log_to

log_to(snakemake.log[0])
build_venv(snakemake.params.venv, snakemake.input.requirements, snakemake.output.marker)
