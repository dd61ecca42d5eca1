"""Snakemake glue: the published record's system files -> the replay's tables and figure.

Inputs: ``systems`` (``published/*.yaml`` of the workflow; none where a copy of the workflow
lacks the folder: empty tables and a figure saying so). Outputs: ``replay`` and
``replay_summary`` (CSV) and the figure as ``figure_<format>``. Params: ``band_note`` (the TH
Express-2 preset's basis and band, written under the figure's title). All logic lives in
``dlscale.perfmodel.replay`` (the network-level model alone: no study's calibration, so the
same numbers as ``published/replay.csv``) and ``dlscale.perfmodel.figures.replay_chart``.
"""

import logging

from dlscale import atomic
from dlscale.logsetup import log_to
from dlscale.outputs import FIGURE_FORMATS
from dlscale.perfmodel import figures, replay

log_to(snakemake.log[0])
log = logging.getLogger("replay")

try:
    out = snakemake.output
    table = replay.replay(replay.load_systems(sorted(snakemake.input.systems)))
    summary = replay.summary(table)
    atomic.replace_with(out.replay, lambda tmp: table.to_csv(tmp, index=False))
    atomic.replace_with(out.replay_summary, lambda tmp: summary.to_csv(tmp, index=False))
    paths = {fmt: str(getattr(out, f"figure_{fmt}")) for fmt in FIGURE_FORMATS}
    figures.make_replay_figure(paths, table, summary, str(snakemake.params.band_note))
    for row in summary.itertuples(index=False):
        log.info(
            "%s: median |error| %.3f, worst %.3f (%s)",
            row.communication, row.median_abs_error, row.max_abs_error, row.worst,
        )  # fmt: skip
    log.info("wrote %s", ", ".join(str(path) for path in out))
except Exception:
    log.exception("replay failed")
    raise
