"""Parser cost against log size: ``python -m benchmarks.parse_scale [--mb 200] [--repeats 3]``.

A long run's native log can be hundreds of MB; the parsers (``dlscale.parse``) must stream
it: memory flat in the log's size, time linear in it. This writes a BigDL driver log and a
Caffe solver log of about ``--mb`` MB each (a real log's lines, see tests/data/, with
iteration numbers and clocks moving forward so that every line is valid), and times
``python -m dlscale.parse <name> LOG`` on each, each size and parser in turn, ``--repeats``
times: wall time and the child's peak resident memory (``getrusage`` of the child: the
kernel's maxrss, what ``/usr/bin/time -v`` reports). A 1 MB log beside it shows the slope.

The parsers run as children (``python -m``), so what this process imports is not in their
figures; the interval over repeats is the benchmarks' one (``benchmarks.stats``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.stats import summarize

REPO = Path(__file__).resolve().parent.parent
BIGDL_SAMPLE = REPO / "tests" / "data" / "bigdl" / "full-pattern.log"

BIGDL_ITERATION = (
    "{stamp} INFO DistriOptimizer$: [Epoch 1 {seen}/{total}][Iteration {it}][Wall Clock {wall:.9f}s]"
    " Trained 128.0 records in {step:.9f} seconds. Throughput is {rate:.5f} records/second."
    " Loss is {loss:.7f}. Sequential61e60a's hyper parameters: Current learning rate is 0.01."
    " Current momentum is 0.9.  \n"
)
BIGDL_METRICS = (
    "{stamp} DEBUG DistriOptimizer$: \n"
    "========== Metrics Summary ==========\n"
    "get weights average : 0.0124783915 s\n"
    "computing time average : 0.0466987415 s\n"
    "send weights average : 4.451E-6 s\n"
    "put gradient : 0.0082308205 s\n"
    "aggregate gradient time : 0.0 s\n"
    "aggregrateGradientParition average executor : 0.0108339160 s\n"
    "compute weight average : 3.46E-6 s\n"
    "get weights for each node :  \n"
    "computing time for each node :  \n"
    "=====================================\n"
    "{stamp} DEBUG DistriOptimizer$: Dropped modules: 0\n"
)
CAFFE_HEADER = (
    "I20261129 20:08:08.937196 10425 solver.cpp:51] Initializing solver from parameters: \n"
    'base_lr: 0.01\ndisplay: 1\nmax_iter: 100000000\nlr_policy: "fixed"\nsolver_mode: CPU\n'
    'type: "SGD"\n'
    "I20261129 20:08:08.939286 10425 solver.cpp:63] Solver scaffolding done.\n"
)
CAFFE_ITERATION = (
    "I{stamp} 10425 solver.cpp:231] Iteration {it}, loss = {loss:.6g}\n"
    "I{stamp} 10425 solver.cpp:247]     Train net output #0: loss = {loss:.6g} (* 1 = {loss:.6g} loss)\n"
    "I{stamp} 10425 sgd_solver.cpp:106] Iteration {it}, lr = 0.01\n"
)


def bigdl_lines(size: int) -> Iterator[str]:
    """A BigDL driver log of about ``size`` bytes: the sample's preamble, then iterations."""
    preamble = BIGDL_SAMPLE.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(preamble) if "[Iteration 1]" in line)
    yield from preamble[:first]
    written, it, wall = sum(map(len, preamble[:first])), 1, 0.0
    start = dt.datetime(2026, 11, 29, 19, 55, 14)
    while written < size:
        step = 0.05 + (it % 7) * 0.001
        wall += step
        stamp = (start + dt.timedelta(seconds=wall)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        block = BIGDL_ITERATION.format(
            stamp=stamp,
            seen=128 * it,
            total=128 * 10**9,
            it=it,
            wall=wall,
            step=step,
            rate=128 / step,
            loss=2.3 / (1 + it * 1e-4),
        ) + BIGDL_METRICS.format(stamp=stamp)
        written += len(block)
        it += 1
        yield block


def caffe_lines(size: int) -> Iterator[str]:
    """A Caffe solver log of about ``size`` bytes (display every iteration)."""
    yield CAFFE_HEADER
    written, it = len(CAFFE_HEADER), 0
    start = dt.datetime(2026, 11, 29, 20, 8, 9)
    while written < size:
        stamp = (start + dt.timedelta(milliseconds=50 * it)).strftime("%Y%m%d %H:%M:%S.%f")
        block = CAFFE_ITERATION.format(stamp=stamp, it=it, loss=3.0 / (1 + it * 1e-4))
        written += len(block)
        it += 1
        yield block


GENERATORS = {"bigdl": bigdl_lines, "caffe": caffe_lines}


def write_log(path: Path, parser: str, size: int) -> None:
    with path.open("w") as out:
        out.writelines(GENERATORS[parser](size))


def time_parse(parser: str, log: Path) -> tuple[float, float, int]:
    """Wall seconds, the child's peak RSS (MB) and the number of events printed.

    The events go to a file, never into this process: a child's maxrss counts the pages it
    shares with its parent between fork and exec, so a parent holding a large captured
    output would be measured as the child's (seen: 288 MB for a parser that uses 17 MB).
    """
    out = log.with_suffix(".events")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    with out.open("w") as sink:
        done = subprocess.run(
            [sys.executable, "-m", "dlscale.parse", parser, str(log)],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{parser} on {log} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with out.open() as events:
        count = sum(1 for _ in events)
    out.unlink()
    # ru_maxrss of children is the largest of any child so far: run sizes smallest first.
    return wall, max(peak, before) / 1024, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200.0, help="size of the large logs (MB)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dlscale-parse-") as tmp:
        rows = []
        for mb in (1.0, args.mb):  # smallest first: the children's maxrss only grows
            for name in GENERATORS:
                log = Path(tmp) / f"{name}-{mb:g}MB.log"
                write_log(log, name, int(mb * 1e6))
                samples = [time_parse(name, log) for _ in range(args.repeats)]
                wall = summarize(wall for wall, _, _ in samples)
                rows.append(
                    (
                        name,
                        os.path.getsize(log) / 1e6,
                        wall.median,
                        wall.low,
                        wall.high,
                        samples[-1][1],
                        samples[-1][2],
                    )
                )
                log.unlink()
    print(f"load average at the end: {os.getloadavg()}")
    print("parser | log MB | wall s median [interval] | peak RSS MB (max so far) | events")
    for name, size, med, lo, hi, rss, events in rows:
        print(f"{name} | {size:.1f} | {med:.1f} [{lo:.1f}, {hi:.1f}] | {rss:.1f} | {events}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
