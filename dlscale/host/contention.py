"""Was the host busy with other work while a run was timed? (standard library only)

The study's numbers assume that nothing else runs on the cores a run uses; on a shared
machine that is not true by default (a Caffe build on the other core made a 1-node
ResNet-50 step 3.18 s instead of 2.31 s, and the 2-node run then looked superlinear).
This module measures it, so that the analysis can set such runs aside instead of
crowning them. It runs inside the launcher, in every framework's venv, so it imports
nothing beyond the standard library.

What it measures, between ``start()`` and ``stop()``:

* the CPU time the host's CPUs spent busy (``/proc/stat``: user + nice + system + irq +
  softirq; ``guest`` is already inside ``user``; idle, iowait and steal are not busy),
  counted over the CPUs the run may use (this process's affinity, e.g. a SLURM cpuset),
* minus the CPU time of the run's own processes (``own_cpu_s``: by default the
  launcher's and its reaped children's, ``RUSAGE_SELF`` + ``RUSAGE_CHILDREN``),
* as a share of the capacity of those CPUs over the interval (``cpus x wall``)::

      other_busy_share = (host_busy_delta - own_cpu_delta) / (cpus * wall)
      steal_share      = steal_delta / (cpus * wall)

``steal`` is time a hypervisor gave the CPUs to another guest: capacity the run did not
get either. A run is ``contended`` when ``other_busy_share + steal_share`` fails the
``contended_share`` threshold (``CONTENDED.fails``: above its value; the value itself passes).

Caveats for whoever wires it in: ``RUSAGE_CHILDREN`` holds only children that were
waited for (call ``stop()`` after the ranks are reaped, or pass the CPU time of the live
process tree, ``tree_cpu_s``); processes of the run that are not the launcher's
descendants (ranks that slurmstepd starts, Spark executors started by a standalone
worker daemon) count as *other* work unless their CPU time is added to ``own_cpu_s``;
and the probe sees only the host it runs on.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale import thresholds

#: A run is contended when other work (plus steal) took more than this share of the
#: capacity of the CPUs it may use (the calibration and its dated measurements:
#: docs/thresholds.md).
CONTENDED = thresholds.threshold("contended_share")

#: The busy fields of a ``/proc/stat`` cpu line (guest and guest_nice are already in user
#: and nice, so they are not added again).
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative ``/proc/stat`` counters (clock ticks) summed over a set of CPUs."""

    busy: int
    steal: int
    cpus: int


def parse_proc_stat(text: str, cpus: Iterable[int] | None = None) -> CpuTimes:
    """Sum the per-CPU lines (``cpuN ...``) of a ``/proc/stat`` text over ``cpus``.

    ``cpus`` is the set of CPU numbers to count (None: every CPU listed). Missing trailing
    fields (old kernels) count as 0. Raises ValueError when none of ``cpus`` is listed.
    """
    wanted = None if cpus is None else set(cpus)
    busy = steal = count = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        index = name[3:]
        if not index.isdigit() or (wanted is not None and int(index) not in wanted):
            continue
        values = [int(v) for v in rest.split()]
        fields = dict(zip(STAT_FIELDS, values + [0] * (len(STAT_FIELDS) - len(values)), strict=False))
        busy += sum(fields[name] for name in BUSY_FIELDS)
        steal += fields["steal"]
        count += 1
    if count == 0:
        raise ValueError(f"/proc/stat lists none of the CPUs {sorted(wanted or [])}")
    return CpuTimes(busy=busy, steal=steal, cpus=count)


def contention(
    before: CpuTimes,
    after: CpuTimes,
    own_cpu_s: float,
    wall_s: float,
    ticks_per_s: float,
    threshold: float = CONTENDED.value,
) -> dict[str, Any]:
    """The share of the CPUs' capacity that went to work other than the run.

    ``before``/``after`` are the counters at the interval's ends, ``own_cpu_s`` the run's
    own CPU seconds in it, ``wall_s`` its length, ``ticks_per_s`` the counters' unit
    (``SC_CLK_TCK``). The shares are clipped at 0 and 1: counters tick at 100 Hz while
    ``getrusage`` is exact, so a quiet interval can come out a hair below 0.
    """
    if after.cpus != before.cpus:
        raise ValueError(f"CPU count changed during the interval ({before.cpus} -> {after.cpus})")
    capacity = before.cpus * wall_s
    if capacity <= 0:
        raise ValueError(f"empty interval (wall {wall_s} s)")
    host_busy_s = (after.busy - before.busy) / ticks_per_s
    steal_s = (after.steal - before.steal) / ticks_per_s
    other = min(max((host_busy_s - own_cpu_s) / capacity, 0.0), 1.0)
    steal = min(max(steal_s / capacity, 0.0), 1.0)
    return {
        "other_busy_share": round(other, 4),
        "steal_share": round(steal, 4),
        "contended": CONTENDED.with_value(threshold).fails(other + steal),
        "cpus": before.cpus,
        "wall_s": round(wall_s, 3),
    }


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (a cpuset or ``taskset`` narrows it)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def read_cpu_times(cpus: Iterable[int] | None = None) -> CpuTimes:
    return parse_proc_stat((PROC / "stat").read_text(), cpus)


def launcher_cpu_s() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def parse_pid_stat(text: str) -> tuple[int, float]:
    """(parent pid, utime + stime in ticks) from a ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may hold spaces, so fields are
    counted from the last ``)``.
    """
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    return int(rest[1]), float(rest[11]) + float(rest[12])


