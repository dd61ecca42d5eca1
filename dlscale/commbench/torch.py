"""gloo all-reduce (torch.distributed) of one flat float32 tensor per size: the torch runner's path.

``python -m dlscale.commbench.torch --network host --worlds 2 4 --sizes ... --out FILE``
(in the torch venv). Each rank: ``init_process_group("gloo")`` on its node's interface,
then per size one warm-up ``all_reduce`` and ``--repeats`` timed ones, each after a
barrier; rank 0 reports. The time includes gloo's reduction arithmetic, as training does.
"""

from __future__ import annotations

import argparse
import datetime
import time
from typing import Any

from dlscale.commbench import common

MODULE = "dlscale.commbench.torch"


def rank_main(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    host, port = args.master.rsplit(":", 1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{host}:{port}",
        rank=args.rank,
        world_size=args.world,
        timeout=datetime.timedelta(seconds=args.timeout_s),
    )
    try:
        for nbytes in args.sizes:
            tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
            dist.all_reduce(tensor)  # warm-up: connections, buffers
            for repeat in range(args.repeats):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(tensor)
                seconds = time.perf_counter() - t0
                if args.rank == 0:
                    common.emit(
                        {"op": "allreduce", "world": args.world, "nbytes": tensor.numel() * 4,
                         "repeat": repeat, "seconds": seconds}
                    )  # fmt: skip
        dist.barrier()
    finally:
        dist.destroy_process_group()


def drive(args: argparse.Namespace) -> list[dict[str, Any]]:
    return common.per_rank_sweep(MODULE, args, lambda iface: {"GLOO_SOCKET_IFNAME": iface})


def main(argv: list[str] | None = None) -> int:
    return common.main(
        __doc__.splitlines()[0], rank_main, drive, {"framework": "torch", "library": "gloo"}, argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
