"""BigDL's CPU performance settings: from the run's options to JVM properties and environment.

BigDL reads its engine properties (``bigdl.engineType``, ``bigdl.mklNumThreads``,
``bigdl.multiModels``) once, when its ``Engine`` object initialises, from the system
properties of the JVM it runs in, and the bundled MKL / MKL-DNN read their variables
(``MKL_DEBUG_CPU_TYPE``, ``OMP_NUM_THREADS``, ``KMP_*``) from the process environment when
the native library loads. The driver builds the model and the executors compute it, so
both JVMs must carry both (``spark.driver.extraJavaOptions`` plus the driver's own
environment; ``spark.executor.extraJavaOptions`` plus ``spark.executorEnv.*``).

What each run got is not assumed: ``observed`` reads a JVM's command line and environment
back from ``/proc`` (the driver's, and each executor's in local mode), and the run keeps
that record beside its events (``bigdl-settings.json``).

Standard library only: ``settings`` is called by the launcher and the tuning stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.runspec import RunSpec

#: The MKL BigDL's tensors compute with (mklblas: every layer), bundled in bigdl-core 2.4.0's
#: jar; the first MKL_VERBOSE line of an executor names it and the code path it took.
BUNDLED_MKL = "Intel MKL 2019.0 Update 1 (libjmkl.so in bigdl-core)"
#: What BigDL's mkldnn engine computes with (bigdl-core's jar; seen in MKLDNN_VERBOSE /
#: MKL_VERBOSE output): MKL-DNN's own JIT kernels, and MKL's SGEMM for inner products.
BUNDLED_MKLDNN = (
    "MKL-DNN v0.19.0 (libmkldnn.so in bigdl-core), its gemm on Intel MKL 2019.0 Update 3 (libmklml_intel.so)"
)
#: The variables that print every MKL call / MKL-DNN primitive (names across releases).
VERBOSE_VARS = ("MKL_VERBOSE", "MKLDNN_VERBOSE", "DNNL_VERBOSE", "ONEDNN_VERBOSE")
#: Every variable these settings own: one a setting leaves unset is removed from the driver's
#: and the daemons' environment, so that "unset" is what the JVMs get whatever the shell had.
MANAGED_VARS = ("MKL_DEBUG_CPU_TYPE", "OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME", *VERBOSE_VARS)


#: Models BigDL's mkldnn engine cannot run -> why. Its graph conversion wraps every layer it
#: has no primitive for in a ``BlasWrapper``, which needs the layer's output-shape inference;
#: ``nn.Sigmoid`` has none, so the AutoEncoder's first forward pass on an executor fails with
#: ``InvalidOperationException: Haven't been implemented yet. Do not use it with Keras Layer``
#: (BlasWrapper.inferOutputFormats -> InferShape.computeOutputShape).
MKLDNN_REFUSES: dict[str, str] = {
    "autoencoder": "its nn.Sigmoid layers have no output-shape inference, which mkldnn's BlasWrapper needs",
}


class BigDLSettingsError(ValueError):
    """A combination of BigDL options that BigDL cannot run; the message names the options."""


@dataclass(frozen=True)
class EngineSettings:
    """The effective engine settings of one run (every executor alike)."""

    engine: str
    cores_per_executor: int
    multi_models: bool
    mkl_num_threads: int
    properties: dict[str, str]
    env: dict[str, str]

    @property
    def replicas_per_executor(self) -> int:
        """Model replicas an executor trains: one per core (multi-model) or one."""
        return self.cores_per_executor if self.multi_models else 1


def engine_settings(spec: RunSpec) -> EngineSettings:
    """The run's settings from its options (defaults where the spec has none).

    Raises BigDLSettingsError for per_executor with mklblas: BigDL's mklblas engine always
    trains one replica per core (``Engine.isMultiModels``), so the setting could not be had;
    and for mkldnn with a model it cannot run (``MKLDNN_REFUSES``), before any JVM starts
    instead of a stack trace from the executors.
    """
    opts = spec.options
    engine = opts.get("engine") or "mklblas"
    if engine == "mkldnn" and spec.model in MKLDNN_REFUSES:
        raise BigDLSettingsError(
            f"bigdl.engine=mkldnn cannot run the {spec.model}: {MKLDNN_REFUSES[spec.model]}"
            " (use bigdl.engine=mklblas for it)"
        )
    cores = spec.ranks_per_node * spec.threads_per_rank
    split = opts.get("batch_split") or ("per_core" if engine == "mklblas" else "per_executor")
    if engine == "mklblas" and split == "per_executor" and cores > 1:
        raise BigDLSettingsError(
            "bigdl.batch_split=per_executor needs bigdl.engine=mkldnn: the mklblas engine always"
            f" trains one model replica per executor core ({cores} here)"
        )
    multi = split == "per_core"
    threads = opts.get("mkl_num_threads") or (1 if multi else cores)
    properties = {
        "bigdl.engineType": engine,
        "bigdl.mklNumThreads": str(threads),
        "bigdl.multiModels": "true" if multi else "false",
    }
    env = {"OMP_NUM_THREADS": str(threads)}
    if opts.get("mkl_debug_cpu_type") is not None:
        env["MKL_DEBUG_CPU_TYPE"] = str(opts["mkl_debug_cpu_type"])
    if opts.get("kmp_affinity"):
        env["KMP_AFFINITY"] = str(opts["kmp_affinity"])
    if opts.get("kmp_blocktime") is not None:
        env["KMP_BLOCKTIME"] = str(opts["kmp_blocktime"])
    if opts.get("verbose"):
        env.update({name: "1" for name in VERBOSE_VARS})
    return EngineSettings(engine, cores, multi, threads, properties, env)


def java_options(settings: EngineSettings) -> list[str]:
    """The ``-D`` options that carry the engine properties into a JVM."""
    return [f"-D{key}={value}" for key, value in sorted(settings.properties.items())]


def describe(spec: RunSpec) -> dict[str, Any]:
    """What the run computes with, for run_start: engine, libraries, threads, batch split.

    ``core_number`` is the executor's cores: outside ``bigdl.localMode`` BigDL takes its core
    number from ``spark.executor.cores`` (the property ``bigdl.coreNumber`` is ignored).
    """
    eng = engine_settings(spec)
    per_executor = spec.global_batch // max(1, spec.nodes)
    return {
        "engine": eng.engine,
        "blas": BUNDLED_MKL,
        **({"mkldnn": BUNDLED_MKLDNN} if eng.engine == "mkldnn" else {}),
        "core_number": eng.cores_per_executor,
        "mkl_num_threads": eng.mkl_num_threads,
        "batch_split": "per_core" if eng.multi_models else "per_executor",
        "replicas_per_executor": eng.replicas_per_executor,
        "samples_per_replica": per_executor // eng.replicas_per_executor,
        "java_properties": dict(eng.properties),
        "env": dict(eng.env),
    }


def observed(pid: int, settings: EngineSettings) -> dict[str, Any]:
    """What a running JVM actually got: its ``-Dbigdl.*`` options and the settings' variables.

    Read from ``/proc/<pid>/cmdline`` and ``/proc/<pid>/environ``; ``None`` for a variable
    the process does not have. Raises OSError if the process is gone.
    """
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    environ = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
        if "=" in item
    )
    props: dict[str, str] = {}
    for arg in argv:
        if arg.startswith("-Dbigdl."):
            key, _, value = arg[2:].partition("=")
            props[key] = value  # the last one wins, as in the JVM
    names = sorted({*settings.env, *MANAGED_VARS})
    return {"pid": pid, "java_properties": props, "env": {name: environ.get(name) for name in names}}


def mismatches(seen: dict[str, Any], settings: EngineSettings) -> list[str]:
    """Each setting a JVM does not carry as asked (empty when all arrived)."""
    wrong = [
        f"-D{key}={seen['java_properties'].get(key)!r} (expected {value!r})"
        for key, value in settings.properties.items()
        if seen["java_properties"].get(key) != value
    ]
    wrong += [
        f"{name}={seen['env'].get(name)!r} (expected {settings.env.get(name)!r})"
        for name in sorted({*settings.env, *MANAGED_VARS})
        if seen["env"].get(name) != settings.env.get(name)
    ]
    return wrong


#: Java exceptions that only wrap another (BigDL's UnKnownException around MKL-DNN's errors,
#: a thread pool's ExecutionException): the reason is the exception they carry.
WRAPPERS = ("UnKnownException", "ExecutionException", "SparkException", "Py4JJavaError")
_CAUSED_BY = re.compile(r"^Caused by: ([\w.$]+(?:Exception|Error)): ?(.*)$", re.M)


def innermost_cause(text: str) -> str | None:
    """The deepest ``Caused by:`` of a Java stack trace that is not a mere wrapper, e.g.
    MKL-DNN refusing a layer ("InvalidOperationException: Haven't been implemented yet"),
    which BigDL reports as ``UnKnownException: IRGraph[...]``; None when there is none."""
    causes = [
        f"{name.rsplit('.', 1)[-1]}: {message.strip()}".rstrip(": ")
        for name, message in _CAUSED_BY.findall(text)
        if not name.endswith(WRAPPERS)
    ]
    return causes[-1] if causes else None
