"""The Caffe runner for real: pycaffe + MPI Allreduce over Open MPI on loopback.

Replica identity and equivalence with one process run the runner's own solver and
all-reduce under mpirun; the launched runs go through dlscale.launch exactly as the
training rule does, on real MNIST. Every process group started here is killed by id on
the way out, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.caffe_runs import launch, run_group, spec, stop_group

from dlscale.events import read_events
from dlscale.runners.caffe.launcher import caffe_env, caffe_home
from dlscale.runners.caffe.mpi_env import placement_env

LOOPBACK = {"OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "GLOG_minloglevel": "2"}


@pytest.fixture(scope="module")
def rank_env(caffe_py) -> dict[str, str]:
    home = caffe_home({}, os.environ, str(caffe_py))
    return {**os.environ, **caffe_env(home, {}), **LOOPBACK, **THREADS}


def test_open_mpi_ranks_are_placed_like_emulated_nodes():
    env = {"DLSCALE_MPIRUN": "1", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "DLSCALE_RANKS_PER_NODE": "2", "DLSCALE_MASTER_PORT": "1234"}  # fmt: skip
    placed = placement_env(env)
    assert placed["DLSCALE_RANK"] == "3" and placed["DLSCALE_WORLD_SIZE"] == "4"
    assert placed["DLSCALE_NODE_RANK"] == "1" and placed["DLSCALE_LOCAL_RANK"] == "1"
    assert placed["DLSCALE_NNODES"] == "2" and placed["DLSCALE_HOST"].endswith("/node1")
    assert placement_env({**env, "DLSCALE_MPIRUN": "0"}) == {}  # not dlscale's mpirun: srun's SLURM_* rule
    assert placement_env({**env, "DLSCALE_RANK": "0"}) == {}
    with pytest.raises(ValueError, match="does not divide"):
        placement_env({**env, "DLSCALE_RANKS_PER_NODE": "3"})


EQUIVALENCE = r"""
import sys, tempfile
from pathlib import Path
import numpy as np
from mpi4py import MPI
from dlscale.data.shards import ShardSet
from dlscale.runners.caffe.models import learnable_blobs
from dlscale.runners.caffe.parallel import GradientAllreduce
from dlscale.runners.caffe.train import feed, make_solver, preprocess
from dlscale.runspec import RunSpec

data, out, steps, global_batch = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
per_rank = global_batch // world
# A different seed per rank: only rank 0's broadcast weights can make the replicas agree.
spec = RunSpec.from_dict({
    "framework": "caffe", "model": "lenet", "nodes": world, "ranks_per_node": 1, "batch": per_rank,
    "repeat": 0, "run_id": f"caffe/lenet/n{world}x1/b{per_rank}/r0", "world_size": world,
    "scaling": "strong", "global_batch": global_batch, "dataset": "mnist", "iterations": steps,
    "warmup": 0, "threads_per_rank": 1, "learning_rate": 0.05, "momentum": 0.9,
    "seed": 100 + rank, "timeout_s": 300, "options": {},
})
shards = ShardSet(data)
images, labels = shards.load_part(0, 1)
with tempfile.TemporaryDirectory() as tmp:
    solver = make_solver(spec, per_rank, Path(tmp))
sync = GradientAllreduce(solver, comm, MPI)
sync.broadcast_weights()
for step in range(steps):
    # The same global batch for every world size; rank r takes its slice of it.
    first = step * global_batch + rank * per_rank
    index = np.arange(first, first + per_rank)
    x = preprocess(images[index], "lenet", shards.mean, shards.std)
    feed(solver.net, x, labels[index].astype(np.float32))
    solver.step(1)
