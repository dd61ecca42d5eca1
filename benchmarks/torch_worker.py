"""Benchmark work that runs inside the torch venv (``python -m benchmarks.torch_worker``).

Sub-commands, each printing one JSON object per line on stdout:

* ``training``: the harness-overhead and compute-efficiency measurement for one model.
  Per repeat it runs, in rotated order, the runner's own training loop
  (``dlscale.runners.torch.train.train``, the code path of every study run), a bare loop
  of the same model, batch and threads, and a float32 matmul peak: three arms side by side
  in one process set-up.
* ``flops``: forward+backward FLOPs per sample of each model (torch's FlopCounterMode).
* ``gloo``: one rank of a gloo all-reduce of each gradient size, done exactly as the
  runner synchronises gradients (barrier, all_reduce of one flat buffer, divide).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.stats import median_interval, throughput
from dlscale import placement as placement_mod
from dlscale.events import PartWriter
from dlscale.runners.common import RunContext
from dlscale.runners.torch import train as runner
from dlscale.runners.torch.models import build_model, parameter_count

MNIST_MODELS = runner.MNIST_MODELS


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


@dataclass
class StampedContext(RunContext):
    """The runner's context, also noting this process's CPU time at every iteration event.

    record_iteration is called at the same point of every iteration, so the CPU time
    between two calls is what one whole iteration cost this process. On a shared,
    oversubscribed node that is far steadier than wall time (being descheduled costs
    wall time, not CPU time), so the benchmark reports both.
    """

    cpu_stamps: list[float] = field(default_factory=list)

    def record_iteration(self, iteration: int, **fields: Any) -> None:  # type: ignore[override]
        self.cpu_stamps.append(time.process_time())
        super().record_iteration(iteration, **fields)


def _context(spec: dict[str, Any], data: Path, part: Path) -> StampedContext:
    where = placement_mod.detect({})  # a lone process: rank 0 of 1
    return StampedContext(spec=spec, placement=where, data_dir=data, writer=PartWriter(part))


def runner_arm(spec: dict[str, Any], data: Path, work: Path, repeat: int) -> dict[str, float]:
    """The runner's loop as a study run executes it; timed from its own events' stamps.

    The gaps between successive iteration events cover the whole loop body (next batch,
    step, event writing), which is what the harness costs on top of the step itself.
    """
    part = work / f"runner{repeat}.jsonl"
    ctx = _context(spec, data, part)
    try:
        runner.train(ctx)
    finally:
        ctx.writer.close()
    events = [e for e in _read_part(part) if e["event"] == "iteration"]
    warmup = int(spec["warmup"])
    stamps = [e["time"] for e in events[warmup - 1 :]]
    self_timed = statistics.median(e["step_s"] for e in events[warmup:])
    batch = int(spec["batch"])
    return {
        "samples_per_s": throughput(batch, median_interval(stamps)),
        "samples_per_cpu_s": throughput(batch, median_interval(ctx.cpu_stamps[warmup - 1 :])),
        "self_timed_samples_per_s": throughput(batch, self_timed),
    }


def _read_part(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def first_batch(spec: dict[str, Any], data: Path, work: Path) -> tuple[Any, Any]:
    """One batch exactly as the runner prepares it (same pixels, layout and normalisation)."""
    ctx = _context(spec, data, work / "batch.jsonl")
    batches = runner.Batches(ctx, torch)
    try:
        return batches.next()
    finally:
        batches.close()
        ctx.writer.close()


def bare_arm(spec: dict[str, Any], x: Any, y: Any) -> dict[str, float]:
    """A minimal training loop: same model, batch, threads and optimizer; one fixed batch."""
    torch.set_num_threads(int(spec["threads_per_rank"]))
    torch.manual_seed(int(spec["seed"]))
    name = spec["model"]
    model = build_model(name)
    if spec["options"].get("channels_last", True) and name not in MNIST_MODELS:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=float(spec["learning_rate"]), momentum=float(spec["momentum"])
    )
    loss_fn = torch.nn.BCEWithLogitsLoss() if name == "autoencoder" else torch.nn.CrossEntropyLoss()
    model.train()
    stamps, cpu_stamps = [], []
    for _ in range(int(spec["warmup"]) + int(spec["iterations"])):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        stamps.append(time.perf_counter())
        cpu_stamps.append(time.process_time())
    batch, first = int(spec["batch"]), int(spec["warmup"]) - 1
    return {
        "samples_per_s": throughput(batch, median_interval(stamps[first:])),
        "samples_per_cpu_s": throughput(batch, median_interval(cpu_stamps[first:])),
    }


def matmul_peak(
    threads: int, sizes: tuple[int, ...] = (1024, 2048), seconds: float = 0.6
) -> dict[str, float]:
    """Single-precision matrix-multiply FLOP/s with ``threads`` threads: the roofline's roof.

    The best of a few square sizes (median over calls at each size), so neither a size too
    small to fill the vector units nor one that thrashes the cache sets the peak. Given per
    wall second and per CPU second (process CPU time: steady on a shared node, where being
    descheduled costs wall time only); with one thread both are FLOP/s of one core.
    """
    torch.set_num_threads(threads)
    best = best_cpu = 0.0
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        out = torch.empty(n, n)
        torch.mm(a, b, out=out)  # warm-up: page in, pick kernels
        times: list[float] = []
        cpu_times: list[float] = []
        deadline = time.perf_counter() + seconds
        while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
            t0, c0 = time.perf_counter(), time.process_time()
            torch.mm(a, b, out=out)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        best = max(best, 2.0 * n**3 / statistics.median(times))
        best_cpu = max(best_cpu, 2.0 * n**3 / max(statistics.median(cpu_times), 1e-9))
    return {"peak_flops": best, "peak_flops_cpu": best_cpu}


def training(args: argparse.Namespace) -> None:
    from benchmarks.stats import arm_order

    spec = json.loads(args.spec_json)
    if int(spec["warmup"]) < 1:
        raise SystemExit("training needs warmup >= 1 (the last warm-up stamp starts the clock)")
    threads = int(spec["threads_per_rank"])
    torch.set_num_threads(threads)
    # The runner tunes glibc's malloc when it starts (runner.tune_allocator); the process
    # set-up is the same for every arm, so it is done first, not by whichever arm runs first.
    runner.tune_allocator()
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-") as tmp:
        work = Path(tmp)
        x, y = first_batch(spec, args.data, work)
        for repeat in range(args.repeats):
            for arm in arm_order(repeat, ("runner", "bare", "peak")):
                if arm == "runner":
                    result = runner_arm(spec, args.data, work, repeat)
                elif arm == "bare":
                    result = bare_arm(spec, x, y)
                else:
                    result = matmul_peak(threads)
                emit(
                    arm=arm,
                    repeat=repeat,
                    model=spec["model"],
                    batch=int(spec["batch"]),
                    threads=threads,
                    **result,
                )


def count_flops(model: Any, x: Any, y: Any, loss_fn: Any) -> int:
    """FLOPs of one forward + backward pass on batch ``x`` (matmuls and convolutions).

    FlopCounterMode counts 2 FLOPs per multiply-add of every matmul/convolution, forward
    and backward; elementwise work (activations, pooling, normalisation, the update) is not
    counted: it is a few percent of these models' work and not what a roofline bounds.
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        loss_fn(model(x), y).backward()
    return int(counter.get_total_flops())


