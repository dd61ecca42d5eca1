"""The raw loopback bandwidth of this host: a plain TCP stream between two processes.

``python -m benchmarks.tcp_stream allreduce --sizes N... --inner K`` (arguments and output:
benchmarks.worker_cli): a receiver process (forked here) accepts one connection on
127.0.0.1; for each size the sender streams N bytes and the receiver answers one byte when
it has them all; the time to that answer is one transfer. Standard library only (besides
worker_cli): it sets the ceiling the frameworks' all-reduce is compared against.
"""

from __future__ import annotations

import multiprocessing
import socket
import statistics
import time

from benchmarks import worker_cli

CHUNK = 4 << 20


def _receive(listener: socket.socket, sizes: list[int], inner: int) -> None:
    conn, _ = listener.accept()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with conn:
        for nbytes in sizes:
            for _ in range(inner + 1):  # + 1 warm-up transfer
                left = nbytes
                while left:
                    got = conn.recv_into(view, min(CHUNK, left))
                    if not got:
                        raise ConnectionError("sender closed early")
                    left -= got
                conn.sendall(b"k")


def stream(sizes: list[int], inner: int) -> list[dict[str, float]]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    receiver = multiprocessing.get_context("fork").Process(target=_receive, args=(listener, sizes, inner))
    receiver.start()
    results = []
    try:
        with socket.create_connection(listener.getsockname(), timeout=300) as conn:
            for nbytes in sizes:
                payload = memoryview(bytearray(nbytes))
                times = []
                for i in range(inner + 1):
                    t0 = time.perf_counter()
                    conn.sendall(payload)
                    if conn.recv(1) != b"k":
                        raise ConnectionError("receiver did not acknowledge")
                    if i:
                        times.append(time.perf_counter() - t0)
                results.append({"transport": "tcp", "nbytes": nbytes, "seconds": statistics.median(times)})
    finally:
        listener.close()
        receiver.join(timeout=30)
        if receiver.is_alive():
            receiver.kill()
            receiver.join()
    return results


COMMANDS = {"allreduce": lambda args: stream(args.sizes, args.inner)}

if __name__ == "__main__":
    worker_cli.run(COMMANDS, __doc__)
