"""Communication micro-benchmarks: what each framework's library costs per message and per byte.

The scaling model (``dlscale.perfmodel``) needs each library's latency (alpha), bandwidth
(beta) and fixed costs; training runs at one message size cannot separate them. These
benchmarks sweep message sizes and world sizes, on this host's loopback and on the
emulated interconnect (``dlscale.host.netns``), with the libraries the frameworks really use:

=============  ==========================================  ===============================
module         library and operation                        runs in
=============  ==========================================  ===============================
``torch``      gloo ``all_reduce`` of one flat float32      the torch venv
               tensor (what the torch runner does)
``tensorflow`` MultiWorkerMirroredStrategy's collective     the tensorflow venv
               all-reduce (``CommunicationImplementation.
               RING``); ParameterServerStrategy's pull +
               push of one variable by every worker
``caffe``      Open MPI ``MPI_Allreduce`` (mpi4py) of one   the caffe venv (mpi4py against
               flat buffer, and Caffe-MPI's pattern: one     Debian's Open MPI)
               Allreduce per parameter blob of a model
``bigdl``      Spark: a job of one task per executor        the bigdl venv (pyspark)
               (BigDL's per-iteration round trip) against
               the number of executors; a block exchange
               (shuffle) of S bytes per executor
``jax``        a ``psum`` of one flat float32 array in a    the jax venv
               jitted ``shard_map`` over gloo (the JAX
               runner's all-reduce, its barrier before)
``tcp``        a plain TCP ping-pong: the network itself,   any venv (standard library)
               the reference
=============  ==========================================  ===============================

One module per framework, named after it (``dlscale.catalog`` is the list of frameworks;
``module_of`` maps a name to its module, ``has_module`` says whether a framework has one:
a framework without one is calibrated on its host runs instead;
the library each set-up's rows name is the catalog's, ``Framework.libraries``).
Each module is a driver and its ranks in one: ``python -m dlscale.commbench.<name>
--network host --worlds 2 4 --sizes ... --out FILE.csv`` makes the namespaces, starts the
ranks (the same module with ``--rank``), and writes one CSV row per timed operation
(``RAW_COLUMNS``). Timed operations follow a barrier, so a time is the operation, not a
late peer; one warm-up operation per size and world is not recorded. The benchmarks
(``benchmarks.comm_efficiency``, ``make bench``) run these same modules at the models'
gradient sizes, so the two report one set of numbers.

This package's ``__init__`` is standard library only: the rules import it at DAG time.
"""

from __future__ import annotations

import importlib.util

from dlscale import catalog

#: One row per timed operation.
RAW_COLUMNS: tuple[str, ...] = (
    "framework",  # the venv that ran it (catalog name) or "tcp"
    "library",  # gloo, tf-ring, tf-ps, mpi, spark, tcp
    "op",  # allreduce, allreduce-blobs, pushpull, job, shuffle, pingpong
    "network",  # host or emulated-<preset>
    "world",  # ranks (workers for tf-ps, executors for spark)
    "nbytes",  # bytes per rank (the whole gradient for allreduce-blobs)
    "parts",  # messages the op is made of (blobs; 1 otherwise)
    "model",  # the model whose blob list an allreduce-blobs row used ("" otherwise)
    "algorithm",  # the library's algorithm when forced (Open MPI), else "default"
    "repeat",  # index of the timed operation within its cell
    "seconds",  # wall time of the operation on rank 0 (driver for spark)
    "host_cores",  # cores this host gave the benchmark (the contention factor's divisor)
    "latency_us",  # per-hop delay added on the emulated network (dlscale.commbench.latency)
)

#: Reference benchmark that is not a framework: the raw network.
TCP = "tcp"

#: The communication library of each set-up (``dlscale.catalog.SETUP_LIBRARIES``, keyed as
#: ``SETUP_PATTERNS``); tests/runners/test_commbench.py checks every module's rows name it.
LIBRARIES: dict[str, str] = dict(catalog.SETUP_LIBRARIES)

#: The default sweep: small enough for the default study (~90 s on 2 cores in all).
DEFAULT_SIZES: tuple[int, ...] = (1 << 10, 1 << 16, 1 << 22)
DEFAULT_WORLDS: tuple[int, ...] = (2, 4)
DEFAULT_EXECUTORS: tuple[int, ...] = (1, 2)
DEFAULT_REPEATS = 5
#: A size is skipped on a network where one operation would take longer than this.
DEFAULT_MAX_OP_S = 2.0


def module_of(framework: str) -> str:
    """The benchmark module of a framework (or ``tcp``): ``dlscale.commbench.<name>``."""
    return f"{__name__}.{framework}"


def has_module(framework: str) -> bool:
    """Whether a framework has its benchmark module. Optional: a framework without one is
    calibrated on its host runs (the calibration table's ``source`` says so), so a new
    catalog entry needs none."""
    return importlib.util.find_spec(module_of(framework)) is not None


def log_sizes(low: int, high: int, per_octave: float = 0.5) -> list[int]:
    """Log-spaced sizes from ``low`` to ``high`` bytes (``per_octave`` points per doubling)."""
    if low < 4 or high < low:
        raise ValueError(f"sizes need 4 <= low <= high, got {low}, {high}")
    sizes, value = [], float(low)
    while value <= high * 1.0001:
        sizes.append(int(round(value / 4)) * 4)
        value *= 2 ** (1 / per_octave)
    return sorted(set(sizes))
