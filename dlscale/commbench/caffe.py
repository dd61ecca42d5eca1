"""Open MPI all-reduce (mpi4py), Caffe-MPI's path: one flat buffer per size, and one Allreduce per blob.

``python -m dlscale.commbench.caffe --network host --worlds 2 4 --sizes ... --models lenet
--out FILE`` (in the caffe venv: mpi4py against Debian's Open MPI; mpirun starts the
ranks, each on its emulated node). Rows:

* ``allreduce``: ``MPI_Allreduce`` (in place, float32 sum) of one buffer of ``nbytes``,
  then the division by the world size, as the Caffe runner does per blob;
* ``allreduce-blobs``: Caffe-MPI's pattern for ``model``: one Allreduce (and division)
  per parameter blob, in net order (``dlscale.commbench.blobs``); ``nbytes`` is the whole
  gradient and ``parts`` the number of blobs. Against the ``allreduce`` of the same bytes
  it shows what the per-blob pattern costs.

``--algorithms`` forces Open MPI's tuned all-reduce algorithm (1 basic linear, 2
non-overlapping, 3 recursive doubling, 4 ring, 5 segmented ring, 6 Rabenseifner) for a
separate pass each (``coll_tuned_use_dynamic_rules``); ``default`` is Open MPI's own
choice, the one training gets (``dlscale.perfmodel.openmpi_allreduce_algorithm``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from typing import Any

from dlscale.commbench import common
from dlscale.commbench.blobs import blob_bytes
from dlscale.host import netns

MODULE = "dlscale.commbench.caffe"


def rank_main(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    scale = np.float32(1.0 / world)

    def allreduce(buffers: list[Any]) -> None:
        for buffer in buffers:
            comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
            buffer *= scale

    cells: list[tuple[str, str, list[Any]]] = [
        ("allreduce", "", [np.ones(max(1, n // 4), dtype=np.float32)]) for n in args.sizes
    ]
    for model in args.models:
        cells.append(
            ("allreduce-blobs", model, [np.ones(n // 4, dtype=np.float32) for n in blob_bytes(model)])
        )
    for op, model, buffers in cells:
        allreduce(buffers)  # warm-up
        nbytes = sum(int(b.nbytes) for b in buffers)
        for repeat in range(args.repeats):
            seconds = common.timed(lambda buffers=buffers: allreduce(buffers), comm.Barrier)
            if rank == 0:
                common.emit(
                    {"op": op, "world": world, "nbytes": nbytes, "parts": len(buffers), "model": model,
                     "algorithm": args.role, "repeat": repeat, "seconds": seconds}
                )  # fmt: skip
    comm.Barrier()


def drive(args: argparse.Namespace) -> list[dict[str, Any]]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise common.BenchFailed("mpirun not found (apt-get install openmpi-bin)")
    rows: list[dict[str, Any]] = []
    for world in args.worlds:
        sizes = common.sizes_for(args.sizes, args.network, args.max_op_s, 2.0)
        models = [
            m for m in args.models if common.sizes_for([sum(blob_bytes(m))], args.network, args.max_op_s)
        ]
        for algorithm in args.algorithms:
            with common.network(world, args.network, args.latency_us) as net:
                iface = common.interface(net)
                extra = {
                    "OMPI_MCA_btl": "self,tcp",  # emulated nodes: no shared-memory shortcut
                    "OMPI_MCA_btl_tcp_if_include": iface,
                    "OMPI_MCA_oob_tcp_if_include": iface,
                    "DLSCALE_RANKS_PER_NODE": "1",
                }
                if net is not None and net.preset is not None:
                    extra.update(
                        {"PMIX_MCA_ptl_tcp_remote_connections": "1", "PMIX_MCA_ptl_tcp_if_include": iface}
                    )
                if algorithm != "default":
                    extra.update(
                        {
                            "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                            "OMPI_MCA_coll_tuned_allreduce_algorithm": algorithm,
                        }
                    )
                rank_cmd = common.rank_argv(
                    MODULE, args, 0, world, "mpi:0", iface, sizes, models, role=algorithm
                )
                hop = (
                    []
                    if net is None or net.preset is None
                    else netns.node_argv(sys.executable, rank_var="OMPI_COMM_WORLD_RANK")
                )
                argv = [
                    *common.on_node(net, 0), mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                    "-n", str(world), *hop, *rank_cmd,
                ]  # fmt: skip
                print(
                    f"[commbench] mpi world {world} algorithm {algorithm} on {args.network}",
                    file=sys.stderr,
                    flush=True,
                )
                started = time.time()
                rows += common.run_processes([argv], common.rank_env(net, extra), args.timeout_s)
                print(f"[commbench]   {time.time() - started:.1f} s", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    return common.main(
        __doc__.splitlines()[0], rank_main, drive, {"framework": "caffe", "library": "mpi"}, argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
