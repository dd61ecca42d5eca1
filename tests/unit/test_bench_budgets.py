"""The budgets benchmark's verdicts (benchmarks/budgets.py): pure parts, on hand-made tables."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest

from benchmarks import budgets
from dlscale.thresholds import threshold


def split(share: float | None) -> pd.DataFrame:
    rows = [{"framework": "torch", "timed_share": 0.9}]
    if share is not None:
        rows.append({"framework": "all", "timed_share": share})
    return pd.DataFrame.from_records(rows)


def verdict_of(table: pd.DataFrame, name: str) -> str:
    return table.set_index("budget").loc[name, "verdict"]


def test_a_demo_within_both_budgets_passes_them():
    wall = threshold("demo_warm_wall").value
    table = budgets.verdicts(wall, split(threshold("demo_timed_share").value))
    assert list(table["budget"]) == list(budgets.BUDGETS)
    assert set(table["verdict"]) == {"pass"}  # the bounds themselves pass, as every threshold's


@pytest.mark.parametrize(
    ("wall", "share", "missed"),
    [(601.0, 0.6, "demo_warm_wall"), (500.0, 0.184, "demo_timed_share")],
)
def test_each_budget_is_missed_on_its_own(wall, share, missed):
    table = budgets.verdicts(wall, split(share))
    assert verdict_of(table, missed) == "miss"
    assert (table["verdict"] == "miss").sum() == 1


def test_the_share_is_the_studys_not_a_frameworks():
    table = budgets.verdicts(100.0, split(0.2))
    assert table.set_index("budget").loc["demo_timed_share", "measured"] == 0.2  # not torch's 0.9


def test_no_all_row_is_unknown_not_a_pass():
    table = budgets.verdicts(100.0, split(None))
    assert math.isnan(table.set_index("budget").loc["demo_timed_share", "measured"])
    assert verdict_of(table, "demo_timed_share") == "unknown"


def test_the_demo_is_make_demos_study_in_its_own_folder(tmp_path):
    command = budgets.demo_command(tmp_path, tmp_path / "snakemake")
    assert command[command.index("--directory") + 1] == str(tmp_path)
    assert command[command.index("--configfile") + 1].endswith("config.yaml")
    assert command[command.index("--profile") + 1].endswith("profiles/local")
    assert "--cores" not in command  # the profile's, as make demo
    assert any(part.startswith("envs_dir=") for part in command)


def test_the_newest_log_is_the_invocations(tmp_path):
    folder = tmp_path / ".snakemake" / "log"
    folder.mkdir(parents=True)
    old, new = folder / "a.snakemake.log", folder / "b.snakemake.log"
    old.write_text("old")
    new.write_text("new")
    os.utime(old, (1, 1))
    assert budgets.invocation_log(tmp_path) == new
    with pytest.raises(FileNotFoundError, match="no Snakemake log"):
        budgets.invocation_log(tmp_path / "nothing")


def test_markdown_holds_every_table():
    table = budgets.verdicts(700.0, split(0.3))
    text = budgets.markdown(table, pd.DataFrame({"rule": ["runs"], "busy_s": [1.0]}), split(0.3), "info")
    assert "demo_warm_wall" in text and "| runs" in text and "info" in text


def test_a_miss_beside_contended_runs_says_so():
    """A budget missed while the contention probe flagged runs is not the demo's alone; a
    budget kept beside them is still kept (a neighbour only makes a demo slower)."""
    runs = pd.DataFrame({"contended": [True, False, "True", "false"]})
    assert budgets.contended_runs(runs) == 2
    assert budgets.contended_runs(pd.DataFrame({"status": ["ok"]})) == 0
    table = budgets.verdicts(700.0, split(0.6), contended=2)
    assert verdict_of(table, "demo_warm_wall") == "miss (contended)"
    assert verdict_of(table, "demo_timed_share") == "pass"
    assert set(table["contended_runs"]) == {2}


def samples_of(*walls: float, share: float = 0.6, contended: int = 0) -> list[budgets.Sample]:
    return [budgets.Sample(wall, share, contended) for wall in walls]


def test_demos_as_samples_give_the_median_and_its_interval():
    table = budgets.summary(samples_of(579.0, 596.0, 640.0)).set_index("budget").loc["demo_warm_wall"]
    assert (table["samples"], table["measured"], table["low"], table["high"]) == (3, 596.0, 579.0, 640.0)
    assert table["interval"] == "range (low-n)"
    one = budgets.summary(samples_of(579.0)).set_index("budget").loc["demo_warm_wall"]
    assert one["interval"] == "single run" and math.isnan(one["low"]) and one["verdict"] == "pass"


@pytest.mark.parametrize(
    ("walls", "expected"),
    [
        ((579.0, 596.0), "pass"),  # the whole interval keeps the budget
        ((579.0, 627.0), "undecided"),  # it straddles the reference: the samples cannot say
        ((627.0, 659.0), "miss"),  # none of it keeps the budget
    ],
)
def test_the_interval_decides_a_budget_of_several_demos(walls, expected):
    assert verdict_of(budgets.summary(samples_of(*walls)), "demo_warm_wall") == expected


def test_a_higher_is_better_budget_reads_its_interval_the_other_way():
    share = threshold("demo_timed_share").value
    table = budgets.summary([budgets.Sample(500.0, share - 0.1, 0), budgets.Sample(500.0, share + 0.1, 0)])
    assert verdict_of(table, "demo_timed_share") == "undecided"
    table = budgets.summary([budgets.Sample(500.0, share, 0), budgets.Sample(500.0, share + 0.1, 0)])
    assert verdict_of(table, "demo_timed_share") == "pass"


def test_contention_marks_a_miss_or_undecided_but_not_a_pass():
    assert verdict_of(budgets.summary(samples_of(627.0, 659.0, contended=2)), "demo_warm_wall") == (
        "miss (contended)"
    )
    assert verdict_of(budgets.summary(samples_of(579.0, 627.0, contended=1)), "demo_warm_wall") == (
        "undecided (contended)"
    )
    assert verdict_of(budgets.summary(samples_of(579.0, 596.0, contended=1)), "demo_warm_wall") == "pass"


def test_the_report_says_how_many_demos_and_lists_each():
    table = budgets.summary(samples_of(579.0, 596.0))
    assert budgets.describe_samples(table).startswith("2 demos")
    assert (
        budgets.describe_samples(budgets.summary(samples_of(579.0))) == "One demo, one sample: no interval."
    )
    demos = pd.DataFrame({"demo": [1, 2], "wall_s": [579.0, 596.0]})
    text = budgets.markdown(table, pd.DataFrame({"rule": ["runs"]}), split(0.3), "info", demos)
    assert "## The demos" in text and "596.000" in text


def test_at_least_one_demo():
    with pytest.raises(SystemExit):
        budgets.parse_args(["--repeats", "0"])
    assert budgets.parse_args([]).repeats == 1


#: A command that detaches a daemon and exits at once, as a study detaches its Spark
#: supervisor: the daemon burns ``cpu_s`` of CPU time (its own clock, not the wall) and ends.
DETACHING = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while time.process_time() < {cpu_s}:
            pass
    os._exit(0)
os.wait()
"""

