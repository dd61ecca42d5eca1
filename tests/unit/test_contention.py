"""dlscale.host.contention: the arithmetic on synthetic /proc/stat snapshots, and the probe's API."""

from __future__ import annotations

import pytest

from dlscale.host import contention

HZ = 100.0

# user nice system idle iowait irq softirq steal guest guest_nice
BEFORE = """cpu  3000 0 600 9000 50 0 20 10 0 0
cpu0 1000 0 200 4000 20 0 10 5 0 0
cpu1 2000 0 400 5000 30 0 10 5 0 0
intr 12345 0 0
ctxt 999
"""
# 10 s later on 2 CPUs (2000 ticks of capacity): cpu0 busy 900 ticks (user 800, system 80,
# softirq 20) with 10 ticks stolen, cpu1 busy 1000 ticks (user 1000); guest 500 ticks are
# already inside user and must not be added again.
AFTER = """cpu  4800 0 680 9050 60 0 40 20 500 0
cpu0 1800 0 280 4050 30 0 30 15 0 0
cpu1 3000 0 400 5000 30 0 10 5 500 0
intr 22345 0 0
"""


def test_parse_sums_the_busy_fields_of_the_cpus_asked() -> None:
    both = contention.parse_proc_stat(BEFORE)
    assert both == contention.CpuTimes(busy=1000 + 200 + 10 + 2000 + 400 + 10, steal=10, cpus=2)
    only_cpu1 = contention.parse_proc_stat(BEFORE, cpus=[1])
    assert only_cpu1 == contention.CpuTimes(busy=2410, steal=5, cpus=1)
    old_kernel = contention.parse_proc_stat("cpu0 10 1 2 30\n")  # fields after idle missing
    assert old_kernel == contention.CpuTimes(busy=13, steal=0, cpus=1)
    with pytest.raises(ValueError, match="none of the CPUs"):
        contention.parse_proc_stat(BEFORE, cpus=[7])


def test_other_busy_share_subtracts_the_runs_own_cpu() -> None:
    before, after = contention.parse_proc_stat(BEFORE), contention.parse_proc_stat(AFTER)
    assert after.busy - before.busy == 1900
    # the run itself used 10 s of CPU: the other 9 s of busy time were someone else's,
    # out of 2 CPUs x 10 s = 20 s of capacity -> 0.45; steal 10 ticks = 0.1 s -> 0.005
    result = contention.contention(before, after, own_cpu_s=10.0, wall_s=10.0, ticks_per_s=HZ)
    assert result == {
        "other_busy_share": pytest.approx(0.45),
        "steal_share": pytest.approx(0.005),
        "contended": True,
        "cpus": 2,
        "wall_s": 10.0,
    }
    # the run used all of it: nothing else ran (a tick-rounding excess is clipped at 0)
    quiet = contention.contention(before, after, own_cpu_s=19.2, wall_s=10.0, ticks_per_s=HZ)
    assert quiet["other_busy_share"] == 0.0 and not quiet["contended"]


def test_the_threshold_counts_steal_as_capacity_lost() -> None:
    before = contention.CpuTimes(busy=0, steal=0, cpus=2)
    just_below = contention.CpuTimes(busy=1000 + 300, steal=0, cpus=2)  # other 3 s of 20 s
    assert not contention.contention(before, just_below, 10.0, 10.0, HZ)["contended"]  # 0.15
    stolen = contention.CpuTimes(busy=1000 + 300, steal=100, cpus=2)  # + 1 s stolen: 0.2, the value itself
    assert not contention.contention(before, stolen, 10.0, 10.0, HZ)[
        "contended"
    ]  # the band includes its bound
    more = contention.CpuTimes(busy=1000 + 300, steal=101, cpus=2)  # 0.2005: above it
    assert contention.contention(before, more, 10.0, 10.0, HZ)["contended"]
    assert contention.contention(before, just_below, 10.0, 10.0, HZ, threshold=0.1)["contended"]


def test_contention_refuses_nonsense_intervals() -> None:
    two, one = contention.CpuTimes(0, 0, 2), contention.CpuTimes(0, 0, 1)
    with pytest.raises(ValueError, match="CPU count changed"):
        contention.contention(two, one, 0.0, 1.0, HZ)
    with pytest.raises(ValueError, match="empty interval"):
        contention.contention(two, two, 0.0, 0.0, HZ)


def test_pid_stat_with_spaces_in_the_command_name() -> None:
    line = "4242 (python -m dlscale) R 4200 4242 4242 0 -1 4194304 1 0 0 0 150 25 3 1 20 0 1 0 1 0 0"
    assert contention.parse_pid_stat(line) == (4200, 175.0)


def test_descendants_follow_the_parent_chain() -> None:
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
    assert contention.descendants(10, parents) == {10, 11, 12, 13}
    assert contention.descendants(99, parents) == set()


def test_the_probe_reports_the_contract_fields() -> None:
    probe = contention.ContentionProbe()
    assert probe.cpus == contention.allowed_cpus()
    with pytest.raises(RuntimeError, match="before start"):
        probe.stop()
    probe.start()
    result = probe.stop(own_cpu_s=0.0)
    assert set(result) == {"other_busy_share", "steal_share", "contended", "cpus", "wall_s"}
    assert result["cpus"] == len(probe.cpus)
    assert 0.0 <= result["other_busy_share"] <= 1.0 and 0.0 <= result["steal_share"] <= 1.0
    assert isinstance(result["contended"], bool)
    assert contention.tree_cpu_s(1) >= 0.0
