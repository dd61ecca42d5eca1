"""Snakemake glue: one (model, global batch)'s learning-rate sweep -> its choice.

All logic is in ``dlscale.tune.rate_choice``; this maps the rule's input and params onto it.
"""

import json
import logging

from dlscale.base.logsetup import log_to
from dlscale.tune import rate_choice

log_to(snakemake.log[0])
log = logging.getLogger("lr_choice")

try:
    factors = {float(rate): float(factor) for rate, factor in json.loads(snakemake.params.factors).items()}
    model, batch = snakemake.wildcards.model, int(snakemake.wildcards.global_batch)
    made = rate_choice.choice(list(snakemake.input.events), model, batch, factors)
    for row in made["rates"]:
        log.info(
            "%s at global batch %d, rate %g (x%g): %s/%s reached, %s diverged; steps %s [%s, %s]",
            model, batch, row["lr_rate"], row["factor"], row["reached"], row["repeats"],
            row["diverged"], row["steps_to_target"], row["steps_low"], row["steps_high"],
        )  # fmt: skip
    log.info("chosen: %g (%s)", made["chosen_rate"], made["why"])
    rate_choice.write_choice(snakemake.output.choice, made)
except Exception:
    log.exception("learning-rate choice failed")
    raise
