"""TensorFlow's two synchronisation paths: the collective ring all-reduce and parameter-server pull + push.

``python -m dlscale.commbench.tensorflow --network host --worlds 2 4 --sizes ... --out FILE``
(in the tensorflow venv). Rows:

* ``tf-ring`` / ``allreduce``: MultiWorkerMirroredStrategy with
  ``CommunicationImplementation.RING`` (as the mwms runner), one worker per node; per
  size a tf.function all-reduces one flat float32 tensor, after a one-float all-reduce
  as barrier; worker 0 reports. World 1 is skipped (nothing to reduce).
* ``tf-ps`` / ``pushpull``: ParameterServerStrategy (as the ps runner): a chief on node
  0, ``world`` workers (worker ``i`` on node ``i``), one parameter server on node 0
  holding one variable of ``nbytes``. One operation is ``k`` closures scheduled at once
  and joined (``k = 1 .. world``: idle workers take one each; the row's ``world`` is
  ``k``), each reading the variable from the server (pull) and adding a same-sized
  tensor back (push): every active worker moves ``nbytes`` each way through the one
  server. One cluster of the most workers serves every ``k`` (TensorFlow's start-up is
  the expensive part). ``--tf-worlds`` (default ``--worlds``) sizes both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dlscale.commbench import common
from dlscale.runners.tensorflow import steps

MODULE = "dlscale.commbench.tensorflow"
SERVER = "dlscale.runners.tensorflow.server"
ENV_CLUSTER = "DLSCALE_TF_CLUSTER"  # dlscale.runners.tensorflow.cluster.ENV_CLUSTER
DONE_FILE = "tf-chief.done"  # dlscale.runners.tensorflow.cluster.DONE_FILE


def _tf() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    return tf


def ring_rank(args: argparse.Namespace) -> None:
    cluster = json.loads(os.environ[ENV_CLUSTER])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": args.rank}})
    tf = _tf()
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=args.timeout_s,
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    barrier_fn = steps.sum_all_reduce(tf, strategy, tf.TensorSpec([], tf.float32))
    zero = tf.constant(0.0)
    barrier_fn(zero)
    for nbytes in args.sizes:
        n = max(1, nbytes // 4)
        reduce_fn = steps.sum_all_reduce(tf, strategy, tf.TensorSpec([n], tf.float32))
        tensor = tf.ones([n], tf.float32)
        reduce_fn(tensor)  # warm-up: tracing, the collective's instance set-up
        for repeat in range(args.repeats):
            seconds = common.timed(lambda t=tensor, f=reduce_fn: f(t), lambda: barrier_fn(zero))
            if args.rank == 0:
                common.emit(
                    {"library": "tf-ring", "op": "allreduce", "world": args.world, "nbytes": n * 4,
                     "repeat": repeat, "seconds": seconds}
                )  # fmt: skip
    barrier_fn(zero)  # nobody leaves while a peer still talks to it


def _pushpull_fn(tf: Any, variable: Any) -> Any:
    """One worker's pull of ``variable`` from its server and push of a same-sized update."""

    @tf.function
    def pushpull(zero: Any) -> Any:
        pulled = variable.read_value()  # server -> worker
        variable.assign_add(pulled * zero)  # worker -> server, same size
        return zero

    return pushpull


def ps_chief(args: argparse.Namespace) -> None:
    cluster = json.loads(os.environ[ENV_CLUSTER])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
    work_dir = Path(os.environ["DLSCALE_CB_WORK_DIR"])
    tf = _tf()
    try:
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
        )
        strategy = tf.distribute.ParameterServerStrategy(resolver)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        workers = len(cluster["worker"])
        for nbytes in args.sizes:
            n = max(1, nbytes // 4)
            with strategy.scope():
                variable = tf.Variable(tf.zeros([n], tf.float32))

            pushpull = _pushpull_fn(tf, variable)

            def one_round(active: int, fn: Any = pushpull) -> None:
                for _ in range(active):  # idle workers each take one closure
                    coordinator.schedule(fn, args=(tf.constant(0.0),))
                coordinator.join()

            one_round(workers)  # warm-up: tracing, connections
            for active in range(1, workers + 1):
                for repeat in range(args.repeats):
                    seconds = common.timed(lambda active=active: one_round(active), lambda: None)
                    common.emit(
                        {"library": "tf-ps", "op": "pushpull", "world": active, "nbytes": n * 4,
                         "repeat": repeat, "seconds": seconds}
                    )  # fmt: skip
            del variable
    finally:
        (work_dir / DONE_FILE).write_text("done\n")
    sys.stdout.flush()
    os._exit(0)  # a ParameterServerStrategy chief does not shut down cleanly


def rank_main(args: argparse.Namespace) -> None:
    if args.role == "ps-chief":
        ps_chief(args)
    else:
        ring_rank(args)


def drive(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    sizes = common.sizes_for(args.sizes, args.network, args.max_op_s, 2.0)
    for world in [w for w in (args.tf_worlds or args.worlds) if w > 1]:
        with common.network(world, args.network, args.latency_us) as net:
            hosts = [f"{common.address(net, k)}:{common.BASE_PORT + k}" for k in range(world)]
            env = common.rank_env(net, {ENV_CLUSTER: json.dumps({"worker": hosts})})
            argvs = [
                [
                    *common.on_node(net, k),
                    *common.rank_argv(MODULE, args, k, world, hosts[0], common.interface(net), sizes),
                ]
                for k in range(world)
            ]
            print(f"[commbench] tf-ring world {world} on {args.network}", file=sys.stderr, flush=True)
            started = time.time()
            rows += common.run_processes(argvs, env, args.timeout_s)
            print(f"[commbench]   {time.time() - started:.1f} s", file=sys.stderr, flush=True)
    # the ps bottleneck: one server's link carries every worker's pull (and push); one
    # cluster of the most workers, and rounds of 1, 2, ... of them at once
    workers = max(args.tf_worlds or args.worlds)
    ps_sizes = common.sizes_for(args.sizes, args.network, args.max_op_s, 2.0 * workers)
    with (
        common.network(workers, args.network, args.latency_us) as net,
        tempfile.TemporaryDirectory(prefix="cb-tfps-") as work,
    ):
        nodes = [0, *range(workers), 0]  # chief, workers, one ps
        hosts = [f"{common.address(net, node)}:{common.BASE_PORT + 100 + i}" for i, node in enumerate(nodes)]
        cluster = {"chief": hosts[:1], "worker": hosts[1 : 1 + workers], "ps": hosts[1 + workers :]}
        env = common.rank_env(net, {ENV_CLUSTER: json.dumps(cluster), "DLSCALE_CB_WORK_DIR": work})
        servers = [
            [*common.on_node(net, nodes[1 + i]), sys.executable, "-m", SERVER, "--job", job, "--index", str(index),
             "--work-dir", work]
            for i, (job, index) in enumerate([*(("worker", w) for w in range(workers)), ("ps", 0)])
        ]  # fmt: skip
        chief = [
            *common.on_node(net, 0),
            *common.rank_argv(
                MODULE, args, 0, workers, hosts[0], common.interface(net), ps_sizes, role="ps-chief"
            ),
        ]
        print(f"[commbench] tf-ps {workers} workers on {args.network}", file=sys.stderr, flush=True)
        started = time.time()
        rows += common.run_processes([chief], env, args.timeout_s, background=servers)
        print(f"[commbench]   {time.time() - started:.1f} s", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    return common.main(
        __doc__.splitlines()[0], rank_main, drive, {"framework": "tensorflow", "library": "tf-ring"}, argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
