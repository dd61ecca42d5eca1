"""Open MPI's description of a rank -> the ``DLSCALE_*`` variables dlscale's placement reads.

mpirun sets ``OMPI_COMM_WORLD_RANK`` / ``_SIZE`` in every rank it starts. The local plan
(``launcher.py``) marks its mpirun with ``DLSCALE_MPIRUN=1`` and the emulated layout
(``DLSCALE_RANKS_PER_NODE``); ranks are packed by node as srun's block distribution does,
so an emulated n x p run looks the same to the analysis whichever framework ran it.
Kept out of dlscale.host.placement because only the mpirun-launched runner needs it.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlscale.host import placement


def placement_env(env: Mapping[str, str]) -> dict[str, str]:
    """The ``DLSCALE_*`` variables for this rank, or nothing when not under dlscale's mpirun."""
    if env.get("DLSCALE_MPIRUN") != "1" or "DLSCALE_RANK" in env or "OMPI_COMM_WORLD_RANK" not in env:
        return {}
    rank = int(env["OMPI_COMM_WORLD_RANK"])
    world = int(env["OMPI_COMM_WORLD_SIZE"])
    per_node = int(env.get("DLSCALE_RANKS_PER_NODE", "1"))
    if per_node < 1 or world % per_node:
        raise ValueError(f"DLSCALE_RANKS_PER_NODE={per_node} does not divide the MPI world size {world}")
    return placement.local_rank_env(
        rank,
        world // per_node,
        per_node,
        int(env.get("DLSCALE_MASTER_PORT", placement.PORTS_FROM)),
        env.get("DLSCALE_MASTER_ADDR", "127.0.0.1"),
    )
