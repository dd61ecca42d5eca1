"""The comparison group and the speedup rule, once: what a run or a cell is compared with.

Runs (and the cells over them) are compared within one framework in one **comparison
group**: the same model, network (``host`` or an emulated interconnect: a 2-node run on emulated 1 GbE
is measured against the 1-node run on the same network, not against the host's loopback),
dataset, scaling mode, ranks per node and batch (``batch_key``: the batch per rank under
weak scaling, the global batch under strong: what stays fixed). ``COMPARISON_GROUP`` is
what the frameworks compete within, ``SPEEDUP_GROUP`` one framework in it; only the node
count varies inside a speedup group.

**The baseline rule** (``baseline_nodes``): the baseline is the smallest node count among
the group's ok runs, counting only uncontended runs while the group has any (a baseline
slowed by other work is what makes efficiencies above 1; a failed 1-node run makes the next
count the baseline rather than leaving the group without one). The baseline throughput is
the median over the ok runs at that count (uncontended ones while there are any).

``speedup = throughput / baseline throughput``, ``efficiency = speedup / (nodes /
baseline_nodes)``. Two readers apply it, to two different numerators:

* per run (``add_speedup``, the runs table): the run's own throughput over the baseline's
  median, so every repeat has its own speedup;
* per cell (``dlscale.analysis.cells``): the cell's median throughput over the baseline's
  median (``stats.ratio_interval``), with an interval from the two cells' repeats.

Throughput (global samples per second) is the right basis under both scaling modes: under
strong scaling the global batch is fixed, so the throughput ratio equals the classic time
ratio T_base / T_n; under weak scaling each step does more work as nodes grow, so a time
ratio would ideally stay at 1 and hide the gain, while the throughput ratio still ideally
equals the node ratio. One formula, one ideal line (``nodes / baseline_nodes``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: A comparison group: what stays fixed across the cells compared with each other (the
#: frameworks and node counts compete inside it), in the order the findings show it. Not a
#: framework's set-up (``catalog.Framework.setups``: a framework with its strategy).
COMPARISON_GROUP: tuple[str, ...] = ("model", "network", "dataset", "scaling", "ranks_per_node", "batch")
#: Runs and cells compared for speedup: one framework in one comparison group.
SPEEDUP_GROUP: tuple[str, ...] = ("framework", *COMPARISON_GROUP)


def batch_key(runs: pd.DataFrame) -> pd.Series:
    """The batch that stays fixed: per rank under weak scaling, global under strong."""
    return runs["global_batch"].where(runs["scaling"].eq("strong"), runs["batch_per_rank"])


def group_keys(table: pd.DataFrame) -> list[pd.Series]:
    """The ``SPEEDUP_GROUP`` columns of ``table`` as group keys (missing values as "";
    ``batch`` from ``batch_key`` where the table has no such column, as a runs table)."""
    return [
        (batch_key(table) if name == "batch" and "batch" not in table else table[name])
        .astype(object)
        .fillna("")
        for name in SPEEDUP_GROUP
    ]


def baseline_nodes(table: pd.DataFrame, clean: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Per row of ``table`` (ok runs or cells with a throughput, columns ``SPEEDUP_GROUP``
    and ``nodes``), its group's baseline node count, and whether the row may serve as a
    baseline. ``clean``: the row is (or has) an uncontended ok run. The module's rule."""
    keys = group_keys(table)
    clean = clean.astype(bool)
    basis = clean | ~clean.groupby(keys, dropna=False).transform("any")
    return table["nodes"].where(basis).groupby(keys, dropna=False).transform("min"), basis


def add_speedup(runs: pd.DataFrame) -> pd.DataFrame:
    """Add ``baseline_nodes``, ``speedup`` and ``efficiency`` to a runs table (module
    docstring): each ok run's throughput over its group's baseline median. Only an ok run
    with a positive, finite throughput can be a baseline or get a speedup (never an
    infinite one); contended runs (column ``contended``) as the rule says."""
    out = runs.copy()
    for name in ("baseline_nodes", "speedup", "efficiency"):
        out[name] = np.nan
    throughput = pd.to_numeric(out["throughput"], errors="coerce")
    ok = out["status"].eq("ok") & throughput.gt(0) & np.isfinite(throughput)
    if not ok.any():
        return out
    okr = out.loc[ok]
    contended = okr["contended"] if "contended" in okr else pd.Series(False, index=okr.index)
    clean = ~contended.astype(object).where(contended.notna(), False).astype(bool)
    base_nodes, basis = baseline_nodes(okr, clean)
    at_baseline = okr["throughput"].where(basis & okr["nodes"].eq(base_nodes))
    baseline_tp = at_baseline.groupby(group_keys(okr), dropna=False).transform("median")
    speedup = okr["throughput"] / baseline_tp
    out.loc[ok, "baseline_nodes"] = base_nodes.astype("float64")
    out.loc[ok, "speedup"] = speedup
    out.loc[ok, "efficiency"] = speedup / (okr["nodes"] / base_nodes)
    return out
