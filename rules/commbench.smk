# Communication micro-benchmarks (dlscale.commbench): each framework's library swept over
# message sizes and world sizes, on the host and on emulated networks, for the scaling
# model (rule perfmodel). One job per framework (and the raw TCP reference) and network,
# in the framework's own venv; every job is timed, so it takes every core as its threads
# (rules/common.smk: timed_threads), as a training run does: nothing else runs beside it.
#
# Settings: the study's `commbench` object (read with defaults until the schema has it):
#   enabled     bool       run them at all (default false: the default study turns them on)
#   sizes       [int]      bytes per rank                       (default 1 KiB, 64 KiB, 4 MiB)
#   worlds      [int]      ranks of the collectives                 (default [2, 4])
#   tensorflow_worlds [int] TensorFlow's ring worlds; its ps runs the largest number of
#                          workers, 1..max at once           (default [2]: TF starts slowly)
#   executors   [int]      Spark executors of the BigDL jobs     (default [1, 2, 4])
#   networks    [str]      host and/or emulated-<preset>         (default [host])
#   repeats     int        timed operations per cell             (default 5)
#   max_op_s    float      sizes slower than this on a network are skipped (default 2.0)
#   models      [str]      models whose Caffe per-blob pattern is timed (default [lenet])
#   algorithms  [str]      Open MPI all-reduce algorithms to force besides the default
#   timeout_s   int        per job                               (default 900)

from dlscale import commbench as dlcommbench
from dlscale import networks as dlnetworks

COMMBENCH = {
    "enabled": False,
    "sizes": list(dlcommbench.DEFAULT_SIZES),
    "worlds": list(dlcommbench.DEFAULT_WORLDS),
    "tensorflow_worlds": [2],
    "executors": list(dlcommbench.DEFAULT_EXECUTORS),
    "networks": [dlnetworks.HOST],
    "repeats": dlcommbench.DEFAULT_REPEATS,
    "max_op_s": dlcommbench.DEFAULT_MAX_OP_S,
    "models": ["lenet"],
    "algorithms": [],
    "timeout_s": 900,
    **STUDY.get("commbench", {}),
}
#: The scaling model's tables beyond dlscale.outputs' list, and its figures (its own
#: module's list) with the report caption of each.
PERFMODEL_EXTRA_TABLES = (
    "efficiency50",
    "commbench",
    "commbench_fits",
    "commbench_checks",
    "latency_sensitivity",
)
PERFMODEL_ALL_FIGURES = tuple(
    dict.fromkeys([*PERFMODEL_FIGURES, "latency_sensitivity", "commbench"])
)
PERFMODEL_FIGURE_CAPTIONS = {
    "projection": "projection.rst",
    "validation": "validation.rst",
    "latency_sensitivity": "projection.rst",
    "commbench": "calibration.rst",
}
#: The study's frameworks in the catalog's order, and the raw TCP reference.
COMMBENCH_NAMES = [
    name for name in catalog.FRAMEWORK_NAMES if name in STUDY["frameworks"]
] + [dlcommbench.TCP]


def commbench_files():
    """Every micro-benchmark table of the study (none unless ``commbench.enabled``)."""
    if not COMMBENCH["enabled"]:
        return []
    return [
        f"results/perfmodel/commbench/{name}-{network}.csv"
        for name in COMMBENCH_NAMES
        for network in COMMBENCH["networks"]
    ]


def commbench_input(wildcards):
    """A framework's venv (and Java for Spark); the TCP reference needs only this python."""
    if wildcards.name not in catalog.FRAMEWORK_NAMES:
        return {}
    framework = catalog.framework(wildcards.name)
    extra = {
        name: EXTRA_INPUTS[name] for name in framework.extra_inputs if name == "java"
    }
    return {"env": env_marker(framework.name), **extra}


def commbench_python(wildcards):
    if wildcards.name in catalog.FRAMEWORK_NAMES:
        return env_python(wildcards.name)
    return "python" if USE_CONDA else sys.executable


def commbench_args(wildcards):
    """The sweep's command-line arguments (the same for every framework; each uses its own)."""
    settings = COMMBENCH
    args = [
        "--sizes",
        *map(str, settings["sizes"]),
        "--worlds",
        *map(str, settings["worlds"]),
        "--tf-worlds",
        *map(str, settings["tensorflow_worlds"]),
        "--executors",
        *map(str, settings["executors"]),
        "--repeats",
        str(settings["repeats"]),
        "--max-op-s",
        str(settings["max_op_s"]),
        "--timeout-s",
        str(settings["timeout_s"]),
    ]
    if settings["models"]:
        args += ["--models", *settings["models"]]
    args += ["--algorithms", "default", *map(str, settings["algorithms"])]
    return " ".join(shlex.quote(a) for a in args)


rule commbench:
    """One framework's communication micro-benchmarks on one network (dlscale.commbench)."""
    input:
        unpack(commbench_input),
    output:
        "results/perfmodel/commbench/{name}-{network}.csv",
    log:
        "results/logs/commbench/{name}-{network}.log",
    wildcard_constraints:
        name="|".join(COMMBENCH_NAMES),
        network="|".join(dlnetworks.network_choices()),
    # Timed: alone on the host (rules/common.smk: timed_threads).
    threads: timed_threads(1)
    resources:
        runtime=int(COMMBENCH["timeout_s"]) // 60 + 5,
    params:
        python=commbench_python,
        args=commbench_args,
    shell:
        "{params.python:q} -m dlscale.commbench.{wildcards.name} --network {wildcards.network}"
        " {params.args} --out {output:q} > {log:q} 2>&1"
