"""How a PyTorch run starts: one process per rank (DDP over gloo)."""

from typing import Any

from dlscale.runners.plan import LaunchContext, Plan, per_rank_plan
from dlscale.runners.torch import settings as torch_settings
from dlscale.runspec import RunSpec


def plan(ctx: LaunchContext) -> Plan:
    return per_rank_plan(ctx, "dlscale.runners.torch")


def settings(spec: RunSpec) -> dict[str, Any]:
    """The run's effective CPU settings (recorded in run_start by dlscale.launch)."""
    return torch_settings.describe(spec)
