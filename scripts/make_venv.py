"""Snakemake glue: build a framework's virtual environment from its lock (see dlscale.envs)."""

from dlscale.base.logsetup import log_to
from dlscale.envs import EnvError, build_venv, requirement_files, requirements_sha

log_to(snakemake.log[0])
framework, spec_dir = snakemake.wildcards.framework, snakemake.params.spec_dir
if requirements_sha(framework, spec_dir) != snakemake.wildcards.requirements:
    raise EnvError(
        f"envs/{framework}.lock changed while the workflow ran (hash {requirements_sha(framework, spec_dir)},"
        f" planned {snakemake.wildcards.requirements}): run snakemake again"
    )
build_venv(snakemake.params.venv, requirement_files(framework, spec_dir)[0], snakemake.output.marker)
