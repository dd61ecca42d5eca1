"""Interconnect presets: the latency (alpha) and bandwidth (beta) of the networks we model.

One table serves two users: the scaling model (``dlscale.perfmodel``), which predicts
communication time on a network from its alpha and beta, and the emulated interconnect
(``dlscale.host.netns``), which shapes veth links with ``tc`` to match a preset so that the
prediction can be checked against measured runs on this host. A preset is emulable when
this host's veth links can carry it (a 2-core VM moves a few Gbit/s between namespaces);
faster networks (InfiniBand, TH Express-2) are for projection only.

A preset's ``basis`` says where its figures come from: ``typical`` (the network's standard
figures), ``measured`` (a measured figure with its source), or ``widened band`` (no measured
point-to-point figure found: the point stays, and ``latency_band_s`` / ``bandwidth_band_Bps``
span the published figures that can be cited). The projection uses the point; the band is
what the captions and ``docs/perfmodel.md`` report beside it.

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
    basis: str = "typical"
    #: (low, high) of the published figures where ``basis`` is ``widened band``; else None.
    latency_band_s: tuple[float, float] | None = None
    bandwidth_band_Bps: tuple[float, float] | None = None

    @property
    def bandwidth_gbit(self) -> float:
        return self.bandwidth_Bps / GBIT

    def band_note(self) -> str:
        """One sentence for a caption: where the figures come from, and the band if any."""
        point = f"{self.latency_s * 1e6:g} us, {self.bandwidth_Bps / 1e9:g} GB/s"
        if self.latency_band_s is None or self.bandwidth_band_Bps is None:
            return f"preset {self.name}: {point} ({self.basis} figures)"
        (lat_lo, lat_hi), (bw_lo, bw_hi) = self.latency_band_s, self.bandwidth_band_Bps
        return (
            f"preset {self.name}: {point}, not measured: a {self.basis}, latency"
            f" {lat_lo * 1e6:g}-{lat_hi * 1e6:g} us, bandwidth {bw_lo / 1e9:g}-{bw_hi / 1e9:g} GB/s"
        )


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
            "TH Express-2 (Tianhe-2): no measured point-to-point figure in the stored sources;"
            " point 1.6 us, 12 GB/s inside a band widened to the published range: latency 1.0-1.6 us"
            " (Dongarra, ICL-UT-17-04, 2017, Table 0-1: TH-2 1.57 us, TH-2A 1 us), bandwidth"
            " 6.34-14 GB/s (Tianhe-1A's measured MPI 6,340 MB/s, Lu et al., IEEE Micro 32(1), 2012;"
            " 14 Gbit/s x 8 lanes)",
            basis="widened band",
            latency_band_s=(1.0e-6, 1.6e-6),
            bandwidth_band_Bps=(6.34e9, 14e9),
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
