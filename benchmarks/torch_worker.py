"""Benchmark work that runs inside the torch venv (``python -m benchmarks.torch_worker``).

Sub-commands (arguments and output: benchmarks.worker_cli):

* ``training``: per repeat, in rotated order, the runner's own training loop
  (``dlscale.runners.torch.train.train`` as a lone rank, the code path of every study run),
  a bare loop of the same model, batch, threads and optimizer fed a fresh batch per step
  from the normalised set in memory (``bare_common.Dataset``), and
  torch.mm's float32 peak: three arms side by side in one process set-up.
* ``flops``: forward+backward FLOPs per sample of each model (torch's FlopCounterMode).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks import worker_cli
from benchmarks.bare_common import Dataset, bare_loop, matmul_peak
from benchmarks.runner_arm import rotate_arms, runner_arm
from dlscale.runners.torch import settings
from dlscale.runners.torch import train as runner
from dlscale.runners.torch.models import build_model, parameter_count
from dlscale.runspec import RunSpec


def loss_function(model: str) -> Any:
    return torch.nn.BCEWithLogitsLoss() if model == "autoencoder" else torch.nn.CrossEntropyLoss()


def feed(spec: RunSpec, images: Any, labels: Any) -> tuple[Any, Any]:
    """The tensors a bare step trains on, from a gathered numpy batch, as a plain loop makes
    them (``torch.from_numpy``, the memory format the runner uses, the autoencoder's targets
    its own pixels): values, dtype, shape and strides the runner's feed hands its step
    (``dlscale.runners.torch.data.Batches``; tests/runners/test_torch_runner.py checks it)."""
    x = torch.from_numpy(images)
    if settings.channels_last(spec):
        x = x.contiguous(memory_format=torch.channels_last)
    return x, (x.flatten(1) if spec.model == "autoencoder" else torch.from_numpy(labels))


def bare(spec: RunSpec, dataset: Dataset) -> dict[str, float]:
    """A minimal training loop: same model, batch, threads and optimizer; per step a fresh
    batch gathered from the normalised set in memory, as a plain user loop does."""
    torch.manual_seed(spec.seed)
    model = build_model(spec.model)
    if settings.channels_last(spec):  # the runner's own rule
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.learning_rate, momentum=spec.momentum)
    loss_fn = loss_function(spec.model)
    model.train()

    batches = dataset.batches(spec.batch, spec.seed)

    def step() -> None:
        x, y = feed(spec, *next(batches))
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()

    return bare_loop(spec, step)


def torch_matmul(n: int) -> Callable[[], Any]:
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    return lambda: torch.mm(a, b, out=out)


def training(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    spec: RunSpec = args.spec
    torch.set_num_threads(spec.threads_per_rank)
    # The runner tunes glibc's malloc when it starts (runner.tune_allocator); the process
    # set-up is the same for every arm, so it is done first, not by whichever arm runs first.
    runner.tune_allocator()
    # Likewise the run's engine (oneDNN on/off, dlscale.runners.torch.settings): the runner
    # sets it when it starts; set here first, the bare arm never runs with another one.
    settings.apply(torch, spec)
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-torch-") as tmp:
        work = Path(tmp)
        dataset = Dataset(args.data, spec.model, nchw=True)
        yield from rotate_arms(spec, args.repeats, {
            "runner": lambda r: runner_arm(runner.train, spec, args.data, work, r),
            "bare": lambda r: bare(spec, dataset),
            "peak": lambda r: matmul_peak(torch_matmul),
        })  # fmt: skip


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
    """A random batch shaped as the model's dataset, its targets and the model's loss."""
    from dlscale import catalog

    if name == "autoencoder":
        x = torch.rand(batch, 1, 28, 28)
        return x, x.flatten(1), loss_function(name)
    if catalog.model(name).mnist_sized:
        return torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,)), loss_function(name)
    return torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,)), loss_function(name)


def flops(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """Per-sample FLOPs, counted at batch 2 (BatchNorm needs more than one sample)."""
    batch = 2
    for name in args.models:
        model = build_model(name)
        model.train()
        total = count_flops(model, *model_input(name, batch))
        yield {
            "model": name,
            "flops_per_sample": total / batch,
            "parameters": parameter_count(model),
            "gradient_bytes": parameter_count(model) * 4,
            "counter": f"torch {torch.__version__} FlopCounterMode, forward+backward",
        }


COMMANDS = {"training": training, "flops": flops}

if __name__ == "__main__":
    worker_cli.run(COMMANDS, __doc__)
