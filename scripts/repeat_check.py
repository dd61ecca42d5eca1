"""Snakemake glue: one cell's repeats so far -> whether it needs another (repeats: auto).

The decision is dlscale.analysis.stats.needs_more_repeats on the runs' throughputs (each run's
median over its timed iterations; a failed run counts as a repeat without a value).
"""

import json

from dlscale.analysis import stats, tables
from dlscale.base import atomic
from dlscale.base.logsetup import log_to

log_to(snakemake.log[0])
events = snakemake.input.events
runs, _ = tables.load_events([events] if isinstance(events, str) else list(events))
values = [
    float(v) if status == "ok" else float("nan")
    for v, status in zip(runs["throughput"], runs["status"], strict=True)
]
more = stats.needs_more_repeats(values, float(snakemake.params.target), int(snakemake.params.cap))
decision = {"repeats": len(values), "throughputs": values, "more": bool(more)}
atomic.write_text(snakemake.output[0], json.dumps(decision, indent=1) + "\n")
print(json.dumps(decision))
