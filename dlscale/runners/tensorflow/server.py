"""``python -m dlscale.runners.tensorflow.server``: a ps-mode worker or parameter server.

A TensorFlow server does nothing by itself: the chief places variables on the parameter
servers and runs the step functions on the workers over gRPC. A server never returns from
``join()``, so this process instead waits for the chief's done file (then exits 0, and
the launcher sees a clean run) or for its launcher to vanish (then exits 1, so that no
server outlives its run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from dlscale.runners.tensorflow import cluster as cluster_mod
from dlscale.runners.tensorflow import steps

POLL_S = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, choices=("worker", "ps"))
    parser.add_argument("--index", required=True, type=int)
    parser.add_argument("--work-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    cluster = json.loads(os.environ[cluster_mod.ENV_CLUSTER])
    cluster_mod.tf_config(cluster, args.job, args.index)  # fails early on a bad task
    parent = os.getppid()
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    import tensorflow as tf

    threads = steps.thread_settings()
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads["intra_op"], inter_op_parallelism_threads=threads["inter_op"]
    )
    tf.distribute.Server(
        tf.train.ClusterSpec(cluster), job_name=args.job, task_index=args.index, protocol="grpc",
        config=config, start=True,
    )  # fmt: skip
    # One write, newline included: the servers share the launcher's stdout, unbuffered
    # (PYTHONUNBUFFERED), where print's text and its newline are two writes that another
    # server's line can fall between.
    sys.stdout.write(f"[{args.job} {args.index}] pid {os.getpid()} serving {cluster[args.job][args.index]}\n")
    sys.stdout.flush()
    done = args.work_dir / cluster_mod.DONE_FILE
    while not done.exists():
        if os.getppid() != parent:
            print(f"[{args.job} {args.index}] launcher gone; leaving", file=sys.stderr, flush=True)
            os._exit(1)
        time.sleep(POLL_S)
    sys.stdout.flush()
    os._exit(0)  # a TensorFlow server cannot be stopped cleanly; nothing is left to save


if __name__ == "__main__":
    raise SystemExit(main())
