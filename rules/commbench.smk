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
#   executors   [int]      Spark executors of the BigDL jobs     (default [1, 2])
#   networks    [str]      host and/or emulated-<preset>         (default [host])
#   repeats     int        timed operations per cell             (default 5)
#   max_op_s    float      sizes slower than this on a network are skipped (default 2.0)
#   models      [str]      models whose Caffe per-blob pattern is timed (default [lenet])
#   algorithms  [str]      Open MPI all-reduce algorithms to force besides the default
#   timeout_s   int        per job                               (default 900)

# Settings and input functions: rules/helpers/commbench.smk (arguments: dlscale.study.jobs).


include: "helpers/commbench.smk"


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
    conda:
        commbench_conda_env
    # Timed: alone on the host (rules/common.smk: timed_threads).
    threads: timed_threads(1)
    resources:
        runtime=jobs.commbench_runtime(COMMBENCH),
    params:
        python=commbench_python,
        args=jobs.commbench_args(COMMBENCH),
    shell:
        "{params.python:q} -m dlscale.commbench.{wildcards.name} --network {wildcards.network}"
        " {params.args} --out {output:q} > {log:q} 2>&1"
