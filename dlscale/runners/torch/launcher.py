"""How a PyTorch run starts: one process per rank (DDP over gloo)."""

from dlscale.runners.plan import LaunchContext, Plan, per_rank_plan


def plan(ctx: LaunchContext) -> Plan:
    return per_rank_plan(ctx, "dlscale.runners.torch")
