"""The JAX runner's processes meeting: the coordinator, gloo, and the gradient all-reduce.

``connect`` starts JAX's distributed runtime (``jax.distributed.initialize``) with three
things JAX does not do by itself:

- rank 0's coordination service is bound to the master address (JAX binds ``[::]``, every
  interface, unless told) and gloo to the rank's own address (JAX gives gloo the address
  the host name resolves to, a loopback address on many systems, unreachable from other
  nodes); so a local run needs no private network namespace;
- the start-up is bounded with a message: JAX's client aborts the whole process (SIGABRT,
  no Python exception) when it cannot register with the coordinator in time, so a rank
  other than 0 first dials the coordinator itself, for at most the start-up timeout, and
  fails naming it (``RunFailure``) before JAX is asked;
- the collectives: one all-reduce of the flat gradient (``psum`` inside a jitted
  ``shard_map`` over the processes' devices, divided by the world: a mean, as torch's
  all_reduce then divide), and a one-float ``psum`` as the barrier before it, so that the
  all-reduce is timed without waiting for a slower peer (torch's ``dist.barrier``).

``DLSCALE_JAX_FAULT`` injects a fault for the tests that the parity check must catch:
``scale-gradient:RANK:FROM`` multiplies rank RANK's gradient by 2 before the all-reduce from
iteration FROM on (what a collective returning wrong values does to a run); the run says
so in its warnings.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from dlscale.host import placement as placement_mod
from dlscale.runners.common import RunContext, RunFailure

#: The fault-injection variable (tests only; see the module docstring).
ENV_FAULT = "DLSCALE_JAX_FAULT"
#: How long a rank waits between dials of a coordinator that does not answer yet.
DIAL_RETRY_S = 0.25


def own_address(ctx: RunContext) -> str:
    """The address this rank's gloo listens on and publishes: the emulated node's locally
    (``DLSCALE_NODE_ADDR``), else the source address of the route to the master."""
    where = ctx.placement
    if where.launcher == "local":
        return os.environ.get("DLSCALE_NODE_ADDR", where.master_addr)
    return placement_mod.address_towards(where.master_addr)


def dial_coordinator(address: str, port: int, rank: int, timeout_s: float) -> float:
    """Wait until the coordinator at ``address:port`` accepts a TCP connection; return the
    seconds it took, or fail (RunFailure) after ``timeout_s`` naming it and the last error."""
    started = time.monotonic()
    last = "no answer"
    while True:
        try:
            with socket.create_connection((address, port), timeout=min(2.0, timeout_s)):
                return time.monotonic() - started
        except OSError as err:
            last = err.strerror or str(err)
        if time.monotonic() - started + DIAL_RETRY_S > timeout_s:
            raise RunFailure(
                f"rank 0 (coordinator, {address}:{port}) unreachable from rank {rank}:"
                f" not reached within the start-up timeout of {timeout_s:g} s ({last})"
            )
        time.sleep(DIAL_RETRY_S)


def connect(ctx: RunContext, jax: Any) -> dict[str, float]:
    """Join the run's JAX processes (before any other JAX call); return what it took."""
    where = ctx.placement
    options = ctx.spec.options
    return join(
        jax,
        where.master_addr,
        where.master_port,
        where.world_size,
        where.rank,
        own_address(ctx),
        collectives=options["collectives"],
        startup_s=int(options["startup_timeout_s"]),
        heartbeat_s=int(options["timeout_s"]),
    )


def join(
    jax: Any,
    master: str,
    port: int,
    world: int,
    rank: int,
    address: str,
    *,
    collectives: str = "gloo",
    startup_s: int = 180,
    heartbeat_s: int = 300,
) -> dict[str, float]:
    """``jax.distributed.initialize`` with the coordinator on ``master:port`` (rank 0 binds
    it there), gloo on ``address``, and a bounded start-up; return what each part took.
    The runner and the communication benchmark (``dlscale.commbench.jax``) meet this way."""
    coordinator = f"{master}:{port}"
    took: dict[str, float] = {}
    if rank != 0:
        took["coordinator_dial_s"] = dial_coordinator(master, port, rank, startup_s)
    jax.config.update("jax_cpu_collectives_implementation", collectives)
    started = time.perf_counter()
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=world,
        process_id=rank,
        coordinator_bind_address=coordinator if rank == 0 else None,
        initialization_timeout=startup_s,
        heartbeat_timeout_seconds=heartbeat_s,
        shutdown_timeout_seconds=30,
    )
    _use_gloo_on(jax, address)
    took["distributed_init_s"] = time.perf_counter() - started
    return took


