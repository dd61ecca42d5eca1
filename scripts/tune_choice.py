"""Snakemake glue: one (framework, model)'s tuning runs -> its choice.json.

All logic is in ``dlscale.tune.choice.choose``; this maps the rule's input and params onto it.
"""

import json
import logging
from pathlib import Path

from dlscale.base.logsetup import log_to
from dlscale.host import roofline
from dlscale.tune import choice

log_to(snakemake.log[0])
log = logging.getLogger("tune_choice")

try:
    settings = json.loads(snakemake.params.settings)
    if len(settings) < 2:  # the model's grid is the default alone (grid.is_tuned_model): no run, no check
        left_out = {sid: tuple(pair) for sid, pair in json.loads(snakemake.params.left_out).items()}
        record = choice.untuned(snakemake.wildcards.framework, snakemake.wildcards.model, settings, left_out)
    else:
        with open(snakemake.input.race, encoding="utf-8") as handle:
            race_record = json.load(handle)  # the race's last check: why each setting stopped
        events = {sid: [] for sid in settings}
        for path in snakemake.input.events:
            events[Path(path).parent.parent.name].append(path)
        record = choice.choose(
            snakemake.wildcards.framework,
            snakemake.wildcards.model,
            settings,
            events,
            default=next(iter(settings)),
            peak=roofline.read_peak(getattr(snakemake.input, "peak", None)),
            race_record=race_record,
        )
    for row in record["settings"]:
        log.info(
            "%s %s: %s; %s samples/s [%s, %s] (%s), %d/%d ok and uncontended (%d contended)%s",
            row["id"],
            json.dumps(row["settings"], sort_keys=True),
            row["verdict"],
            row["throughput"],
            row["low"],
            row["high"],
            row["interval"],
            row["ok_runs"],
            row["runs"],
            row["contended_runs"],
            f"; failed: {'; '.join(row['failed'])}" if row["failed"] else "",
        )
    log.info("chosen %s %s: %s", record["chosen"], record["chosen_settings"], record["reason"])
    choice.write_choice(snakemake.output.choice, record)
except Exception:
    log.exception("tuning choice failed")
    raise