def model_input(name: str, batch: int) -> tuple[Any, Any, Any]:
    if name == "autoencoder":
        x = torch.rand(batch, 1, 28, 28)
        return x, x.flatten(1), torch.nn.BCEWithLogitsLoss()
    if name in MNIST_MODELS:
        return torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,)), torch.nn.CrossEntropyLoss()
    return torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,)), torch.nn.CrossEntropyLoss()


def flops(args: argparse.Namespace) -> None:
    """Per-sample FLOPs, counted at batch 2 (BatchNorm needs more than one sample)."""
    batch = 2
    for name in args.models:
        model = build_model(name)
        model.train()
        x, y, loss_fn = model_input(name, batch)
        total = count_flops(model, x, y, loss_fn)
        emit(
            model=name,
            flops_per_sample=total / batch,
            parameters=parameter_count(model),
            gradient_bytes=parameter_count(model) * 4,
            counter=f"torch {torch.__version__} FlopCounterMode, forward+backward",
        )


def gloo(args: argparse.Namespace) -> None:
    """One rank: for each size, barrier + all_reduce + divide, median over ``inner`` calls."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=args.world
    )
    try:
        for nbytes in args.sizes:
            flat = torch.ones(nbytes // 4)
            dist.all_reduce(flat)  # warm-up: connections and buffers
            times = []
            for _ in range(args.inner):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(flat)
                flat.div_(args.world)
                times.append(time.perf_counter() - t0)
            if args.rank == 0:
                emit(transport="gloo", nbytes=flat.numel() * 4, seconds=statistics.median(times))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train_p = sub.add_parser("training")
    train_p.add_argument("--spec-json", required=True)
    train_p.add_argument("--data", required=True, type=Path)
    train_p.add_argument("--repeats", type=int, default=5)
    flops_p = sub.add_parser("flops")
    flops_p.add_argument("--models", nargs="+", required=True)
    gloo_p = sub.add_parser("gloo")
    gloo_p.add_argument("--rank", type=int, required=True)
    gloo_p.add_argument("--world", type=int, default=2)
    gloo_p.add_argument("--port", type=int, required=True)
    gloo_p.add_argument("--sizes", type=int, nargs="+", required=True)
    gloo_p.add_argument("--inner", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    {"training": training, "flops": flops, "gloo": gloo}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
