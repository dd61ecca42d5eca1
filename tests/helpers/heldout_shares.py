"""The check shared by the runners' sharded-evaluation tests (torch, Caffe, JAX): a metric
from every rank's share of the held-out set, summed, is the whole set's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

#: The start of a test's script in a framework venv: argv = specs (JSON), shards, work folder;
#: ``contexts()`` yields each spec with a lone rank's RunContext writing under the folder.
SCRIPT_HEAD = """
import json, sys
from pathlib import Path
from dlscale.events import PartWriter
from dlscale.host.placement import Placement
from dlscale.runners.common import RunContext
from dlscale.runspec import RunSpec

data, work = Path(sys.argv[2]), Path(sys.argv[3])
where = Placement(0, 1, 0, 0, 1, "host", "127.0.0.1", 1, "local")


def contexts():
    for spec in map(RunSpec.from_dict, json.loads(sys.argv[1])):
        yield spec, RunContext(spec=spec, placement=where, data_dir=data, writer=PartWriter(work / "rank0.jsonl"))
"""


def run_and_check(python: Path, script: str, specs: list[dict[str, Any]], shards: Path, work: Path) -> None:
    """Run ``script`` (it prints model -> {"whole", 2, 3} -> metric) in ``python``; check it."""
    proc = subprocess.run(
        [str(python), "-c", script, json.dumps(specs), str(shards), str(work)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_shares(json.loads(proc.stdout.splitlines()[-1]))


def check_shares(out: dict[str, Any]) -> None:
    """Each model's metric from the shares summed is the whole set's: top-1 the same count,
    MSE within float32 inference rounding (3 shares batch the set differently: 1e-10
    relative measured in Caffe). ``out``: model -> {"whole", "2", "3"} -> {metric: [value,
    samples]}, as the tests' subprocesses print it."""
    assert set(out) == {"lenet", "autoencoder"}
    for model, found in out.items():
        [(metric, (value, samples))] = found["whole"].items()
        assert samples == 10_000 and metric == ("mse" if model == "autoencoder" else "top1")
        for world in ("2", "3"):
            [(other, (sharded, counted))] = found[world].items()
            assert (other, counted) == (metric, samples)
            if metric == "top1":
                assert sharded == value, (model, world)  # whole counts: exactly the same number
            else:
                assert sharded == pytest.approx(value, rel=1e-6), (model, world)
