"""Ports the launcher hands its ranks come from below the kernel's ephemeral range.

A port the OS picks (``bind`` to 0) lies in the ephemeral range, where srun, slurmstepd and
every outgoing connection also draw theirs, so it can be taken between the launcher's probe
and the rank's bind (CI, 2026-12-06: torch's store failed with EADDRINUSE under SLURM).
"""

from __future__ import annotations

import socket

import pytest

from dlscale.base import sysutil


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    ports = sysutil.free_ports(8)
    assert len(set(ports)) == 8
    assert all(sysutil.PORTS_FROM <= port < sysutil.ephemeral_low() for port in ports), ports
    for port in ports:  # free once returned: the rank can bind it
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2"], ids=["loopback", "another-address"])
def test_a_port_in_use_on_any_address_is_never_chosen(monkeypatch, address):
    """Held on loopback, or on another address of the host (as a Spark master holds its
    node's address): a rank binding every address would fail on it."""
    held = socket.socket()
    held.bind((address, 0))
    held.listen()
    try:
        taken = held.getsockname()[1]
        # A range of the held port and one more: drawn at random, the held one would come
        # back in about half the draws if its probe did not refuse it.
        monkeypatch.setattr(sysutil, "PORTS_FROM", taken)
        monkeypatch.setattr(sysutil, "ephemeral_low", lambda: taken + 2)
        assert all(sysutil.free_port() != taken for _ in range(20))
    finally:
        held.close()


def test_an_exhausted_range_falls_back_to_the_os(monkeypatch):
    monkeypatch.setattr(sysutil, "ephemeral_low", lambda: sysutil.PORTS_FROM)  # empty range
    ports = sysutil.free_ports(3)
    assert len(set(ports)) == 3 and all(port > 0 for port in ports)


def test_the_ephemeral_range_is_read_and_defaulted(tmp_path):
    file = tmp_path / "ip_local_port_range"
    file.write_text("40000\t60999\n")
    assert sysutil.ephemeral_low(file) == 40000
    file.write_text("garbage")
    assert sysutil.ephemeral_low(file) == sysutil.DEFAULT_EPHEMERAL_LOW
    assert sysutil.ephemeral_low(tmp_path / "absent") == sysutil.DEFAULT_EPHEMERAL_LOW