def tree_cpu_s(root_pid: int, ticks_per_s: float | None = None) -> float:
    """CPU seconds of the live processes ``root_pid`` and all its descendants.

    Only what is alive now: a process that exited is in its parent's children times
    (``RUSAGE_CHILDREN`` for the launcher's own children) once it is waited for.
    """
    hz = ticks_per_s or os.sysconf("SC_CLK_TCK")
    stats = pid_stats()
    parents = {pid: parent for pid, (parent, _) in stats.items()}
    return sum(stats[pid][1] for pid in descendants(root_pid, parents)) / hz


def pid_stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU ticks) of every process alive now (``parse_pid_stat``)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stats[int(entry.name)] = parse_pid_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
    return stats


def descendants(root: int, parents: Mapping[int, int]) -> set[int]:
    """``root`` and every pid whose chain of parents reaches it."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found = {root} if root in parents else set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def children_of(parent: int) -> set[int]:
    """The PIDs whose parent is ``parent`` now."""
    return {pid for pid, (ppid, _) in pid_stats().items() if ppid == parent}


def reap_adopted(grace_s: float, poll_s: float = 0.1) -> list[int]:
    """Reap every child of this process that has ended, waiting up to ``grace_s`` for the
    live ones; the PIDs still running after it, left as they are.

    With this process a subreaper (``dlscale.base.sysutil.become_subreaper``), the daemons a
    command detached (a study's Spark supervisor and the JVMs under it) are its children
    once their parents exit, and their CPU time lands in its ``RUSAGE_CHILDREN`` when they
    are reaped: a measured command's own, not other work. Call it only when no
    ``subprocess`` of this process is running: it reaps any child.
    """
    deadline = time.monotonic() + grace_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []  # no child left
        if pid:
            continue
        if time.monotonic() >= deadline:
            return sorted(children_of(os.getpid()))
        time.sleep(poll_s)


class ContentionProbe:
    """Measure other work on this host's CPUs between ``start()`` and ``stop()``.

    ::

        probe = ContentionProbe()          # the CPUs this process may use
        probe.start()
        ... start the ranks, wait for them ...
        fields = probe.stop()              # own CPU: RUSAGE_SELF + RUSAGE_CHILDREN delta
        # or probe.stop(own_cpu_s=seconds) with the run's CPU time measured otherwise
        # -> {"other_busy_share", "steal_share", "contended", "cpus", "wall_s"}
    """

    def __init__(self, cpus: Iterable[int] | None = None, threshold: float = CONTENDED.value):
        self.cpus = sorted(cpus) if cpus is not None else allowed_cpus()
        self.threshold = threshold
        self.ticks_per_s = float(os.sysconf("SC_CLK_TCK"))
        self._start: tuple[CpuTimes, float, float] | None = None

    def start(self) -> None:
        self._start = (read_cpu_times(self.cpus), time.monotonic(), launcher_cpu_s())

    def stop(self, own_cpu_s: float | None = None, extra_cpu_s: float = 0.0) -> dict[str, Any]:
        """The contention fields for the interval since ``start()``.

        ``own_cpu_s``: the run's CPU seconds during the interval; None takes this
        process's and its reaped children's CPU time since ``start()``. ``extra_cpu_s``:
        the run's CPU spent outside this process tree (a BigDL run's executors on a
        study's shared Spark cluster, children of its workers), added to it.
        """
        if self._start is None:
            raise RuntimeError("ContentionProbe.stop() before start()")
        before, started, own_before = self._start
        after = read_cpu_times(self.cpus)
        wall = time.monotonic() - started
        own = (launcher_cpu_s() - own_before if own_cpu_s is None else float(own_cpu_s)) + extra_cpu_s
        return contention(before, after, own, wall, self.ticks_per_s, self.threshold)


BUSY_LOOP = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def measure(seconds: float = 10.0, intruders: int = 0) -> dict[str, Any]:
    """Calibrate: one busy-loop "run" for ``seconds``, beside ``intruders`` other busy loops.

    The run is a child process waited for before ``stop()`` (so its CPU time is in
    ``RUSAGE_CHILDREN``); the intruders are reaped only after ``stop()``, so their CPU
    time is other work, as a neighbour's would be.
    """
    import subprocess
    import sys

    code = BUSY_LOOP.format(seconds=seconds + 2.0)
    others = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(intruders)]
    try:
        time.sleep(0.5)  # let the intruders get going
        probe = ContentionProbe()
        probe.start()
        subprocess.run([sys.executable, "-c", BUSY_LOOP.format(seconds=seconds)], check=True)
        return probe.stop()
    finally:
        for other in others:
            other.kill()
            other.wait()


def main(argv: list[str] | None = None) -> int:
    """``python -m dlscale.host.contention [SECONDS] [REPEATS]``: print the calibration."""
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    seconds = float(args[0]) if args else 10.0
    repeats = int(args[1]) if len(args) > 1 else 1
    for repeat in range(repeats):
        for intruders in (0, 1):
            result = measure(seconds, intruders)
            print(json.dumps({"repeat": repeat, "intruders": intruders, **result}), flush=True)
    return 0


__all__ = [
    "CONTENDED",
    "ContentionProbe",
    "CpuTimes",
    "allowed_cpus",
    "children_of",
    "contention",
    "descendants",
    "launcher_cpu_s",
    "measure",
    "parse_pid_stat",
    "parse_proc_stat",
    "pid_stats",
    "read_cpu_times",
    "reap_adopted",
    "tree_cpu_s",
]


if __name__ == "__main__":
    raise SystemExit(main())
