"""The driver side of every micro-benchmark: arguments, namespaces, rank processes, the CSV.

A driver runs in its framework's venv (standard library and dlscale only here). Per world
size it makes the network: an isolated namespace with only ``lo`` for ``host`` (nothing
else on the host can reach the ranks, and fixed ports cannot collide), or one namespace
per emulated node joined by shaped links (``dlscale.host.netns.emulated``). Rank ``k`` runs on
node ``k``. Every process gets a time limit and its own process group, and is stopped by
its group id when anything fails, so a benchmark never leaves a rank behind.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlscale.base import atomic
from dlscale.base.process import stop_group
from dlscale.commbench import (
    DEFAULT_EXECUTORS,
    DEFAULT_MAX_OP_S,
    DEFAULT_REPEATS,
    DEFAULT_SIZES,
    DEFAULT_WORLDS,
    RAW_COLUMNS,
)
from dlscale.host import netns
from dlscale.networks import emulated_preset

#: Port of rank 0's rendezvous (the namespaces are the benchmark's own: nothing else binds).
BASE_PORT = 29611


class BenchFailed(RuntimeError):
    """A rank failed or timed out; the message names it and ends with its stderr."""


def host_cores() -> int:
    """Cores this process may run on (the contention factor's divisor)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def parser(description: str) -> argparse.ArgumentParser:
    """Arguments shared by every benchmark (the driver's and a rank's)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--network", default="host", help="host or emulated-<preset>")
    p.add_argument("--worlds", type=int, nargs="+", default=list(DEFAULT_WORLDS))
    p.add_argument("--executors", type=int, nargs="+", default=list(DEFAULT_EXECUTORS))
    p.add_argument(
        "--tf-worlds", type=int, nargs="+", default=None, help="TensorFlow's worlds (default --worlds)"
    )
    p.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    p.add_argument("--models", nargs="*", default=[], help="models whose per-blob pattern to time (caffe)")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    p.add_argument("--max-op-s", type=float, default=DEFAULT_MAX_OP_S)
    p.add_argument(
        "--latency-us",
        type=float,
        default=0.0,
        help="per-hop delay on an emulated network (commbench.latency)",
    )
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument("--out", type=Path, help="CSV to write (driver)")
    # One rank's side (set by the driver).
    p.add_argument("--rank", type=int)
    p.add_argument("--world", type=int)
    p.add_argument("--master", help="rank 0's host:port")
    p.add_argument("--interface", default="lo")
    p.add_argument("--role", default="rank")
    p.add_argument(
        "--algorithms", nargs="+", default=["default"], help="Open MPI all-reduce algorithms to force (caffe)"
    )
    return p


def emit(row: dict[str, Any]) -> None:
    """A rank's result line (the driver keeps the lines that are JSON objects)."""
    print(json.dumps(row), flush=True)


def sizes_for(sizes: Sequence[int], network: str, max_op_s: float, bytes_factor: float = 2.0) -> list[int]:
    """The sizes worth timing on ``network``: those one operation moves within ``max_op_s``.

    ``bytes_factor`` is how many times the size crosses the slowest link (an all-reduce
    about twice). The smallest size is always kept. On ``host`` every size is kept.
    """
    ordered = sorted(set(int(s) for s in sizes))
    preset = emulated_preset(network)
    if preset is None or not ordered:
        return ordered
    kept = [s for s in ordered if bytes_factor * s / preset.bandwidth_Bps <= max_op_s]
    return kept or ordered[:1]


@contextmanager
def network(nodes: int, name: str, latency_us: float = 0.0) -> Iterator[netns.RunNetwork | None]:
    """The benchmark's network for ``nodes`` nodes: None means plain loopback (no root).

    ``latency_us`` > 0 adds that delay to every hop of an emulated network
    (``dlscale.commbench.latency``).
    """
    preset = emulated_preset(name)
    why = netns.unavailable(shaping=preset is not None)
    if why:
        if preset is not None:
            raise BenchFailed(f"cannot emulate {name}: {why}")
        yield None
        return
    net = netns.isolated("cb") if preset is None else netns.emulated(nodes, preset, "cb")
    try:
        if latency_us > 0 and preset is not None:
            from dlscale.commbench.latency import Delay

            with Delay(net, latency_us * 1e-6):
                yield net
        else:
            yield net
    finally:
        net.close()


def address(net: netns.RunNetwork | None, node: int) -> str:
    return "127.0.0.1" if net is None else net.addresses[node % len(net.addresses)]


def interface(net: netns.RunNetwork | None) -> str:
    return "lo" if net is None else net.interface


def on_node(net: netns.RunNetwork | None, node: int) -> list[str]:
    """The argv prefix that runs a process on emulated node ``node`` (nothing without namespaces)."""
    if net is None:
        return []
    return netns.node_argv(sys.executable, node=node % len(net.namespaces))


def rank_env(net: netns.RunNetwork | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of every process: one compute thread, the namespaces, ``extra``."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
    }
    if net is not None:
        env.update(netns.node_env(net))
    env.update(extra or {})
    return env


#: After SIGTERM, how long a benchmark process gets to end before SIGKILL.
STOP_GRACE_S = 5.0


def _stop(proc: subprocess.Popen[str]) -> None:
    stop_group(proc, STOP_GRACE_S)


def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def run_processes(
    argvs: list[list[str]], env: dict[str, str], timeout_s: float, background: list[list[str]] = ()
) -> list[dict[str, Any]]:
    """Run ``argvs`` together (a collective needs them all) and return the first one's JSON rows.

    ``background`` processes (servers) start first and are stopped once the others end.
    All share one deadline; a failure or time-out stops every process by its group.
    """
    servers = [start(argv, env) for argv in background]
    procs = [start(argv, env) for argv in argvs]
    deadline = time.monotonic() + timeout_s
    outputs: list[str] = []
    try:
        for index, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                tails = []
                for other, other_argv in zip(procs, argvs, strict=True):
                    _stop(other)
                    _, err = other.communicate()
                    tails.append(
                        f"--- {' '.join(other_argv[-12:])}:\n"
                        + "\n".join((err or "").strip().splitlines()[-10:])
                    )
                raise BenchFailed(
                    f"process {index} timed out after {timeout_s:.0f} s\n" + "\n".join(tails)
                ) from None
            if proc.returncode != 0:
                tail = "\n".join(err.strip().splitlines()[-20:])
                raise BenchFailed(
                    f"process {index} exited {proc.returncode}: {' '.join(argvs[index][-12:])}\n{tail}"
                )
            outputs.append(out)
    finally:
        for proc in [*procs, *servers]:
            _stop(proc)
    return [json.loads(line) for line in outputs[0].splitlines() if line.strip().startswith("{")]


def rank_argv(
    module: str,
    args: argparse.Namespace,
    rank: int,
    world: int,
    master: str,
    iface: str,
    sizes: Sequence[int],
    models: Sequence[str] | None = None,
    role: str = "rank",
) -> list[str]:
    """One rank of ``module``'s sweep, with the driver's settings."""
    models = list(args.models if models is None else models)
    return [
        sys.executable, "-m", module, "--rank", str(rank), "--world", str(world),
        "--master", master, "--interface", iface, "--repeats", str(args.repeats),
        "--timeout-s", str(args.timeout_s), "--role", role, "--sizes", *map(str, sizes),
        *(["--models", *models] if models else []),
    ]  # fmt: skip


def per_rank_sweep(
    module: str,
    args: argparse.Namespace,
    extra_env: Callable[[str], dict[str, str]],
    bytes_factor: float = 2.0,
) -> list[dict[str, Any]]:
    """Every world of ``args``: one process per rank, rank ``k`` on node ``k``; rank 0's rows."""
    rows: list[dict[str, Any]] = []
    for world in args.worlds:
        sizes = sizes_for(args.sizes, args.network, args.max_op_s, bytes_factor)
        with network(world, args.network, args.latency_us) as net:
            master = f"{address(net, 0)}:{BASE_PORT}"
            iface = interface(net)
            argvs = [
                [*on_node(net, k), *rank_argv(module, args, k, world, master, iface, sizes)]
                for k in range(world)
            ]
            print(
                f"[commbench] {module} world {world} on {args.network}: {len(sizes)} sizes",
                file=sys.stderr,
                flush=True,
            )
            rows += run_processes(argvs, rank_env(net, extra_env(iface)), args.timeout_s)
    return rows


def write_rows(rows: list[dict[str, Any]], out: Path, **fixed: Any) -> None:
    """The CSV of ``rows`` (``RAW_COLUMNS``; ``fixed`` fills columns the rows lack), atomically."""
    cores = host_cores()

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(RAW_COLUMNS))
            writer.writeheader()
            for row in rows:
                full = {"parts": 1, "model": "", "algorithm": "default", "host_cores": cores, **fixed, **row}
                writer.writerow({name: full.get(name, "") for name in RAW_COLUMNS})

    atomic.replace_with(out, write)


def timed(op: Callable[[], Any], barrier: Callable[[], Any]) -> float:
    """Seconds of one ``op`` started right after ``barrier`` (so a late peer is not timed)."""
    barrier()
    t0 = time.perf_counter()
    op()
    return time.perf_counter() - t0


def main(
    description: str,
    rank_main: Callable[[argparse.Namespace], None],
    drive: Callable[[argparse.Namespace], list[dict[str, Any]]],
    fixed: dict[str, Any],
    argv: list[str] | None = None,
) -> int:
    """A benchmark module's entry point: a rank (``--rank``) or the driver (``--out``)."""
    args = parser(description).parse_args(argv)
    if args.rank is not None:
        rank_main(args)
        return 0
    if args.out is None:
        print("either --rank (a rank) or --out (the driver) is needed", file=sys.stderr)
        return 2
    started = time.time()
    rows = drive(args)
    write_rows(rows, args.out, network=args.network, latency_us=args.latency_us, **fixed)
    print(
        f"[commbench] {len(rows)} rows in {time.time() - started:.1f} s -> {args.out}",
        file=sys.stderr,
        flush=True,
    )
    return 0
