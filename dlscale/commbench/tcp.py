"""A plain TCP ping-pong between two nodes: the network itself, the reference for every library.

``python -m dlscale.commbench.tcp --network emulated-1gbe --sizes ... --out FILE`` (any
venv: standard library only). Node 1 listens; node 0 sends ``nbytes`` and node 1 sends
``nbytes`` back; half the round trip is one ``pingpong`` row: a one-way message of
``nbytes``, ``alpha + nbytes/beta`` of the link (TCP_NODELAY; 4 MiB socket buffers).
"""

from __future__ import annotations

import argparse
import socket
import time
from typing import Any

from dlscale.commbench import TCP, common

MODULE = "dlscale.commbench.tcp"
CHUNK = 4 << 20


def _recv_exact(conn: socket.socket, view: memoryview, nbytes: int) -> None:
    got = 0
    while got < nbytes:
        n = conn.recv_into(view[got:nbytes], min(CHUNK, nbytes - got))
        if not n:
            raise ConnectionError("peer closed early")
        got += n


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, opt, CHUNK)


def rank_main(args: argparse.Namespace) -> None:
    host, port = args.master.rsplit(":", 1)
    largest = max(args.sizes)
    buffer = bytearray(largest)
    view = memoryview(buffer)
    rounds = args.repeats + 1  # + 1 warm-up per size
    if args.rank == 1:  # the echo side listens on its own node's address
        with socket.create_server((host, int(port))) as server:
            conn, _ = server.accept()
            with conn:
                _tune(conn)
                for nbytes in args.sizes:
                    for _ in range(rounds):
                        _recv_exact(conn, view, nbytes)
                        conn.sendall(view[:nbytes])
        return
    deadline = time.monotonic() + args.timeout_s
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=args.timeout_s)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        _tune(conn)
        for nbytes in args.sizes:
            for repeat in range(rounds):
                t0 = time.perf_counter()
                conn.sendall(view[:nbytes])
                _recv_exact(conn, view, nbytes)
                seconds = (time.perf_counter() - t0) / 2
                if repeat:
                    common.emit(
                        {
                            "op": "pingpong",
                            "world": 2,
                            "nbytes": nbytes,
                            "repeat": repeat - 1,
                            "seconds": seconds,
                        }
                    )


def drive(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Always two nodes: the listener (node 1) is the one whose address rank 0 dials."""
    sizes = common.sizes_for(args.sizes, args.network, args.max_op_s, 2.0)
    with common.network(2, args.network, args.latency_us) as net:
        peer = f"{common.address(net, 1)}:{common.BASE_PORT}"
        argvs = [
            [
                *common.on_node(net, k),
                *common.rank_argv(MODULE, args, k, 2, peer, common.interface(net), sizes),
            ]
            for k in (0, 1)
        ]
        # the listener first: rank 0 retries its connection until the listener is up
        rows = common.run_processes(argvs[:1], common.rank_env(net), args.timeout_s, background=argvs[1:])
    return rows


def main(argv: list[str] | None = None) -> int:
    return common.main(__doc__.splitlines()[0], rank_main, drive, {"framework": TCP, "library": TCP}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
