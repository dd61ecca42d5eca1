"""How a PyTorch run starts: one process per rank (DDP over gloo)."""

from typing import Any

from dlscale.runners.plan import LaunchContext, Plan, per_rank_plan
from dlscale.runners.torch import settings as torch_settings
from dlscale.runspec import RunSpec


def plan(ctx: LaunchContext) -> Plan:
    return per_rank_plan(ctx, "dlscale.runners.torch")


def listens_on_every_interface(spec: RunSpec) -> str | None:
    """Nothing in a local run: its ranks meet through a file (``train.rendezvous``, as torch's
    TCPStore would listen on every interface) and gloo binds the interface it is told
    (``GLOO_SOCKET_IFNAME``)."""
    return None


def settings(spec: RunSpec) -> dict[str, Any]:
    """The run's effective CPU settings (recorded in run_start by dlscale.launch)."""
    return torch_settings.describe(spec)