weights = np.concatenate([blob.data.ravel() for _, _, blob in learnable_blobs(solver.net)])
np.save(out / f"w{world}-rank{rank}.npy", weights)
"""


@pytest.fixture(scope="module")
def trained_weights(caffe_py, mnist_shards, rank_env, tmp_path_factory) -> Path:
    """LeNet after 8 steps on global batches of 64, with 1, 2 and 4 ranks."""
    out = tmp_path_factory.mktemp("weights")
    script = out / "equivalence.py"
    script.write_text(EQUIVALENCE)
    env = rank_env  # pycaffe on its path (caffe_env); dlscale is installed in the venv
    for world in (1, 2, 4):
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-n", str(world),
               str(caffe_py), str(script), str(mnist_shards), str(out), "8", "64"]  # fmt: skip
        proc = run_group(cmd, env, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:]
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_replicas_identical_and_equal_to_one_process(trained_weights, world):
    single = np.load(trained_weights / "w1-rank0.npy")
    replicas = [np.load(trained_weights / f"w{world}-rank{r}.npy") for r in range(world)]
    for replica in replicas[1:]:
        assert np.array_equal(replica, replicas[0])  # bit-identical, not merely close
    assert single.size == 431_080
    # Summing world partial gradients rounds differently from one batch-mean: float32 tolerance.
    np.testing.assert_allclose(replicas[0], single, rtol=1e-5, atol=1e-6)


def _alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for init to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_two_rank_lenet_learns_on_real_mnist(caffe_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(caffe_py, spec(nodes=2, iterations=60, batch=64), mnist_shards, events_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    events = read_events(events_path)
    start, end = events[0], events[-1]
    assert end["status"] == "ok", end
    assert start["world_size"] == 2 and len(start["hosts"]) == 2 and start["hosts"][0] != start["hosts"][1]
    assert start["versions"]["backend"] == "mpi" and "Open MPI" in start["versions"]["mpi"]
    assert start["versions"]["caffe"].startswith("1.0")
    iters = [e for e in events if e["event"] == "iteration"]
    assert len(iters) == 2 * 62
    for e in iters:
        assert e["compute_s"] > 0 and e["comm_s"] > 0
        assert e["step_s"] >= e["compute_s"] + e["comm_s"]
        assert e["comm_bytes"] == 431_080 * 4
    losses = {r: [e["loss"] for e in iters if e["rank"] == r] for r in (0, 1)}
    first, last = sum(losses[0][:5]) / 5, sum(losses[0][-5:]) / 5
    assert first > 1.5 and last < 0.6 * first, (first, last)
    assert losses[0] != losses[1]  # each rank trains on its own part of the data
    evals = [e for e in events if e["event"] == "eval"]  # eval_every 0: once, after the last, rank 0 only
    assert [(e["rank"], e["iteration"], e["metric"], e["samples"]) for e in evals] == [(0, 62, "top1", 10000)]
    assert evals[0]["value"] > 0.5, evals
    assert not (tmp_path / ".work").exists()


def test_autoencoder_loss_is_the_per_pixel_mean_as_in_torch(caffe_py, mnist_shards, tmp_path):
    """Same work in every framework: the reconstruction loss is binary cross-entropy
    averaged over every pixel (torch's BCEWithLogitsLoss), ~ln 2 for an untrained net.
    This Caffe's SigmoidCrossEntropyLoss ignores FULL normalisation; summed over the 784
    pixels the loss would start near 545 and the gradients be 784 times too large."""
    events_path = tmp_path / "events.jsonl"
    proc = launch(
        caffe_py, spec(model="autoencoder", iterations=40, batch=64, lr=0.01), mnist_shards, events_path
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    losses = [e["loss"] for e in events if e["event"] == "iteration"]
    assert 0.5 < losses[0] < 1.0, losses[:3]
    assert sum(losses[-5:]) / 5 < 0.9 * losses[0], (losses[0], losses[-5:])
    # Held-out reconstruction error of sigmoid(output) against the input pixels on [0, 1].
    evals = [e for e in events if e["event"] == "eval"]
    assert [(e["metric"], e["samples"]) for e in evals] == [("mse", 10000)]
    assert 0.0 < evals[0]["value"] < 0.25, evals


def test_nan_loss_fails_the_run_with_reason(caffe_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(caffe_py, spec(nodes=2, lr=1e9, iterations=30), mnist_shards, events_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    end = read_events(events_path)[-1]
    assert end["status"] == "failed"
    assert "loss became nan at iteration" in end["reason"].lower(), end["reason"]


def test_killed_rank_fails_the_run_quickly(caffe_py, mnist_shards, tmp_path):
    events_path = tmp_path / "events.jsonl"
    proc = launch(caffe_py, spec(nodes=2, iterations=100000, batch=64), mnist_shards, events_path, wait=False)
    work = tmp_path / ".work"
    pids: dict[int, int] = {}
    try:
        deadline = time.time() + 180
        while time.time() < deadline and 1 not in pids:
            part = work / "rank1.jsonl"
            if part.exists():
                lines = part.read_text().splitlines()
                if sum('"iteration"' in line for line in lines) >= 10:
                    pids = {
                        r: json.loads((work / f"rank{r}.jsonl").read_text().splitlines()[0])["pid"]
                        for r in (0, 1)
                    }
            time.sleep(0.2)
        assert pids, "rank 1 never started iterating"
        killed_at = time.time()
        os.kill(pids[1], signal.SIGKILL)
        proc.wait(timeout=90)
        assert proc.returncode == 0
        assert time.time() - killed_at < 60  # bounded: mpirun aborts the job, nobody hangs
        end = read_events(events_path)[-1]
        assert end["status"] == "failed"
        # The survivor recorded its SIGTERM from mpirun, so the dead rank is named.
        assert end["reason"].startswith("rank 1 died at iteration"), end["reason"]
        assert "mpirun (2 ranks) exited with" in end["reason"]
        deadline = time.time() + 30  # rank 0 was stopped, not left behind
        while time.time() < deadline and _alive(pids[0]):
            time.sleep(0.2)
        assert not _alive(pids[0])
    finally:
        stop_group(proc)
