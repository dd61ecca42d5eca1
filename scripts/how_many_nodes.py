"""Snakemake glue: how many nodes to a trained model -> the projection of time and
node-hours to target (``dlscale.perfmodel.nodes_projection``) and the two figures, each
checked panel by panel against its tables (``dlscale.figures.nodes``)."""

import logging

from dlscale.base import atomic
from dlscale.base.logsetup import log_to
from dlscale.base.untrusted import write_csv
from dlscale.figures import nodes
from dlscale.figures.study import read_csv_table
from dlscale.perfmodel.nodes_projection import project_to_target

log_to(snakemake.log[0])
log = logging.getLogger("how_many_nodes")


try:
    inputs = snakemake.input
    curves, summary = project_to_target(
        read_csv_table(inputs.projection),
        read_csv_table(inputs.target_runs),
        snakemake.params.warmup,
        host_steps=read_csv_table(inputs.host_model),
    )
    atomic.replace_all(
        {
            snakemake.output.projection: lambda tmp: write_csv(curves, tmp),
            snakemake.output.summary: lambda tmp: write_csv(summary, tmp),
        }
    )
    for row in summary.itertuples():
        log.info("%s %s %s: fastest at %s nodes, stops paying at %s; held-out error %s; %s",
                 row.framework, row.model, row.lr_rule, row.fastest_nodes, row.stops_paying_nodes,
                 row.relative_error, row.note)  # fmt: skip
    tables = {
        "steps": read_csv_table(inputs.steps),
        "fits": read_csv_table(inputs.fits),
        "by_nodes": read_csv_table(inputs.by_nodes),
        "projected": curves,
        "summary": summary,
    }
    out = {
        name: {fmt: snakemake.output[f"{name}_{fmt}"] for fmt in snakemake.params.formats}
        for name in nodes.NODES_FIGURES
    }
    nodes.draw_checked(tables, out)
except Exception:
    log.exception("how many nodes failed")
    raise
