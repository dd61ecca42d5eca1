"""``caffe time`` on one model: where the time of one iteration goes, layer by layer.

Caffe's own benchmark tool runs forward and backward of a net N times and prints each
layer's average forward and backward time. The training runs report only whole steps
(compute vs communication); this per-layer view explains the compute part (convolutions
vs fully connected layers), as Du et al. do when comparing the frameworks' compute speed.

``python -m dlscale.runners.caffe.timing --model M --batch B --iterations N --threads T
--net NET --log LOG --events EVENTS`` writes the net it times, the tool's raw output and
the parsed events (``dlscale.parse.caffe``), each atomically. The Caffe install is found
as the training runs find it (``launcher.caffe_home``), and ``--blas`` (the study's
``caffe.blas``) is loaded as a run loads it (``blas.py``: libblas.so.3 linked to it in a
temporary directory, first on LD_LIBRARY_PATH).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from dlscale.base import atomic
from dlscale.catalog import MODEL_NAMES
from dlscale.events import dumps
from dlscale.parse import caffe as caffe_parse
from dlscale.runners.caffe import blas as caffe_blas
from dlscale.runners.caffe.launcher import caffe_home
from dlscale.runners.caffe.models import net_prototxt
from dlscale.runners.common import thread_environment


def run_caffe_time(
    home: Path, net: Path, iterations: int, threads: int, timeout_s: float, blas: str = "openblas"
) -> str:
    """The tool's whole output (glog writes to stderr); raises if the tool fails."""
    cmd = [str(home / "build" / "tools" / "caffe"), "time", f"-model={net}", f"-iterations={iterations}"]
    with tempfile.TemporaryDirectory(prefix="caffe-blas-") as tmp:
        directory = caffe_blas.prepare_dir(tmp, caffe_blas.library(blas, os.environ))
        env = {
            **os.environ,
            **thread_environment(threads),
            **caffe_blas.blas_env(blas, directory, os.environ, threads),
            "GLOG_logtostderr": "1",
            "GLOG_minloglevel": "0",
        }
        proc = subprocess.run(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s
        )
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-15:])
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{tail}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, choices=MODEL_NAMES)
    parser.add_argument("--batch", required=True, type=int)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--blas", default="openblas", choices=caffe_blas.CHOICES)
    parser.add_argument("--home", default=None, help="Caffe build tree (default: as the runs find it)")
    parser.add_argument(
        "--python", default=sys.executable, help="the caffe venv's python (to find its build)"
    )
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument("--net", required=True, type=Path)
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--events", required=True, type=Path)
    args = parser.parse_args(argv)

    home = caffe_home({"home": args.home}, os.environ, args.python)
    atomic.write_text(args.net, net_prototxt(args.model, args.batch))
    print(
        f"caffe time: {args.model}, batch {args.batch}, {args.iterations} iterations,"
        f" {args.threads} thread(s), BLAS {args.blas}"
    )
    output = run_caffe_time(home, args.net, args.iterations, args.threads, args.timeout_s, args.blas)
    atomic.write_text(args.log, output)
    events = caffe_parse.parse(args.log)
    failed = next((e for e in events if e["event"] == "run_end" and e.get("status") == "failed"), None)
    if failed is not None:
        print(f"caffe time failed: {failed['reason']} ({args.log}:{failed.get('line')})", file=sys.stderr)
        return 1
    for event in events:
        event.update(model=args.model, batch=args.batch, threads=args.threads)  # not in Caffe's log
    # Not write_atomic: benchmark events are not run events (no run_start/run_end schema).
    atomic.write_text(args.events, "".join(dumps(event) + "\n" for event in events))
    bench = next(e for e in events if e["event"] == "benchmark")
    print(
        f"average forward-backward {bench['forward_backward_ms']:.1f} ms over {bench['iterations']} iterations"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
