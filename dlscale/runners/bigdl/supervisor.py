"""The supervisor of a study's shared Spark cluster (``python -m dlscale.runners.bigdl.supervisor``).

Started detached (a session of its own) by the first BigDL run of a cluster key
(``shared_cluster.SharedCluster``): it starts the master and the workers
(``spark.SparkCluster``, in the environment of that run, whose engine variables are part of
the key; under SLURM, ``--mode slurm``, the master on this first node of the allocation and
the workers by one ``srun --overlap`` step), writes the lease, and then holds the daemons (each dies with it:
``PR_SET_PDEATHSIG``) until one of these, checked every ``POLL_S``:

- the owner (Snakemake, by PID and start time) is gone, for any reason, SIGKILL included;
- no run has held the cluster (``busy.lock``) for ``IDLE_S``;
- a daemon died (the lease would be stale: the next run starts a new cluster);
- SIGTERM or SIGINT.

Then it removes the lease and stops the daemons as a per-run cluster is stopped (SIGTERM,
grace, SIGKILL of each process group). Its log is ``<instance>/supervisor.log``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from dlscale.base import atomic
from dlscale.runners.bigdl.shared_cluster import (
    IDLE_S,
    POLL_S,
    Lease,
    read_lease,
    start_time,
    write_secret,
)
from dlscale.runners.bigdl.spark import ClusterShape, SparkCluster


class Stopped(Exception):
    """SIGTERM or SIGINT arrived."""


def _on_signal(signum: int, frame: Any) -> None:
    raise Stopped(signal.Signals(signum).name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lease", required=True, type=Path)
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--key", required=True)
    parser.add_argument("--spark-home", required=True, type=Path)
    parser.add_argument("--shape", required=True, help="ClusterShape as JSON")
    parser.add_argument("--owner", required=True, help="PID:START of the process that owns the cluster")
    parser.add_argument("--startup-timeout-s", type=float, default=120.0)
    parser.add_argument("--idle-s", type=float, default=IDLE_S)
    parser.add_argument("--mode", choices=("local", "slurm"), default="local")
    return parser.parse_args(argv)


def why_stop(
    owner: tuple[int, int], cluster: SparkCluster, idle_s: float | None, limit_s: float
) -> str | None:
    """The reason to stop now, or None."""
    if start_time(owner[0]) != owner[1]:
        return f"its owner (pid {owner[0]}) is gone"
    for daemon in cluster.daemons:
        if daemon.proc.poll() is not None:
            return f"the Spark {daemon.label} (pid {daemon.pid}) exited ({daemon.proc.returncode})"
    if idle_s is not None and idle_s >= limit_s:
        return f"no run used it for {idle_s:.0f} s"
    return None


def idle_now(key_lock: Path, busy_lock: Path) -> tuple[bool, Any]:
    """Whether no run holds or is looking up the cluster; if so, the two locks stay held
    (returned) so that the lease can go before a run finds it."""
    held = []
    for path in (key_lock, busy_lock):
        handle = open(path, "a")  # noqa: SIM115 - closed below or by the caller
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            for other in held:
                other.close()
            return False, []
        held.append(handle)
    return True, held


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    owner_pid, owner_start = (int(part) for part in args.owner.split(":"))
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    cluster = SparkCluster(
        spark_home=args.spark_home,
        root=args.root,
        shape=ClusterShape(**json.loads(args.shape)),
        startup_timeout_s=args.startup_timeout_s,
        mode=args.mode,
        shared_step=args.mode == "slurm",
    )
    busy_lock = args.root / "busy.lock"
    key_lock = args.lease.with_name("lock")
    reason = "it failed"
    lease: Lease | None = None
    try:
        cluster.start()
        secret_file = args.root / "secret"
        write_secret(secret_file, cluster.secret)
        busy_lock.touch()
        me = os.getpid()
        processes = {"supervisor": (me, start_time(me) or 0)}
        processes.update({d.label: (d.pid, start_time(d.pid) or 0) for d in cluster.daemons})
        lease = Lease(
            key=args.key,
            master_url=str(cluster.master_url),
            root=str(args.root),
            secret_file=str(secret_file),
            processes=processes,
            owner=(owner_pid, owner_start),
            startup_s=float(cluster.startup_s or 0.0),
        )
        atomic.write_text(args.lease, lease.to_json())
        print(f"[supervisor] cluster up: {lease.master_url}, daemons {cluster.pids}", flush=True)
        idle_since: float | None = None
        while True:
            time.sleep(POLL_S)
            idle, held = idle_now(key_lock, busy_lock)
            now = time.monotonic()
            idle_since = (idle_since or now) if idle else None
            found = why_stop(
                (owner_pid, owner_start), cluster, now - idle_since if idle_since else None, args.idle_s
            )
            if found is None:
                for handle in held:
                    handle.close()
                continue
            reason = found
            _remove_lease(args.lease, lease)  # under the key lock when idle: no run finds it now
            for handle in held:
                handle.close()
            break
    except Stopped as sig:
        reason = f"{sig}"
    except Exception as err:  # noqa: BLE001 - said in the log; the daemons still stop
        reason = f"{type(err).__name__}: {err}"
        print(f"[supervisor] {reason}", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if lease is not None:
            _remove_lease(args.lease, lease)
        print(f"[supervisor] stopping the cluster: {reason}", flush=True)
        cluster.stop()
        print(f"[supervisor] daemons stopped: pids {cluster.pids}", flush=True)
    return 0


def _remove_lease(path: Path, lease: Lease) -> None:
    """Remove the lease if it is still this cluster's (a run may have replaced a stale one)."""
    try:
        if read_lease(path) == lease:
            path.unlink()
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
