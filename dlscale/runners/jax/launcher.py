"""How a JAX run starts: one process per rank, as torch's (no JAX import)."""

from typing import Any

from dlscale.runners.jax import settings as jax_settings
from dlscale.runners.plan import LaunchContext, Plan, per_rank_plan
from dlscale.runspec import RunSpec


def plan(ctx: LaunchContext) -> Plan:
    base = per_rank_plan(ctx, "dlscale.runners.jax")
    for process in base.processes:
        process.env.update(jax_settings.env(ctx.spec))
    return base


def listens_on_every_interface(spec: RunSpec) -> str | None:
    """Nothing: rank 0's coordination service is bound to the master address (JAX binds
    ``[::]`` unless told, ``dlscale.runners.jax.distributed``) and gloo to each rank's own."""
    return None


def settings(spec: RunSpec) -> dict[str, Any]:
    """The run's effective CPU settings (recorded in run_start by dlscale.launch)."""
    return jax_settings.describe(spec)