def _use_gloo_on(jax: Any, address: str) -> None:
    """Make the CPU backend's gloo collectives listen on ``address`` (before the backend
    starts): JAX's own factory gives gloo no address, and gloo then binds the host name's."""
    from jax._src import distributed, xla_bridge
    from jaxlib import _jax

    def make_cpu_client() -> Any:
        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=distributed.global_state.client, hostname=address
        )
        return xla_bridge.make_cpu_client(collectives=collectives)

    xla_bridge.register_backend_factory("cpu", make_cpu_client, priority=0, fail_quietly=False)


@dataclass(frozen=True)
class Fault:
    """An injected fault: rank ``rank``'s gradient times ``factor`` from ``start`` on."""

    rank: int
    start: int
    factor: float = 2.0

    def applies(self, rank: int, iteration: int) -> bool:
        return rank == self.rank and iteration >= self.start

    @property
    def warning(self) -> str:
        return (
            f"fault injected ({ENV_FAULT}): rank {self.rank}'s gradient x{self.factor:g}"
            f" before the all-reduce from iteration {self.start} on"
        )


def injected_fault(env: dict[str, str] | None = None) -> Fault | None:
    """The fault ``DLSCALE_JAX_FAULT`` asks for (None: none); a malformed one fails the rank."""
    text = (os.environ if env is None else env).get(ENV_FAULT, "")
    if not text:
        return None
    kind, _, rest = text.partition(":")
    parts = rest.split(":")
    if kind != "scale-gradient" or len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise RunFailure(f"{ENV_FAULT}={text!r}: expected scale-gradient:RANK:FROM_ITERATION")
    return Fault(rank=int(parts[0]), start=int(parts[1]))


class Collectives:
    """The jitted collectives over every process's one CPU device (a 1-D mesh ``ranks``)."""

    def __init__(self, jax: Any, size: int):
        import numpy as np
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P

        self.jax = jax
        self.world = jax.process_count()
        self.mesh = Mesh(np.array(jax.devices()), ("ranks",))
        self.sharding = NamedSharding(self.mesh, P("ranks"))
        self.device = jax.local_devices()[0]
        world = self.world

        def mean(g: Any) -> Any:
            return jax.lax.psum(g, "ranks") / world

        def count(x: Any) -> Any:
            return jax.lax.psum(x, "ranks")

        spmd = {"mesh": self.mesh, "in_specs": P("ranks"), "out_specs": P()}
        self._mean = jax.jit(jax.shard_map(mean, **spmd))
        self._count = jax.jit(jax.shard_map(count, **spmd))
        self.size = size
        self._one = jax.device_put(np.ones((1, 1), np.float32), self.device)

    def _global(self, local: Any, shape: tuple[int, ...]) -> Any:
        return self.jax.make_array_from_single_device_arrays(
            (self.world * shape[0], *shape[1:]), self.sharding, [local]
        )

    def mean(self, grad: Any) -> Any:
        """The mean over the ranks of each rank's (1, size) gradient, as this rank's (size,) array."""
        out = self._mean(self._global(grad, (1, self.size)))
        return out.addressable_data(0)

    def barrier(self) -> None:
        """Every rank has arrived (a one-float psum, waited for)."""
        self._count(self._global(self._one, (1, 1))).block_until_ready()

    def sum(self, values: Any) -> Any:
        """Every rank's 1-D ``values`` added over the ranks (float32 on the wire: JAX's
        default; counts below 2**24 stay exact), as float64."""
        import numpy as np

        local = np.asarray(values, np.float32).reshape(1, -1)
        out = self._count(self._global(self.jax.device_put(local, self.device), local.shape))
        return np.asarray(out.addressable_data(0), np.float64).reshape(-1)

    def any(self, flag: bool) -> bool:
        """Whether any rank's ``flag`` is set (rank 0's stop decision reaches every rank)."""
        import numpy as np

        local = self.jax.device_put(np.full((1, 1), float(flag), np.float32), self.device)
        return bool(np.asarray(self._count(self._global(local, (1, 1))).addressable_data(0)).sum() > 0)
