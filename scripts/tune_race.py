"""Snakemake glue: one (framework, model)'s tuning runs so far -> its racing check
(dlscale.tune.choice.race): run another round, and which settings it runs.

All logic is in ``dlscale.tune.choice.race``; this maps the rule's input and params onto it.
"""

import json
import logging
from pathlib import Path

from dlscale.base import atomic
from dlscale.base.logsetup import log_to
from dlscale.tune import choice

log_to(snakemake.log[0])
log = logging.getLogger("tune_race")

try:
    settings = json.loads(snakemake.params.settings)
    events = {sid: [] for sid in settings}
    for path in snakemake.input.events:
        events[Path(path).parent.parent.name].append(path)
    dropped = None
    previous = snakemake.input.previous  # one file (a str), or none after the first round
    if previous:
        with open(previous if isinstance(previous, str) else previous[0], encoding="utf-8") as handle:
            dropped = json.load(handle)["status"]
    default = next(iter(settings))
    samples, failed, unlearned = choice.race_samples(events, default)
    check = choice.race(
        samples,
        default=default,
        budget=int(snakemake.params.budget),
        dropped=dropped,
        failed=failed,
        unlearned=unlearned,
    )
    check["done"] = int(snakemake.wildcards.done)
    for sid, state in check["status"].items():
        log.info("%s %s: %s", sid, json.dumps(settings[sid], sort_keys=True), state)
    log.info(
        "more: %s, next: %s (%d of %d runs spent)",
        check["more"],
        check["next"],
        check["runs"],
        check["budget"],
    )
    atomic.write_text(snakemake.output[0], json.dumps(check, indent=1, sort_keys=True) + "\n")
except Exception:
    log.exception("racing check failed")
    raise
