"""JAX's all-reduce over gloo (a ``psum`` in a jitted ``shard_map``) per size: the JAX runner's path.

``python -m dlscale.commbench.jax --network host --worlds 2 4 --sizes ... --out FILE`` (in
the jax venv). Each rank joins as the runner's ranks do (``dlscale.runners.jax.distributed``:
the coordinator bound to rank 0's address, gloo to the rank's own), then per size compiles
the runner's collective (the mean of one flat float32 gradient, ``Collectives.mean``), runs
it once as a warm-up and ``--repeats`` timed ones, each after the runner's one-float psum
barrier; rank 0 reports. The time includes the division by the world, as training's.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from dlscale.commbench import common
from dlscale.host import placement

MODULE = "dlscale.commbench.jax"


def rank_main(args: argparse.Namespace) -> None:
    os.environ.setdefault("NPROC", "1")  # XLA's intra-op pool: one thread, as torch's bench
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np

    from dlscale.runners.jax import distributed

    host, port = args.master.rsplit(":", 1)
    timeout = int(args.timeout_s)
    distributed.join(
        jax, host, int(port), args.world, args.rank, placement.address_towards(host),
        startup_s=timeout, heartbeat_s=timeout,
    )  # fmt: skip
    collectives = None
    try:
        for nbytes in args.sizes:
            size = max(1, nbytes // 4)
            collectives = distributed.Collectives(jax, size)
            grad = jax.device_put(np.ones((1, size), np.float32), collectives.device)
            collectives.mean(grad).block_until_ready()  # warm-up: compilation, connections

            def op(c: Any = collectives, g: Any = grad) -> None:
                c.mean(g).block_until_ready()

            for repeat in range(args.repeats):
                seconds = common.timed(op, collectives.barrier)
                if args.rank == 0:
                    common.emit(
                        {"op": "allreduce", "world": args.world, "nbytes": size * 4,
                         "repeat": repeat, "seconds": seconds}
                    )  # fmt: skip
        if collectives is not None:
            collectives.barrier()
    finally:
        jax.distributed.shutdown()


def drive(args: argparse.Namespace) -> list[dict[str, Any]]:
    return common.per_rank_sweep(MODULE, args, lambda iface: {})


def main(argv: list[str] | None = None) -> int:
    return common.main(
        __doc__.splitlines()[0], rank_main, drive, {"framework": "jax", "library": "jax-gloo"}, argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