#: A command that detaches a daemon that sleeps a minute, its stdio let go of (a daemon
#: holding the pipes would hold up their reader).
LINGERING = """
import os, time
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(60)
os._exit(0)
"""

#: run_invocation in a process of its own: it makes its process a subreaper, which the
#: test session's must not become. Arguments: the command (JSON) and the grace (s).
MEASURE = """
import dataclasses, json, sys
from pathlib import Path
from benchmarks.budgets import run_invocation
measured = run_invocation(json.loads(sys.argv[1]), Path.cwd(), grace_s=float(sys.argv[2]))
print(json.dumps(dataclasses.asdict(measured)))
"""


def invocation(command: list[str], grace_s: float = 30.0, **popen) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps(command), str(grace_s)],
        capture_output=True, text=True, timeout=120, **popen,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_cpu_of_a_daemon_the_command_detached_is_the_commands():
    measured = invocation([sys.executable, "-c", DETACHING.format(cpu_s=0.6)])
    assert measured["status"] == 0 and measured["left_running"] == []
    # The daemon's 0.6 s is counted as the command's own. Reparented to init instead (no
    # subreaper), it would be nobody's child and read as a neighbour's work.
    assert measured["own_cpu_s"] >= 0.6


def test_a_daemon_still_running_after_the_grace_is_named_not_killed():
    left = invocation([sys.executable, "-c", LINGERING], grace_s=0.5)["left_running"]
    assert len(left) == 1
    try:
        os.kill(left[0], 0)  # still there: reported, not killed
    finally:
        os.kill(left[0], signal.SIGKILL)


def test_a_neighbour_during_the_invocation_makes_it_contended():
    cpu = min(os.sched_getaffinity(0))

    def on_one_cpu() -> None:
        os.sched_setaffinity(0, {cpu})

    # A busy neighbour on the one CPU the measured command may use, for all of the command.
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=on_one_cpu)
    try:
        measured = invocation([sys.executable, "-c", "import time; time.sleep(2)"], preexec_fn=on_one_cpu)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert measured["other_share"] > 0.5 and measured["contended"] is True


def test_a_contended_invocation_marks_a_miss_even_with_no_contended_run():
    samples = [budgets.Sample(700.0, 0.2, 0, invocation_contended=True), budgets.Sample(710.0, 0.2)]
    table = budgets.summary(samples).set_index("budget")
    assert table.loc["demo_warm_wall", "verdict"] == "miss (contended)"
    assert table.loc["demo_warm_wall", "contended_demos"] == 1
    assert table.loc["demo_warm_wall", "contended_runs"] == 0
