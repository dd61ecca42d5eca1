"""A per-hop latency for the emulated interconnect on a kernel without ``sch_netem`` or ``fq``.

This host's kernel has ``tbf``, ``htb``, ``pfifo``, ``clsact`` and ``cls_bpf``, but neither
``sch_netem`` (the usual delay) nor ``sch_fq``/``sch_etf`` (the only qdiscs that hold a
packet until its ``skb->tstamp``: a ``cls_bpf`` program may set the time stamp, but
``tbf`` ignores it, so BPF alone cannot delay), and ``tbf``'s ``latency`` is the longest a
packet may wait for tokens before it is dropped, not a delay. What it does have is
netfilter's ``NFQUEUE`` target (``CONFIG_NETFILTER_XT_TARGET_NFQUEUE``,
``CONFIG_NETFILTER_NETLINK_QUEUE``): a packet sent to a queue waits in the kernel until a
user-space program gives its verdict. This module is that program: every packet leaving
an emulated node's ``eth0`` (``iptables -t mangle -A POSTROUTING -o eth0 -j NFQUEUE
--queue-bypass``, in the node's namespace) is accepted ``delay`` after it arrived, in
order (one batch verdict for every packet due), so each hop between nodes gains
``delay``. Only metadata crosses to user space (``NFQNL_COPY_META``), GSO packets stay
whole (``NFQA_CFG_F_GSO``), and ``--queue-bypass`` lets traffic through unchanged if the
program is gone, so a crash cannot hang a run.

Limits, measured by ``python -m dlscale.commbench.tcp --latency-us``: the delay is held by
a Python loop with a 1 ns timer slack, so it is exact to some tens of microseconds and
costs CPU per packet; it suits the per-message (alpha) regime, 10-100 us, not line-rate
bulk traffic. Needs root and ``iptables`` (Debian: ``apt-get install iptables``; the
legacy backend, since this kernel has no ``nft_queue``).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence

from dlscale.host import netns

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_GSO = 4
NF_ACCEPT = 1
NLM_F_REQUEST = 1
PR_SET_TIMERSLACK = 29
QUEUE = 0


def iptables() -> str | None:
    """The iptables that drives this kernel's NFQUEUE (legacy x_tables), or None."""
    return shutil.which("iptables-legacy") or shutil.which("iptables")


def unavailable() -> str | None:
    """Why a delay cannot be emulated here (None when it can)."""
    why = netns.unavailable(shaping=True)
    if why:
        return why
    if iptables() is None:
        return "a per-hop delay needs iptables (apt-get install iptables)"
    return None


def _attr(kind: int, data: bytes) -> bytes:
    length = 4 + len(data)
    return struct.pack("=HH", length, kind) + data + b"\0" * ((4 - length % 4) % 4)


def _message(msg: int, attrs: bytes, queue: int = QUEUE) -> bytes:
    payload = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return (
        struct.pack("=IHHII", 16 + len(payload), (NFNL_SUBSYS_QUEUE << 8) | msg, NLM_F_REQUEST, 0, 0)
        + payload
    )


def _bind(sock: socket.socket) -> None:
    sock.send(
        _message(
            NFQNL_MSG_CONFIG,
            _attr(NFQA_CFG_CMD, struct.pack("=BxH", NFQNL_CFG_CMD_BIND, socket.htons(socket.AF_INET))),
        )
    )
    sock.send(_message(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))))
    sock.send(_message(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", 65536))))
    flags = _attr(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_GSO)) + _attr(
        NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_GSO)
    )
    sock.send(_message(NFQNL_MSG_CONFIG, flags))


def packet_ids(data: bytes) -> list[int]:
    """The packet ids of the queue messages in one netlink read."""
    ids, offset = [], 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            at = offset + 20
            while at + 4 <= offset + length:
                alen, atype = struct.unpack_from("=HH", data, at)
                if alen < 4:
                    break
                if atype & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from(">I", data, at + 4)[0])
                at += (alen + 3) & ~3
        offset += (length + 3) & ~3
    return ids


def serve(namespaces: Sequence[str], delay_s: float) -> None:
    """Hold every packet of each namespace's queue ``delay_s``, then accept it (runs until killed)."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    sockets = []
    for path in namespaces:
        netns.enter(path)
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        netns.enter(f"/proc/self/fd/{home}")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.bind((0, 0))
        _bind(sock)
        sock.setblocking(False)
        sockets.append(sock)
    waiting = {sock: collections.deque() for sock in sockets}
    print(
        f"[latency] holding packets {delay_s * 1e6:.0f} us in {len(sockets)} namespace(s)",
        file=sys.stderr,
        flush=True,
    )
    while True:
        due = [q[0][0] for q in waiting.values() if q]
        timeout = max(0.0, min(due) - time.monotonic()) if due else 1.0
        readable, _, _ = select.select(sockets, [], [], timeout)
        now = time.monotonic()
        for sock in readable:
            while True:
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    break
                except OSError:  # ENOBUFS: the kernel dropped queue messages; those packets bypass
                    break
                for packet in packet_ids(data):
                    waiting[sock].append((now + delay_s, packet))
        now = time.monotonic()
        for sock, queue in waiting.items():
            last = None
            while queue and queue[0][0] <= now:
                last = queue.popleft()[1]
            if last is not None:
                sock.send(
                    _message(
                        NFQNL_MSG_VERDICT_BATCH, _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, last))
                    )
                )


class Delay:
    """A per-hop delay on every node of an emulated network, while the ``with`` block runs."""

    def __init__(self, net: netns.RunNetwork, delay_s: float):
        self.net, self.delay_s = net, delay_s
        self.proc: subprocess.Popen[bytes] | None = None

    def _rule(self, action: str, name: str) -> None:
        netns.run_ip(
            "netns", "exec", name, str(iptables()), "-t", "mangle", action, "POSTROUTING", "-o",
            netns.NODE_INTERFACE, "-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass",
        )  # fmt: skip

    def __enter__(self) -> Delay:
        why = unavailable()
        if why:
            raise netns.NetnsError(why)
        paths = [self.net.path(i) for i in range(len(self.net.namespaces))]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, "--delay-us", str(self.delay_s * 1e6), *paths],
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        time.sleep(0.3)  # bound before the rules send packets its way (bypass covers the gap)
        if self.proc.poll() is not None:
            raise netns.NetnsError(f"the delay process exited: {self.proc.stderr.read().decode()[-500:]}")
        for name in self.net.namespaces:
            self._rule("-A", name)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.net.namespaces:
            try:
                self._rule("-D", name)
            except netns.NetnsError:
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-us", type=float, required=True)
    parser.add_argument("namespaces", nargs="+", help="namespace files (/run/netns/...)")
    args = parser.parse_args(argv)
    serve(args.namespaces, args.delay_us * 1e-6)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
