"""repeats: auto through the real workflow: each cell's checks add repeats up to the cap.

With fewer than 6 repeats there is no 95% interval of the median to judge, so a cell
always asks for another until it has 6 or reaches the cap (dlscale.analysis.cells
.needs_more_repeats): min 2 and cap 3 must give every cell exactly 3 runs, planned and
run by one invocation.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from helpers.paths import ENVS_DIR
from helpers.workflow import RUNS_TABLE, planned_jobs, snakemake

pytestmark = pytest.mark.workflow

STUDY = {
    "frameworks": ["torch"],
    "models": ["lenet"],
    "nodes": [1, 2],
    "iterations": {"lenet": 6},
    "warmup": 1,
    "repeats": "auto",
    "repeats_auto": {"min": 2, "cap": 3, "target_rel_halfwidth": 0.05},
    "envs_dir": str(ENVS_DIR),
}


def test_auto_repeats_add_runs_until_the_cap(tmp_path, torch_py):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(STUDY))
    dry = snakemake(tmp_path, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert planned_jobs(dry.stdout + dry.stderr)["train"] == 4  # both cells' first 2 repeats

    proc = snakemake(tmp_path, RUNS_TABLE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = pd.read_csv(tmp_path / "results" / "runs.csv")
    assert sorted(runs["run_id"]) == sorted(f"torch/lenet/n{n}x1/b64/r{r}" for n in (1, 2) for r in range(3))
    assert (runs["status"] == "ok").all()
    for nodes in (1, 2):
        cell = tmp_path / "results" / "repeats" / "torch" / "lenet" / f"n{nodes}x1" / "b64"
        after2 = json.loads((cell / "after2.json").read_text())
        after3 = json.loads((cell / "after3.json").read_text())
        assert after2["more"] is True and len(after2["throughputs"]) == 2
        assert after3["more"] is False and len(after3["throughputs"]) == 3  # the cap
    assert "Nothing to be done" in snakemake(tmp_path, RUNS_TABLE, "--dry-run").stdout
