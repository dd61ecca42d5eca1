"""Snakemake glue: every learning-rate choice of the study -> one table (dlscale.tune.rate_choice)."""

import json
import logging

from dlscale.base import atomic
from dlscale.base.logsetup import log_to
from dlscale.base.untrusted import write_csv
from dlscale.tune import rate_choice

log_to(snakemake.log[0])
log = logging.getLogger("lr_tuning_table")

try:
    choices = []
    for path in snakemake.input.choices:
        with open(path, encoding="utf-8") as handle:
            choices.append(json.load(handle))
    table = rate_choice.sweep_table(choices)
    atomic.replace_with(snakemake.output.table, lambda tmp: write_csv(table, tmp))
    log.info("wrote %s: %d rates of %d choices", snakemake.output.table, len(table), len(choices))
except Exception:
    log.exception("learning-rate table failed")
    raise
