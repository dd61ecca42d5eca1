"""Interconnect presets: the latency (alpha) and bandwidth (beta) of the networks we model.

One table serves two users: the scaling model (``dlscale.perfmodel``), which predicts
communication time on a network from its alpha and beta, and the emulated interconnect
(``dlscale.netns``), which shapes veth links with ``tc`` to match a preset so that the
prediction can be checked against measured runs on this host. A preset is emulable when
this host's veth links can carry it (a 2-core VM moves a few Gbit/s between namespaces);
faster networks (InfiniBand, TH Express-2) are for projection only.

This module is imported at DAG time: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

GBIT = 1e9 / 8  # bytes per second in one Gbit/s


@dataclass(frozen=True)
class NetworkPreset:
    """A point-to-point link: one-way latency ``latency_s`` and bandwidth ``bandwidth_Bps``."""

    name: str
    latency_s: float
    bandwidth_Bps: float
    emulable: bool
    source: str

    @property
    def bandwidth_gbit(self) -> float:
        return self.bandwidth_Bps / GBIT


PRESETS: dict[str, NetworkPreset] = {
    preset.name: preset
    for preset in (
        NetworkPreset("100mbe", 100e-6, 0.1 * GBIT, True, "Fast Ethernet, typical switched TCP latency"),
        NetworkPreset("1gbe", 50e-6, 1 * GBIT, True, "Gigabit Ethernet, typical TCP latency"),
        NetworkPreset("10gbe", 10e-6, 10 * GBIT, True, "10 Gigabit Ethernet, typical TCP latency"),
        NetworkPreset(
            "ib-fdr", 0.7e-6, 6.8e9, False, "InfiniBand 4x FDR: 56 Gbit/s signalling, ~6.8 GB/s, MPI ~0.7 us"
        ),
        NetworkPreset(
            "th-express2",
            1.6e-6,
            12e9,
            False,
            "TH Express-2 (Tianhe-2; Liao et al., JCST 30(2), 2015): 14 Gbit/s x 8 lanes per port,"
            " MPI point-to-point ~12 GB/s, ~1.6 us (approximate published figures)",
        ),
    )
}

HOST = "host"  # no emulation: the ranks of a run talk over this host's loopback
EMULATED_PREFIX = "emulated-"


def emulated_preset(network: str) -> NetworkPreset | None:
    """The preset a study's ``network`` value emulates, or None for ``host``.

    Raises KeyError for a name that is neither ``host`` nor ``emulated-<emulable preset>``.
    """
    if network == HOST:
        return None
    name = network.removeprefix(EMULATED_PREFIX)
    preset = PRESETS.get(name) if network.startswith(EMULATED_PREFIX) else None
    if preset is None or not preset.emulable:
        raise KeyError(network)
    return preset


def network_choices() -> list[str]:
    """Every value the study's ``network`` option accepts."""
    return [HOST] + [EMULATED_PREFIX + p.name for p in PRESETS.values() if p.emulable]
