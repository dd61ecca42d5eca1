"""Failure wording: a reason a person understands, from how a run's processes ended and
what each rank last recorded in its part file ("rank 1 died (SIGKILL) at iteration 37").

Pure functions of exit codes and part-file events, so that every wording is unit-tested
without starting a rank. The cause comes before its consequences: a rank that died
without ending itself is named before ranks that the launcher then tore down.
"""

from __future__ import annotations

from typing import Any

from dlscale.runners.plan import Plan, SrunTaskError, signal_name


def finished_ok(events: list[dict[str, Any]]) -> bool:
    """Whether a rank recorded its own successful end (all its iterations are on disk)."""
    return any(e.get("event") == "rank_end" and e.get("status") == "ok" for e in events)


def exit_after_end(
    label: str,
    rank: int | None,
    returncode: int,
    parts: dict[int, list[dict[str, Any]]],
    reporting_ranks: int,
) -> str | None:
    """The run's warning for a process that exited badly once what it speaks for had all
    recorded a successful end, or None when its exit is the run's failure.

    The measurement is whole then; what failed is the framework's way out (gloo's teardown
    aborted after ``rank_end``, docs/teardown.md). A rank's own process: its part ended ok.
    A process for many ranks (srun, mpirun): every rank's part ended ok, which is also what
    srun's exit looks like when one task aborts on its way out and srun then ends the others.
    """
    if rank is not None:
        return (
            f"{label} finished, then exited with {returncode}" if finished_ok(parts.get(rank, [])) else None
        )
    if parts and len(parts) >= reporting_ranks and all(finished_ok(events) for events in parts.values()):
        return f"{label} exited with {returncode} after every rank had recorded its end"
    return None


def where_it_stopped(events: list[dict[str, Any]]) -> str:
    """ "at iteration N" (the one a rank was in when it stopped) or "before its first iteration"."""
    iterations = [e["iteration"] for e in events if e.get("event") == "iteration"]
    return f"at iteration {iterations[-1] + 1}" if iterations else "before its first iteration"


def describe_failure(label: str, returncode: int, events: list[dict[str, Any]]) -> str:
    """A reason a person understands, from how a rank ended and what it last recorded."""
    for event in reversed(events):
        if event.get("event") == "rank_end" and event.get("status") == "failed" and event.get("reason"):
            return str(event["reason"])
    where = where_it_stopped(events)
    if returncode < 0:
        return f"{label} died ({signal_name(returncode)}) {where}"
    return f"{label} exited with status {returncode} {where}"


def startup_failure(startup_s: float, parts: dict[int, list[dict[str, Any]]], plan: Plan | None) -> str:
    """Why no rank completed a first step in time: what each rank last logged."""
    ranks = sorted(set(range(plan.reporting_ranks if plan else 1)) | set(parts))
    last = []
    for rank in ranks:
        events = parts.get(rank, [])
        last.append(f"rank {rank}: {events[-1].get('event') if events else 'nothing'}")
    return (
        f"no rank completed a first step within {startup_s} s (start-up timeout; peers unreachable?):"
        f" last logged {', '.join(last)}"
    )


def describe_group_failure(
    label: str,
    returncode: int,
    parts: dict[int, list[dict[str, Any]]],
    first_error: SrunTaskError | None = None,
) -> str:
    """Why a process that stands for many ranks (srun, mpirun) failed, from their parts.

    A rank with no end of its own died first (killed, crashed); a rank that recorded a
    failure other than being terminated comes next; ranks the launcher tore down after a
    peer died only say "terminated", which is the consequence, not the cause. When the step
    ends every rank with SIGKILL, several ranks leave no end: then srun's first report of a
    task (``first_error``, which srun prints for the task that failed first, before it
    ends the others) names the rank.
    """
    code = f"{label} exited with {signal_name(returncode) if returncode < 0 else returncode}"
    if not parts:
        return f"{code} before any rank started"
    if first_error is not None:
        rank, said = first_error.task, str(first_error)
        ends = [e for e in parts.get(rank, []) if e.get("event") == "rank_end"]
        if ends and ends[-1].get("status") == "failed" and "SIGTERM" not in str(ends[-1].get("reason")):
            return str(ends[-1].get("reason"))
        if not ends:
            where = where_it_stopped(parts.get(rank, []))
            return f"rank {rank} died {where} (srun: {said}; {code})"
    silent, failed = [], []
    for rank, events in sorted(parts.items()):
        ends = [e for e in events if e.get("event") == "rank_end"]
        if not ends:
            silent.append(rank)
        elif ends[-1].get("status") == "failed" and "SIGTERM" not in str(ends[-1].get("reason")):
            failed.append((rank, str(ends[-1].get("reason"))))
    # A rank's death recorded by what outlived its process (TensorFlow ps mode under SLURM:
    # the task's agent saw its worker server killed) is the cause; a rank that the step's
    # end then killed before it could write its own end is the consequence.
    for rank, reason in failed:
        if reason.startswith(f"rank {rank} died"):
            return reason
    if silent:
        rank = silent[0]
        where = where_it_stopped(parts[rank])
        return f"rank {rank} died {where} ({code})"
    if failed:
        return failed[0][1]
    return code
