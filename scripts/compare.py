"""Snakemake glue: the study of config key ``compare_with`` (BASE) against this one (NEW)
-> results/compare/ (``dlscale.compare.comparison``: the same two functions as ``python -m
dlscale.compare.comparison BASE results --out results/compare``)."""

import logging
import sys
from pathlib import Path

from dlscale.base.logsetup import log_to
from dlscale.compare import comparison

log_to(snakemake.log[0])
log = logging.getLogger("compare")

try:
    results = str(Path(snakemake.input.runs).parent)
    result = comparison.compare([snakemake.params.base, results])
    comparison.write_comparison(result, Path(snakemake.output.comparison).parent)
    for line in comparison.summary(result):
        log.info("%s", line)
except comparison.CompareError as err:
    # Bad input (no cell in common, a tampered archive, ...): one line naming it.
    log.error("comparison refused: %s", err)
    sys.exit(f"compare: {compare.one_line(err)}")
except Exception:
    log.exception("comparison failed")
    raise
