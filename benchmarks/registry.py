"""What each framework plugs into the benchmarks: one ``FrameworkBench`` per framework.

Each framework lives in its own venv, so an entry is a set of driver-side functions that
run the framework's work as subprocesses of its venv's python and return plain rows:

* ``training(job)`` -> rows ``{arm: runner|bare|peak, repeat, samples_per_s | peak_flops}``:
  the runner's single-rank training loop against a bare loop of the same model, batch and
  threads, plus the matmul peak, alternated in one process set-up (see torch_worker).
* ``allreduce(job)`` -> rows ``{transport, nbytes, seconds}``: the framework's gradient
  synchronisation of each size between two processes on loopback, done as its runner does.
* ``startup``: extra environment for a tiny study run through ``dlscale.launch`` (start-up
  cost is measured on the real launcher, the same for every framework).

Adding a framework is adding an entry to ``FRAMEWORKS`` (its owner knows how its runner
steps); a framework without an entry is reported as "not covered", never silently skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import bigdl_bench, framework_benches, torch_bench
from benchmarks.common import framework_python


@dataclass(frozen=True)
class TrainingJob:
    python: Path
    spec: dict[str, Any]
    data: Path
    repeats: int
    timeout_s: float


@dataclass(frozen=True)
class CommJob:
    python: Path
    sizes: list[int]
    inner: int
    timeout_s: float
    models: dict[int, str] = field(default_factory=dict)  # gradient bytes -> model


@dataclass(frozen=True)
class FrameworkBench:
    name: str
    training: Callable[[TrainingJob], list[dict[str, Any]]] | None = None
    allreduce: Callable[[CommJob], list[dict[str, Any]]] | None = None
    startup_env: dict[str, str] = field(default_factory=dict)
    comm_label: str = ""
    #: At most this many repeats per benchmark ("training", "comm", "startup"; absent: all
    #: asked). For frameworks whose every arm is a fresh JVM + Spark start (BigDL: about a
    #: minute a run on 2 cores), so that ``make bench`` stays inside its 20 minutes; their
    #: ratios pair the repeats they ran.
    max_repeats: dict[str, int] = field(default_factory=dict)

    def python(self) -> Path:
        return framework_python(self.name)

    def repeats(self, asked: int, benchmark: str) -> int:
        """How many of the ``asked`` repeats of ``benchmark`` this framework runs (at least 1)."""
        cap = self.max_repeats.get(benchmark)
        return asked if cap is None else max(1, min(asked, cap))


FRAMEWORKS: dict[str, FrameworkBench] = {
    "torch": FrameworkBench(
        "torch", training=torch_bench.training, allreduce=torch_bench.allreduce, comm_label="torch gloo"
    ),
    "tensorflow": FrameworkBench(
        "tensorflow",
        training=framework_benches.tf_training,
        allreduce=framework_benches.tf_allreduce,
        comm_label="TF MWMS ring (gRPC)",
    ),
    "caffe": FrameworkBench(
        "caffe",
        training=framework_benches.caffe_training,
        allreduce=framework_benches.caffe_allreduce,
        comm_label="Caffe MPI_Allreduce per blob",
    ),
    # BigDL: one process per arm (one SparkContext per Python process; the runner starts a
    # Spark cluster per run), so each arm costs a JVM start (~30-70 s): fewer repeats. Its
    # start-up figures come from the training runner arms (benchmarks.startup).
    "bigdl": FrameworkBench(
        "bigdl",
        training=bigdl_bench.training,
        allreduce=bigdl_bench.allreduce,
        comm_label="BigDL block-manager sync (step - compute, 2 nodes)",
        max_repeats={"training": 2, "comm": 1, "startup": 2},
    ),
}


def covered(frameworks: list[str]) -> tuple[list[FrameworkBench], list[str]]:
    """The registered entries among ``frameworks``, and the names that have none yet."""
    found = [FRAMEWORKS[fw] for fw in frameworks if fw in FRAMEWORKS]
    missing = [fw for fw in frameworks if fw not in FRAMEWORKS]
    return found, missing
