"""Snakemake glue: every choice.json -> results/tune/tuning.csv (dlscale.tune.choice.choice_table)."""

import json
import logging

import pandas as pd

from dlscale.base import atomic
from dlscale.base.logsetup import log_to
from dlscale.base.untrusted import write_csv
from dlscale.tune import choice

log_to(snakemake.log[0])
log = logging.getLogger("tune_report")

try:
    records = []
    for path in snakemake.input.choices:
        with open(path, encoding="utf-8") as handle:
            records.append(json.load(handle))
    table = pd.DataFrame(choice.choice_table(records), columns=choice.TABLE_COLUMNS)
    atomic.replace_with(snakemake.output.table, lambda tmp: write_csv(table, tmp))
    log.info("wrote %s (%d settings)", snakemake.output.table, len(table))
except Exception:
    log.exception("tuning table failed")
    raise
