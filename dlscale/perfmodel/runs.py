"""The study's runs as the model reads them: set-ups, pooled studies, the measured columns,
and the compute baselines every prediction starts from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlscale import catalog
from dlscale.networks import HOST
from dlscale.perfmodel.patterns import BIGDL, PARAMETERS, PS, RING, SETUP_PATTERN, gradient_bytes


def setup_of(framework: str, versions: Any = None) -> str:
    """A run's set-up: its framework, and for TensorFlow its strategy (``tensorflow-ps``)."""
    if framework == "tensorflow":
        try:
            recorded = json.loads(versions) if isinstance(versions, str) else (versions or {})
        except ValueError:
            recorded = {}
        if isinstance(recorded, dict) and recorded.get("strategy") == "ps":
            return "tensorflow-ps"
    return str(framework)


def peers_of(pattern: str, nodes: int, ranks_per_node: int) -> int:
    """Who exchanges gradients: every rank (ring, ps) or one executor per node (BigDL)."""
    return int(nodes) if pattern == BIGDL else int(nodes) * int(ranks_per_node)


MEASURED_COLUMNS = (
    "run_id", "framework", "setup", "pattern", "model", "dataset", "network", "nodes", "ranks_per_node",
    "world_size", "batch_per_rank", "step_s", "compute_s", "exposed_s", "sync_s", "gradient_bytes",
)  # fmt: skip


def pool_studies(own: pd.DataFrame, studies: Sequence[str], tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """This study's table (runs or iterations) with other studies' (``projection.pool_studies``):
    one calibration, validated on every study's held-out runs. A pooled row's ``run_id``
    gets its study's directory name as a prefix (``validation-quiet:torch/lenet/...``), so
    runs of the same cell in two studies stay two runs. A table without ``run_id`` is an
    error, not a silent merge."""
    if len(studies) != len(tables):
        raise ValueError(f"{len(studies)} pooled studies but {len(tables)} tables")
    frames = [own]
    for study, table in zip(studies, tables, strict=True):
        if "run_id" not in table.columns:
            raise ValueError(f"pooled study {study!r}: its table has no run_id column")
        label = Path(study.rstrip("/")).name or study
        frames.append(table.assign(run_id=label + ":" + table["run_id"].astype(str)))
    return pd.concat([f for f in frames if len(f)] or [own], ignore_index=True)


def runs_of(runs: pd.DataFrame, frameworks: Iterable[str]) -> pd.DataFrame:
    """The rows of ``runs`` of these frameworks (a pooled study's, for this study's)."""
    if "framework" not in runs:
        raise ValueError("a runs table without a framework column")
    return runs[runs["framework"].isin(set(frameworks))]


def measured_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok runs the model knows (set-up and model in the catalog), with set-up, pattern,
    gradient bytes and ``exposed_s`` (median ``step_s - compute_s``; ``comm_s`` if unsplit).

    Contended runs (``contended``: other work took the host's CPUs while they were timed,
    ``dlscale.host.contention``) take no part, in calibration or validation: their time is that
    work's too, which no term of the model stands for.
    """
    if runs.empty or "status" not in runs:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in MEASURED_COLUMNS})
    contended = runs["contended"] if "contended" in runs else pd.Series(False, index=runs.index)
    contended = contended.astype(object).where(contended.notna(), False).astype(bool)
    ok = runs[runs["status"].eq("ok") & runs["step_s"].notna() & ~contended].copy()
    versions = ok["versions"] if "versions" in ok else pd.Series(None, index=ok.index)
    ok["setup"] = [setup_of(fw, v) for fw, v in zip(ok["framework"], versions, strict=True)]
    ok = ok[ok["setup"].isin(list(SETUP_PATTERN)) & ok["model"].isin(list(PARAMETERS))].copy()
    ok["network"] = (
        (ok["network"] if "network" in ok else pd.Series(HOST, index=ok.index)).fillna(HOST).astype(str)
    )
    if "dataset" not in ok:
        ok["dataset"] = ok["model"].map(lambda m: catalog.MODELS[m].datasets[0])
    ok["pattern"] = ok["setup"].map(SETUP_PATTERN)
    for name in ("nodes", "ranks_per_node", "world_size", "batch_per_rank"):
        ok[name] = ok[name].astype("int64")
    ok["gradient_bytes"] = ok["model"].map(gradient_bytes).astype("float64")
    if "compute_s" not in ok:
        ok["compute_s"] = np.nan
    exposed = ok["exposed_comm_s"] if "exposed_comm_s" in ok else pd.Series(np.nan, index=ok.index)
    ok["exposed_s"] = exposed.where(exposed.notna(), ok.get("comm_s", np.nan))
    # the synchronisation alone where the runner times it skew-free (comm_s), else exposed
    sync = ok["comm_s"] if "comm_s" in ok else pd.Series(np.nan, index=ok.index)
    ok["sync_s"] = sync.where(sync.notna(), ok["exposed_s"])
    return ok[list(MEASURED_COLUMNS)].reset_index(drop=True)


def communicating(measured: pd.DataFrame) -> pd.Series:
    """Runs that synchronise: world > 1, or any world for ps and BigDL (they talk at 1 too)."""
    return measured["world_size"].gt(1) | measured["pattern"].isin([PS, BIGDL])


def compute_baselines(measured: pd.DataFrame) -> pd.DataFrame:
    """Per set-up, model and batch per rank: the median ``compute_s`` at the smallest world
    (any network: compute moves no gradient; a 1-rank ring run's whole step where unsplit)."""
    columns = [
        "setup",
        "model",
        "dataset",
        "batch_per_rank",
        "world_size",
        "ranks_per_node",
        "compute_s",
        "run_id",
    ]
    if measured.empty:
        return pd.DataFrame(columns=columns)
    frame = measured.copy()
    lone_ring = frame["pattern"].eq(RING) & frame["world_size"].eq(1)
    frame["compute"] = frame["compute_s"].where(frame["compute_s"].notna() | ~lone_ring, frame["step_s"])
    frame = frame[frame["compute"].notna()]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    keys = ["setup", "model", "batch_per_rank"]
    at = frame[frame["world_size"].eq(frame.groupby(keys)["world_size"].transform("min"))]
    table = at.groupby(keys, as_index=False).agg(
        dataset=("dataset", "first"),
        world_size=("world_size", "first"),
        ranks_per_node=("ranks_per_node", "min"),
        compute_s=("compute", "median"),
        run_id=("run_id", lambda ids: ";".join(sorted(ids))),
    )
    return table[columns]
