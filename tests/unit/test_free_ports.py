"""Ports the launcher hands its ranks come from below the kernel's ephemeral range.

A port the OS picks (``bind`` to 0) lies in the ephemeral range, where srun, slurmstepd and
every outgoing connection also draw theirs, so it can be taken between the launcher's probe
and the rank's bind (CI, 2026-12-06: torch's store failed with EADDRINUSE under SLURM).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid

import pytest

from dlscale.base import sysutil


@pytest.fixture(autouse=True)
def own_names(monkeypatch):
    """Each test its own port names (real launchers and other test workers hold theirs in
    this namespace too) and no port held from another test."""
    monkeypatch.setattr(sysutil, "PORT_NAME", f"\0dlscale-test-{uuid.uuid4().hex}-{{port}}")
    monkeypatch.setattr(sysutil, "_held", {})
    yield
    sysutil._let_go(0.0)


def two_port_range(monkeypatch) -> tuple[int, int]:
    """A range of two ports, both free now: (first, second)."""
    for _ in range(50):
        with socket.socket() as probe, socket.socket() as after:
            probe.bind(("0.0.0.0", 0))
            first = probe.getsockname()[1]
            try:
                after.bind(("0.0.0.0", first + 1))
            except OSError:
                continue
            break
    else:
        pytest.skip("no two free ports side by side")
    monkeypatch.setattr(sysutil, "PORTS_FROM", first)
    monkeypatch.setattr(sysutil, "ephemeral_low", lambda: first + 2)
    return first, first + 1


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


def test_a_port_drawn_is_not_drawn_again_while_held(monkeypatch):
    first, second = two_port_range(monkeypatch)
    drawn = sysutil.free_port()
    again = sysutil.free_port()  # the other port of the range: the first is held
    assert {drawn, again} == {first, second}
    third = sysutil.free_port()  # the range is spent: the OS picks, outside it
    assert third not in (first, second)


def test_a_port_another_process_holds_is_skipped_though_free(monkeypatch):
    """Another launcher of this network namespace drew it and its ranks have not bound it
    yet: the port is free to a probe, and only the name says it is taken."""
    first, second = two_port_range(monkeypatch)
    name = sysutil.PORT_NAME.format(port=first)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, sys, time\n"
         "held = socket.socket(socket.AF_UNIX)\n"
         f"held.bind({name!r})\nprint('held', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert sysutil.free_port() == second
    finally:
        holder.kill()
        holder.wait()
    sysutil._let_go(0.0)
    assert first in {sysutil.free_port(), sysutil.free_port()}  # let go of with its process


def test_a_process_that_lives_on_lets_go_after_the_hold(monkeypatch):
    first, second = two_port_range(monkeypatch)
    monkeypatch.setattr(sysutil, "PORT_HOLD_S", 0.0)
    assert all(sysutil.free_port() in (first, second) for _ in range(6))


def test_a_name_is_held_once_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert sysutil.reserve_port(29999)
    assert not sysutil.reserve_port(29999)  # this process holds it
    assert list(tmp_path.iterdir()) == []  # an abstract name: nothing on any file system


def test_where_no_name_can_be_made_the_probe_alone_decides(monkeypatch):
    monkeypatch.setattr(sysutil, "PORT_NAME", "\0" + "x" * 200 + "{port}")  # too long a name
    ports = sysutil.free_ports(3)
    assert len(set(ports)) == 3 and all(port > 0 for port in ports)
