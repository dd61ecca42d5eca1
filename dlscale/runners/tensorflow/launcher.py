"""How a TensorFlow run starts, in either distributed mode (no TensorFlow import).

- ``mwms``: one process per rank, as torch; every rank reports its own iterations.
- ``ps``: the way TensorFlow ran distributed in 2018: a chief (rank 0, the coordinator
  that runs the loop and reports the GLOBAL samples of each step, so ``reporting_ranks`` is
  1), one worker server per rank of the study's world (n x p workers), and ``num_ps``
  parameter servers. The servers are ``dlscale.runners.tensorflow.server`` processes; they
  leave when the chief says it is done.
Locally, ports are chosen here, free at planning time, and every process gets the same
cluster spec in ``DLSCALE_TF_CLUSTER``; nothing assumes that ports beyond the launcher's are
free. Inside a SLURM allocation ps mode is one srun step of node agents (``slurm_ps``) that
derive the spec from the placement, as MWMS ranks do.
"""

from __future__ import annotations

import json
from typing import Any

from dlscale.base.sysutil import free_ports
from dlscale.host import placement
from dlscale.runners.plan import LaunchContext, Plan, Process, per_rank_plan, slurm_env, srun_argv
from dlscale.runners.tensorflow import cluster as cluster_mod
from dlscale.runners.tensorflow import settings as tf_settings
from dlscale.runspec import RunSpec

RUNNER = "dlscale.runners.tensorflow"
SERVER = "dlscale.runners.tensorflow.server"
AGENT = "dlscale.runners.tensorflow.slurm_ps"


def listens_on_every_interface(spec: RunSpec) -> str | None:
    """TensorFlow's gRPC servers (every rank of a multi-rank MWMS run; every task in ps mode)
    listen on every interface whatever host the cluster spec names, and run any TensorFlow
    op for whoever connects: a local run needs a private network namespace (dlscale.launch)."""
    if spec.options["strategy"] == "ps" or spec.world_size > 1:
        return "TensorFlow's gRPC servers listen on every interface (and run any TensorFlow op for whoever connects)"
    return None


def tf_env(ctx: LaunchContext) -> dict[str, str]:
    """TensorFlow's settings for every process of the run (explicit, recorded in versions)."""
    options = ctx.spec.options
    return {
        "KERAS_HOME": str(ctx.work_dir / "keras"),  # keep ~/.keras out of the home directory
        "TF_CPP_MIN_LOG_LEVEL": "1",
        "DLSCALE_TF_STRATEGY": options["strategy"],
        # oneDNN on/off and the pool sizes (intra: absent or null = the rank's threads).
        **tf_settings.env(ctx.spec),
    }


def settings(spec: RunSpec) -> dict[str, Any]:
    """The run's effective CPU settings (recorded in run_start by dlscale.launch)."""
    return tf_settings.describe(spec)


def plan(ctx: LaunchContext) -> Plan:
    if ctx.spec.options["strategy"] == "ps":
        return ps_plan(ctx)
    base = per_rank_plan(ctx, RUNNER)
    world = ctx.spec.world_size
    extra = tf_env(ctx)
    if world > 1 and ctx.mode == "local":
        hosts = [ctx.address_of(rank) for rank in range(world)]
        extra[cluster_mod.ENV_CLUSTER] = json.dumps(cluster_mod.mwms_cluster(hosts, free_ports(world)))
    for process in base.processes:
        process.env.update(extra)
    return base


def ps_plan(ctx: LaunchContext) -> Plan:
    """Chief + workers + parameter servers: on this host's emulated nodes, or in a SLURM
    allocation (``slurm_ps_plan``)."""
    if ctx.mode == "slurm":
        return slurm_ps_plan(ctx)
    spec = ctx.spec
    workers = spec.world_size
    num_ps = spec.options["num_ps"]
    # On an emulated interconnect each task sits on a node: the chief on node 0, worker i
    # on rank i's node, parameter server j on node j mod n (spread, as on a cluster).
    nodes = spec.nodes
    task_nodes = [0, *(ctx.node_of(rank) for rank in range(workers)), *(j % nodes for j in range(num_ps))]
    hosts = [ctx.node_addresses[node % len(ctx.node_addresses)] for node in task_nodes]
    cluster = cluster_mod.ps_cluster(workers, num_ps, free_ports(1 + workers + num_ps), hosts)
    common = {**ctx.base_env(), **tf_env(ctx), cluster_mod.ENV_CLUSTER: json.dumps(cluster)}
    chief_env = {
        **common,
        **placement.local_rank_env(0, spec.nodes, spec.ranks_per_node, ctx.master_port),
    }
    processes = [Process("chief", ctx.runner_argv(RUNNER), chief_env, rank=0)]
    task = 0
    for job, count in (("worker", workers), ("ps", num_ps)):
        for index in range(count):
            task += 1
            argv = [
                ctx.python, "-m", SERVER, "--job", job, "--index", str(index),
                "--work-dir", str(ctx.work_dir),
            ]  # fmt: skip
            # rank 0: the chief's part file tells a server's story too (where the run was
            # when a server died; a server that dies after the chief's clean end is moot).
            processes.append(Process(f"{job} {index}", argv, dict(common), rank=0, node=task_nodes[task]))
    return Plan(processes, reporting_ranks=1)


def slurm_ps_plan(ctx: LaunchContext) -> Plan:
    """ps mode inside a SLURM allocation: one srun step, one task per rank (n x p).

    Each task runs the node agent (``slurm_ps``), which derives the cluster spec from the
    step's placement and starts the task's share: worker k on rank k, parameter server j
    on node j mod n (by its local rank 0, as the local plan spreads them), and on rank 0
    the chief, whose part file holds the run's iterations (global samples: 1 reporting
    rank). The ports cannot be chosen here: other nodes' ports cannot be probed.
    """
    spec = ctx.spec
    num_ps = spec.options["num_ps"]
    argv = srun_argv(ctx, *ctx.runner_argv(AGENT))
    env = {**slurm_env(ctx), **tf_env(ctx)}
    label = f"srun ({spec.world_size} tasks: chief, {spec.world_size} worker(s), {num_ps} ps)"
    return Plan([Process(label, argv, env, None)], reporting_ranks=1)
