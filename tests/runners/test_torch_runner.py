"""The PyTorch runner for real: models, DDP over gloo on loopback, failures recorded.

These tests run the runner in the torch venv through the launcher, exactly as the
training rule does, on real MNIST.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from helpers.paths import REPO
from helpers.torch_runs import launch, spec

from dlscale import catalog
from dlscale.events import read_events
from dlscale.runspec import RunSpec


def test_plans_hand_every_rank_the_same_spec(tmp_path):
    """Pure (no torch): n x p ranks locally, one srun step under SLURM; each rank's argv
    carries the spec as RunSpec.to_json, which reads back as the same spec."""
    from dlscale.runners.plan import LaunchContext
    from dlscale.runners.torch import launcher as torch_launcher

    run = RunSpec.from_dict(spec(nodes=2, rpn=2))
    local = torch_launcher.plan(LaunchContext(run, "/venv/bin/python", tmp_path, tmp_path, 29500))
    assert [p.rank for p in local.processes] == [0, 1, 2, 3] and local.reporting_ranks == 4
    assert [p.node for p in local.processes] == [0, 0, 1, 1]
    assert [p.env["DLSCALE_NODE_RANK"] for p in local.processes] == ["0", "0", "1", "1"]
    for process in local.processes:
        argv = process.argv
        assert argv[:3] == ["/venv/bin/python", "-m", "dlscale.runners.torch"]
        assert argv[argv.index("--spec-json") + 1] == run.to_json()
        assert RunSpec.from_json(argv[argv.index("--spec-json") + 1]) == run
        assert process.env["OMP_NUM_THREADS"] == "1"
    ctx = LaunchContext(
        run, "/venv/bin/python", tmp_path, tmp_path, 29500, mode="slurm", master_addr="10.0.0.1"
    )
    [step] = torch_launcher.plan(ctx).processes
    assert step.argv[:6] == [
        "srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--cpus-per-task=1", "--kill-on-bad-exit=1"
    ]  # fmt: skip
    assert RunSpec.from_json(step.argv[step.argv.index("--spec-json") + 1]) == run
    assert step.env["DLSCALE_MASTER_ADDR"] == "10.0.0.1" and step.env["DLSCALE_MASTER_PORT"] == "29500"


def test_parameter_counts_match_reference(torch_py):
    code = (
        "from dlscale.runners.torch.models import MODELS, build_model, parameter_count;"
        "import json; print(json.dumps({m: parameter_count(build_model(m)) for m in MODELS}))"
    )
    out = subprocess.run(
        [str(torch_py), "-c", code],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        check=True,
    )
    counts = json.loads(out.stdout)
    assert counts == dict(catalog.PARAMETERS)
    assert counts == {
        "lenet": 431_080,  # Caffe's MNIST LeNet
        "autoencoder": 2_837_314,  # Caffe's mnist_autoencoder
        "alexnet": 61_100_840,  # torchvision's AlexNet
        "resnet50": 25_557_032,  # torchvision's ResNet-50
    }


#: In the torch venv: the runner's feed (Batches, memory mode) and the benchmark's bare loop
#: (bare_common.Dataset gathered per step, torch_worker.feed) for the same spec; what each
#: hands the step, and the settings each trains under.
SAME_FEED = """
import json, sys, torch
from pathlib import Path
from benchmarks.bare_common import Dataset
from benchmarks.runner_arm import context
from benchmarks.torch_worker import feed
from dlscale.runners.torch import settings
from dlscale.runners.torch.data import Batches
from dlscale.runspec import RunSpec

spec = RunSpec.from_json(sys.argv[1])
data, part = Path(sys.argv[2]), Path(sys.argv[3])
batches = Batches(context(spec, data, part), torch)
bare = Dataset(data, spec.model, nchw=True).batches(spec.batch, spec.seed)
out = []
for _ in range(3):
    (xr, yr), (xb, yb) = batches.next(), feed(spec, *next(bare))
    out.append({
        "x_equal": bool(torch.equal(xr, xb)), "y_equal": bool(torch.equal(yr, yb)),
        "x": [[list(t.shape), list(t.stride()), str(t.dtype)] for t in (xr, xb)],
        "y": [[list(t.shape), list(t.stride()), str(t.dtype)] for t in (yr, yb)],
    })
