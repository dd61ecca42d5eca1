"""Launch one training run's ranks, watch them, and write its events file.

One attempt (``run_once``): start the ranks, watch them, merge their events with the
contention the host had meanwhile. ``main`` redoes an attempt whose host was busy with
other work (at most ``--contended-retries`` times, each redone attempt kept under
``attempts/``), then records the last one. A recorded failure is a result, not a crash:
the command exits 0 with a failed record, and exits 1 only when nothing could be recorded.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlscale.base.logsetup import log_to_streams
from dlscale.host import contention
from dlscale.launch import attempts
from dlscale.launch.ranks import Launch
from dlscale.launch.records import NOT_MEASURED

log = logging.getLogger(__name__)

#: The package's loggers, and the prefix of their lines in run.log.
LOGGER = "dlscale.launch"
PREFIX = "launch"

#: The repository the run's code came from (run_start's ``git_sha``).
REPO = Path(__file__).resolve().parents[2]

#: A run whose host was busy with other work (dlscale.host.contention) is redone this many
#: times; if every attempt is contended the last is recorded as is, marked ``contended``,
#: and the analysis leaves it out of the findings with that reason. Two: a busy spell
#: from a neighbour (an apt update, another user's build) rarely outlasts three runs of a
#: few seconds to minutes, while a host that is busy all the time should not hold a study
#: forever.
CONTENDED_RETRIES = 2
#: Overrides CONTENDED_RETRIES for every run of an invocation (Snakemake passes its
#: environment to the jobs): 0 on a host known to be shared, where a study measures steps
#: to target rather than seconds and a redo would only repeat the same steps.
CONTENDED_RETRIES_VARIABLE = "DLSCALE_CONTENDED_RETRIES"


def contended_retries_default(environ: Mapping[str, str] = os.environ) -> int:
    """CONTENDED_RETRIES, or the environment's ``DLSCALE_CONTENDED_RETRIES`` (an integer >= 0)."""
    value = environ.get(CONTENDED_RETRIES_VARIABLE)
    if value is None or value == "":
        return CONTENDED_RETRIES
    if not value.isdigit():
        raise SystemExit(f"{CONTENDED_RETRIES_VARIABLE}={value!r} is not an integer >= 0")
    return int(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line the training rule gives (``run.log`` beside ``--events`` by default)."""
    parser = argparse.ArgumentParser(prog="python -m dlscale.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec-json", required=True)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--events", required=True, type=Path)
    parser.add_argument("--python", default=sys.executable, help="the framework venv's python")
    parser.add_argument("--config-sha256", default="unknown")
    parser.add_argument("--repo", default=str(REPO))
    parser.add_argument(
        "--run-log",
        default=None,
        help="the file the launcher's output goes to (default: run.log beside --events; '' for none),"
        " whose part of a failed or redone attempt is kept under attempts/",
    )
    parser.add_argument(
        "--contended-retries",
        type=int,
        default=contended_retries_default(),
        help="times a run whose host was busy with other work is redone before it is recorded as is"
        f" (default {CONTENDED_RETRIES}, or ${CONTENDED_RETRIES_VARIABLE})",
    )
    args = parser.parse_args(argv)
    if args.run_log is None:
        args.run_log = str(Path(args.events).parent / "run.log")
    return args


def run_once(args: argparse.Namespace) -> tuple[Launch, list[dict[str, Any]]]:
    """One attempt: start the ranks, watch them, merge their events (with the contention
    the host had meanwhile in run_end)."""
    launch = Launch(args)

    def on_signal(signum: int, frame: Any) -> None:
        launch.terminated_by = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    probe = contention.ContentionProbe()
    probe.start()
    try:
        launch.start()
        launch.watch()
    finally:
        launch.stop_all()
        launch.close_network()
    # After the ranks are reaped: their CPU time is the launcher's children's. Not under
    # SLURM: there the ranks are slurmstepd's children on every node, not the launcher's,
    # and the allocation's cores are the job's own (the cluster's business, not ours).
    events = launch.merge()
    # A rank's CPU outside the launcher's tree (a BigDL run's executors on a shared Spark
    # cluster), which the rank measured itself: the run's own work, not other work.
    outside = events[0].get("measured", {}).get("cpu_outside_launcher_s", 0.0)
    extra = float(outside) if isinstance(outside, (int, float)) else 0.0
    measured = probe.stop(extra_cpu_s=extra) if launch.mode == "local" else NOT_MEASURED
    events[-1]["contention"] = measured
    return launch, events


def main(argv: list[str] | None = None) -> int:
    """Run, redo while contended, record; 0 once the run is recorded (ok or failed)."""
    args = parse_args(argv)
    log_to_streams(LOGGER, PREFIX)
    run_dir = Path(args.events).parent
    # The training rule sends the launcher's output (and the ranks') to run.log beside
    # the events; --run-log names another file, "" none.
    run_log = Path(args.run_log) if args.run_log else None
    for attempt in range(args.contended_retries + 1):
        log_from = attempts.log_size(run_log)
        launch, events = run_once(args)
        run_end = events[-1]
        busy = run_end["contention"]
        if run_end["status"] != "ok" or not busy.get("contended") or launch.terminated_by:
            break
        if attempt == args.contended_retries:
            log.warning("contended in every one of %d attempts: recorded as contended", attempt + 1)
            break
        log.info(
            "host busy with other work during the run (other work %.0f%%, steal %.0f%% of %s CPU(s)):"
            " redoing it (attempt %d of at most %d)",
            busy["other_busy_share"] * 100,
            busy["steal_share"] * 100,
            busy["cpus"],
            attempt + 2,
            args.contended_retries + 1,
        )
        attempts.keep_redone(run_dir, events, launch.work_dir, run_log, log_from)
    try:
        run_end, failed = attempts.record(launch.events_path, events)
    except OSError as err:
        # Nothing half-written is left (atomic writes); the job fails so Snakemake redoes it.
        log.error("cannot record the run in %s: %s", launch.events_path.parent, err)
        return 1
    if failed:
        log.error("run recorded as FAILED: %s", run_end["reason"])
        attempts.keep_attempt_logs(run_dir, failed, launch.work_dir, run_log, log_from)
    else:
        shutil.rmtree(launch.work_dir, ignore_errors=True)
        log.info("ok: %s (%.1f s)", launch.events_path, run_end["wall_s"])
    # A recorded failure (signals included) is a result, not a crash: the job succeeds
    # with a failed record, and its attempt count makes the next invocation redo it.
    return 0
