"""A peak you can trust (issue 32, item 5): the matmul peak is measured under the contention
probe, a contended sample is redone and then its thread count refused (recorded, not
fatal: dlscale.host.roofline's docstring), and a roofline fraction above 1 or over a refused
peak is flagged in the runs table (dlscale.analysis.tables.add_roofline)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator

import pandas as pd
import pytest
from helpers.paths import REPO

from dlscale.analysis.tables import add_roofline
from dlscale.host import contention, roofline
from dlscale.thresholds import threshold


def _sampler(results: list[tuple[float, float]]) -> tuple[list[int], object]:
    """A sample function answering (peak, other_busy_share) in turn; the calls are logged."""
    calls: list[int] = []
    queue: Iterator[tuple[float, float]] = iter(results)

    def sample(count: int) -> dict[str, object]:
        calls.append(count)
        flops, share = next(queue)
        return {
            "peak_flops": flops,
            "other_busy_share": share,
            "steal_share": 0.0,
            "contended": contention.CONTENDED.fails(share),
        }

    return calls, sample


def test_a_contended_sample_is_redone_and_the_clean_attempt_counts() -> None:
    calls, sample = _sampler([(1.0e9, 0.5), (4.0e10, 0.02), (4.2e10, 0.0), (3.9e10, 0.01)])
    record = roofline.measure([1], rounds=3, attempts=3, sample=sample)
    assert calls == [1, 1, 1, 1]  # round 0 twice (contended, then clean), rounds 1 and 2 once
    assert record["rounds"] == {"1": [4.0e10, 4.2e10, 3.9e10]}  # the slow contended one is not there
    assert record["peak_flops"] == {"1": 4.0e10}
    assert record["refused"] == {}
    assert [a["contended"] for a in record["attempts"]] == [True, False, False, False]


def test_a_sample_contended_in_every_attempt_refuses_its_thread_count() -> None:
    # 2 threads: clean; 1 thread: contended 3 times in round 0, then never measured again.
    calls, sample = _sampler([(1e9, 0.45), (1e9, 0.5), (1e9, 0.31), (8e10, 0.0), (8.1e10, 0.0)])
    record = roofline.measure([1, 2], rounds=2, attempts=3, sample=sample)
    assert calls == [1, 1, 1, 2, 2]
    assert record["peak_flops"] == {"2": pytest.approx(8.05e10)}
    assert record["refused"]["1"] == (
        "contended: other work took 45%, 50%, 31% of the CPUs in 3 attempt(s) at 1 thread(s) (contended from 20%)"
    )
    assert math.isnan(roofline.peak_of(record, 1))
    assert roofline.refusal_of(record, 1) == record["refused"]["1"]
    assert roofline.refusal_of(record, 2) is None


def test_a_peak_measured_beside_a_busy_loop_on_its_cpu_is_refused(tmp_path) -> None:
    """For real: ``python -m dlscale.host.roofline peak`` and a busy-loop process pinned to the same
    CPU; every attempt is contended, so no peak is written for that count and a run at it
    gets no fraction, with the reason in its flag."""
    cpu = min(os.sched_getaffinity(0))
    pin = lambda: os.sched_setaffinity(0, {cpu})  # noqa: E731
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)
    try:
        out = tmp_path / "matmul_peak.json"
        proc = subprocess.run(
            [sys.executable, "-m", "dlscale.host.roofline", "peak", "--cores", "1", "--threads-per-rank", "1"]
            + ["--rounds", "1", "--attempts", "2", "--out", str(out)],
            cwd=REPO,
            preexec_fn=pin,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        loop.kill()
        loop.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]  # refused means recorded, not failed
    record = json.loads(out.read_text())
    assert len(record["attempts"]) == 2  # redone once, then refused
    assert all(a["contended"] and a["other_busy_share"] >= 0.2 for a in record["attempts"])
    assert record["attempts"][0]["peak_flops"] > 0
    assert record["peak_flops"] == {}
    assert "1" in record["refused"] and "in 2 attempt(s) at 1 thread(s)" in record["refused"]["1"]
    assert "matmul peak at 1 thread(s) refused: contended" in proc.stderr
    runs = _runs(throughput=[1000.0], threads=[1])
    got = add_roofline(runs, roofline.read_peak(out))
    assert math.isnan(got["peak_flops"][0]) and math.isnan(got["roofline_fraction"][0])
    assert got["flag"][0].startswith(
        "roofline: no fraction, the matmul peak at 1 thread(s) was refused (contended"
    )


def _runs(throughput: list[float], threads: list[int], flag: list[object] | None = None) -> pd.DataFrame:
    n = len(throughput)
    return pd.DataFrame(
        {
            "model": ["lenet"] * n,
            "threads_per_rank": threads,
            "world_size": [1] * n,
            "throughput": throughput,
            "flops_per_sample": [roofline.flops_per_sample("lenet")] * n,
        }
    ).assign(flag=pd.Series(flag if flag is not None else [None] * n, dtype=object))


def test_a_fraction_above_one_is_flagged_and_one_below_is_not() -> None:
    flops = roofline.flops_per_sample("lenet")
    peak = {"peak_flops": {"1": 1000.0 * flops / 2.13, "2": 1000.0 * flops / 0.5}}
    runs = _runs(
        [1000.0, 1000.0, math.nan],
        [1, 2, 1],
        ["contended: other work took 50% of the host's CPUs", None, None],
    )
    out = add_roofline(runs, peak)
    assert (
        out["roofline_fraction"][0] == pytest.approx(2.13)
        and out["roofline_fraction"][0] > threshold("roofline_fraction").value
    )
    assert out["flag"][0] == (
        "contended: other work took 50% of the host's CPUs; roofline: fraction 2.13 of the matmul peak at 1"
        " thread(s), above 1: the peak was measured slow (a busy host?) or the FLOP count is wrong"
    )
    assert out["flag"][1] is None  # 0.5 of the peak
    assert out["flag"][2] is None  # a failed run (no throughput): nothing to say
    again = add_roofline(out, {"peak_flops": {"1": 1000.0 * flops / 0.9}})  # replaced, not appended
    assert again["flag"][0] == "contended: other work took 50% of the host's CPUs"


def test_no_peak_leaves_the_flags_alone() -> None:
    runs = _runs([1000.0, 5.0], [1, 1], [None, "fixed overhead: x"])
    out = add_roofline(runs.copy(), None)
    assert out["flag"].tolist() == [None, "fixed overhead: x"]
    assert roofline.flag_of(math.nan, 1, None) is None


def test_a_roofline_flag_alone_does_not_mark_a_point_in_the_scaling_figures() -> None:
    from dlscale.figures.charts import _questions_speed

    flags = pd.Series(
        [
            None,
            "roofline: fraction 2.13 ...",
            "contended: x; roofline: fraction 2.13 ...",
            "fixed overhead: y",
        ],
        dtype=object,
    )
    assert _questions_speed(flags).tolist() == [False, False, True, True]