# The memory format measured from the tensors the runner lays out: a 4-d weight with more
# than one input channel (a 1-channel batch or conv1 weight has the same bytes in either
# format) that is channels_last-contiguous and not plain contiguous.
from dlscale.runners.torch.models import build_model
from dlscale.runners.torch.train import lay_out
model = lay_out(torch, build_model(spec.model), batches.channels_last)
measured = any(p.dim() == 4 and p.size(1) > 1 and p.is_contiguous(memory_format=torch.channels_last)
               and not p.is_contiguous() for p in model.parameters())
print(json.dumps({"batches": out, "runner_channels_last": batches.channels_last,
                  "measured_channels_last": measured,
                  "recorded": settings.describe(spec)["channels_last"]}))
"""


@pytest.mark.parametrize(
    ("model", "forced"), [("lenet", None), ("autoencoder", None), ("alexnet", None), ("lenet", True)]
)
def test_bare_loop_feeds_the_step_what_the_runner_feeds_it(
    torch_py, mnist_shards, imagenet_shards, tmp_path, model, forced
):
    """The benchmark's bare loop (benchmarks.torch_worker) and the runner train on the same
    tensors: same values, dtype, shape and strides (a channel stride of 28 instead of 784
    was the bare loop's own layout before), under the one memory-format rule
    (settings.channels_last) that the run record also states, and that the tensor itself
    shows (channels_last_all_models forces it on LeNet too)."""
    data = imagenet_shards if catalog.model(model).datasets[0] == "imagenet" else mnist_shards
    fields = spec(model=model, batch=8 if data == imagenet_shards else 64)
    if forced is not None:
        fields["options"] = {**fields["options"], "channels_last_all_models": forced}
    run = RunSpec.from_dict(fields)
    out = subprocess.run(
        [str(torch_py), "-c", SAME_FEED, run.to_json(), str(data), str(tmp_path / "part.jsonl")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    for step in found["batches"]:
        assert step["x_equal"] and step["y_equal"], step
        assert step["x"][0] == step["x"][1] and step["y"][0] == step["y"][1], step
    expected = (model == "alexnet") if forced is None else forced
    assert found["runner_channels_last"] is found["recorded"] is expected
    assert found["measured_channels_last"] is expected


def test_two_rank_lenet_learns_on_real_mnist(torch_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(torch_py, spec(nodes=2, iterations=60, batch=64), mnist_shards, events_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    start, end = events[0], events[-1]
    assert end["status"] == "ok", end
    assert start["world_size"] == 2 and len(start["hosts"]) == 2 and start["hosts"][0] != start["hosts"][1]
    assert start["versions"]["torch"].startswith("2.13.0")
    iters = [e for e in events if e["event"] == "iteration"]
    assert len(iters) == 2 * 62
    for e in iters:
        assert e["compute_s"] > 0 and e["comm_s"] > 0
        assert e["step_s"] >= e["compute_s"]
        assert e["comm_bytes"] == 431_080 * 4
    rank0 = [e["loss"] for e in iters if e["rank"] == 0]
    first, last = sum(rank0[:5]) / 5, sum(rank0[-5:]) / 5
    assert first > 2.0 and last < 0.8 * first and last < 1.0, (first, last)
    assert not (tmp_path / ".work").exists()  # cleaned after success


def test_replicas_stay_identical(torch_py, mnist_shards, tmp_path):
    """Averaged gradients keep every replica's weights bit-identical after training."""
    wrapper = tmp_path / "checksum_runner.py"
    wrapper.write_text(
        "import os, sys\n"
        "import dlscale.runners.torch.models as models\n"
        "from dlscale.runners import common\n"
        "from dlscale.runners.torch import train as runner\n"
        "built = {}\n"
        "real_build, real_train = models.build_model, runner.train\n"
        "def build(name):\n"
        "    built['model'] = real_build(name)\n"
        "    return built['model']\n"
        "def train(ctx):\n"
        "    real_train(ctx)\n"
        "    total = float(sum(p.detach().double().sum() for p in built['model'].parameters()))\n"
        "    with open(os.path.join(os.environ['CHECK_DIR'], f'rank{ctx.rank}.sum'), 'w') as f:\n"
        "        f.write(repr(total))\n"
        "models.build_model, runner.train = build, train\n"
        "sys.exit(common.main(runner))\n"
    )
    rank_python = tmp_path / "rank-python.sh"  # called as: rank-python.sh -m <runner module> ARGS
    rank_python.write_text(f'#!/bin/sh\nshift 2\nexec "{torch_py}" "{wrapper}" "$@"\n')
    rank_python.chmod(0o755)
    check_dir = tmp_path / "sums"
    check_dir.mkdir()
    proc = launch(
        torch_py,
        spec(nodes=2, iterations=5),
        mnist_shards,
        tmp_path / "e.jsonl",
        env={"CHECK_DIR": str(check_dir)},
        rank_python=rank_python,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sums = [float((check_dir / f"rank{r}.sum").read_text()) for r in range(2)]
    assert sums[0] == sums[1]


def test_nan_loss_fails_the_run_with_reason(torch_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(torch_py, spec(nodes=2, lr=1e9, iterations=30), mnist_shards, events_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # recorded, not crashed
    events = read_events(events_path)
    assert events[-1]["status"] == "failed"
    assert "loss became nan at iteration" in events[-1]["reason"].lower()
    attempts = list((tmp_path / "attempts").glob("failed-*.jsonl"))
    assert len(attempts) == 1  # kept for the record; its count makes Snakemake redo the run


def test_killed_rank_fails_the_run_quickly(torch_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(torch_py, spec(nodes=2, iterations=100000, batch=64), mnist_shards, events_path, wait=False)
    work = tmp_path / ".work"
    deadline = time.time() + 120
    pid = None
    while time.time() < deadline and pid is None:
        part = work / "rank1.jsonl"
        if part.exists():
            lines = part.read_text().splitlines()
            if sum('"iteration"' in line for line in lines) >= 10:
                pid = json.loads(lines[0])["pid"]
        time.sleep(0.2)
    assert pid, "rank 1 never started iterating"
    os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == 0
    end = read_events(events_path)[-1]
    assert end["status"] == "failed"
    assert end["reason"].startswith("rank 1 died (SIGKILL) at iteration"), end["reason"]
    with pytest.raises(ProcessLookupError):  # rank 0 was stopped, not left behind
        rank0 = json.loads((work / "rank0.jsonl").read_text().splitlines()[0])["pid"]
        os.kill(rank0, 0)


#: A rank whose interpreter teardown aborts (as gloo's native destructors did after a whole
#: 2-node run under SLURM, docs/teardown.md): an exit handler that raises SIGABRT.
ABORTING_TEARDOWN = (
    "import atexit, os, runpy; atexit.register(os.abort);"
    " runpy.run_module('dlscale.runners.torch', run_name='__main__')"
)


def lone_process_env() -> dict[str, str]:
    """This process's environment without a launcher's placement: the rank runs alone."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("DLSCALE_", "SLURM_"))}


def test_a_rank_that_wrote_its_end_exits_without_teardown(torch_py, mnist_shards, tmp_path):
    """Once ``rank_end`` is written the rank exits at once (``EXITS_WITHOUT_TEARDOWN``): an
    abort in teardown would otherwise fail a run whose records are whole."""
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [str(torch_py), "-c", ABORTING_TEARDOWN, "--spec-json", json.dumps(spec(iterations=3, warmup=1)),
         "--data", str(mnist_shards), "--work-dir", str(work)],
        capture_output=True, text=True, timeout=300, env=lone_process_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    part = [json.loads(line) for line in (work / "rank0.jsonl").read_text().splitlines()]
    [end] = [e for e in part if e["event"] == "rank_end"]
    assert end["status"] == "ok", end
