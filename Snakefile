"""dlscale: distributed deep-learning frameworks compared on CPU clusters.

Reproduces and extends Du et al., "Comparative Study of Distributed Deep Learning Tools on
Supercomputers" (ICA3PP 2018). Stages: environments -> data -> training runs -> tables,
figures and report. Run `snakemake --profile profiles/local` (or profiles/tianhe).
"""

import os

from dlscale.runners.bigdl import shared_cluster

# BigDL's `cluster: per_study` (dlscale.runners.bigdl.shared_cluster): where this study's
# Spark clusters live and which process owns them (a cluster stops once its owner is gone).
# Set once: the local executor runs jobs in this process's environment and directory, and
# a job that re-parses this file (a `run:` job's own snakemake) keeps this process's values;
# a job group's snakemake inside a SLURM allocation owns that allocation's (owner_env).
os.environ.update(
    shared_cluster.owner_env(os.environ, os.getpid(), os.path.abspath("results/spark"))
)

# The default study, unless the command line names one: a --configfile is a whole study
# whose missing keys take the schema's defaults, not this file's (a study for a cluster
# must not inherit, say, the laptop study's models_per_framework).
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


report: "report/workflow.rst"


# Small or network-bound steps are marked `localrule: True` where they are defined: they
# run where snakemake runs (a login node has PyPI; compute nodes often have no internet).
# Training goes to the batch system.


include: "rules/common.smk"
include: "rules/envs.smk"
include: "rules/caffe.smk"
include: "rules/bigdl.smk"
include: "rules/data.smk"
include: "rules/imagenet.smk"
include: "rules/train.smk"
include: "rules/tune.smk"
include: "rules/lr_tuning.smk"
include: "rules/commbench.smk"
include: "rules/analysis.smk"
include: "rules/site.smk"


# Every shared Spark cluster of the study stops with it (its supervisor would see the owner
# gone within a second anyway; this waits for the daemons' end).
onsuccess:
    shared_cluster.stop_all(os.environ[shared_cluster.ENV_CLUSTERS])


onerror:
    shared_cluster.stop_all(os.environ[shared_cluster.ENV_CLUSTERS])


rule all:
    default_target: True
    input:
        # Every run is a target itself, so a deleted or failed run is redone even though
        # the tables that summarise it are newer.
        run_events(),
        all_run_events,
        "results/runs.csv",
        "results/findings.csv",
        figure_files(),
        CAFFE_FIGURE_FILES,
        perfmodel_files(),
        replay_files(),
        tune_files(),
        lr_tuning_files(),
        PARITY_FILES,
        NODES_FILES,
        COMPARE_TARGETS,
    localrule: True
