"""What a network adds to the host's costs: per-hop latency, per-byte time, and for an
emulated network (``tc tbf``) its token bucket and its egress-only shaping.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlscale.host.netns import shaping_args
from dlscale.networks import HOST, PRESETS, NetworkPreset, emulated_preset
from dlscale.perfmodel.fits import Fits

LOOPBACK = "loopback"


@dataclass(frozen=True)
class Link:
    """What a network adds to each message (``alpha_s``) and byte (``gamma_s_per_byte``)
    that crosses it, beyond the host's own costs; ``ingress_shaped``: a node's incoming
    traffic is limited too (a real network; False for ``tc tbf`` emulation)."""

    name: str
    alpha_s: float
    gamma_s_per_byte: float
    ingress_shaped: bool = True
    #: Bytes a link passes at once before its rate applies (``tc tbf``'s bucket, or what of
    #: it has refilled since the link last sent; 0 for a real network): a node whose step
    #: sends ``B`` bytes in one go waits ``(B - burst)/beta``.
    burst_bytes: float = 0.0
    #: The time per byte beyond the bucket relative to ``1/beta`` (``link_scale``: what a
    #: library achieves through ``tc tbf``, fitted on the emulated micro-benchmarks; 1 on a
    #: real network, where the projection has no measurement of it).
    wire_scale: float = 1.0
    #: An emulated network (``dlscale.host.netns``), not a projection preset.
    emulated: bool = False
    #: A parameter-server step's pushes and pulls are pipelined on a full-duplex link: each
    #: direction of a server's node carries its share for the remote workers plus its own
    #: workers' traffic to the other servers, at once, instead of pushes then pulls
    #: (``ps_parts``). Set only by a replayed system file that says so (``full_duplex``);
    #: the study's projection keeps them in turn.
    full_duplex: bool = False
    #: A node's ranks reach each other off this link (NVLink, shared memory), so a ring
    #: crosses it only where it spans two nodes (``ring_parts``). Set only by a replayed
    #: system file with ``ranks_per_node`` above 1; the host's emulation sends every rank's
    #: traffic through its link, and the study's projection has one rank a node.
    local_ranks_off_link: bool = False

    def wire(self, messages: Any, nbytes: Any) -> np.ndarray:
        """What the network adds to ``messages`` hops carrying ``nbytes`` in a row."""
        b = np.maximum(np.asarray(nbytes, dtype="float64") - self.burst_bytes, 0.0)
        return (
            np.asarray(messages, dtype="float64") * self.alpha_s + b * self.gamma_s_per_byte * self.wire_scale
        )

    def refilled(self, idle_s: float) -> Link:
        """This link after ``idle_s`` seconds without sending: ``tc tbf``'s bucket holds what
        its rate refilled in that time, at most its size (a training step's compute refills
        it between two synchronisations; a benchmark's back-to-back loop hardly at all)."""
        if self.gamma_s_per_byte <= 0 or not math.isfinite(idle_s):
            return self
        return dataclasses.replace(
            self, burst_bytes=min(self.burst_bytes, max(idle_s, 0.0) / self.gamma_s_per_byte)
        )

    @classmethod
    def host(cls) -> Link:
        return cls(HOST, 0.0, 0.0, True)

    @classmethod
    def of_preset(cls, preset: NetworkPreset, alpha_s: float | None = None) -> Link:
        gamma = 0.0 if math.isinf(preset.bandwidth_Bps) else 1.0 / preset.bandwidth_Bps
        return cls(preset.name, preset.latency_s if alpha_s is None else alpha_s, gamma, True)

    @property
    def beta_Bps(self) -> float:
        return math.inf if self.gamma_s_per_byte <= 0 else 1.0 / self.gamma_s_per_byte


def emulated_link(network: str, fits: Fits | None = None) -> Link:
    """The link an emulated network adds to the host (``dlscale.host.netns``): the preset's rate,
    the token bucket ``tc tbf`` is given (``netns.shaping_args``), egress only, and the extra
    one-way latency a TCP ping-pong measured across it over loopback (0 when not measured:
    no delay is emulated on this kernel)."""
    preset = emulated_preset(network.split("+", 1)[0])
    if preset is None:
        return Link.host()
    args = shaping_args(preset)
    burst = float(args[args.index("burst") + 1])
    alpha = 0.0
    here, host = (fits or {}).get(("tcp", "pingpong", network)), (fits or {}).get(("tcp", "pingpong", HOST))
    if here is not None and host is not None:
        alpha = max(here.get("alpha") - host.get("alpha"), 0.0)
    return Link(network, alpha, 1.0 / preset.bandwidth_Bps, False, burst, emulated=True)


def preset_named(name: str) -> NetworkPreset:
    """A projection preset by name (``loopback``: this host, no network added)."""
    if name == LOOPBACK:
        return NetworkPreset(LOOPBACK, 0.0, math.inf, False, "this host's loopback (the library costs alone)")
    if name in PRESETS:
        return PRESETS[name]
    preset = emulated_preset(name)
    if preset is None:
        return preset_named(LOOPBACK)
    return preset
