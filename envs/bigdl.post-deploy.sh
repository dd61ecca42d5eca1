#!/usr/bin/env bash
# Snakemake runs this inside the new conda env (envs/bigdl.yaml) once it is created: the
# BigDL wheels, without their pinned dependencies (see envs/bigdl.txt).
set -euo pipefail
python -m pip install --disable-pip-version-check -q --no-deps -r "$(dirname "$0")/bigdl.nodeps.txt"
