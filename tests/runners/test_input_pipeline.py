"""`input: pipeline` for real: each runner fed through its framework's own input pipeline.

torch: a DataLoader with workers; TensorFlow: tf.data (mwms and ps); Caffe: the MemoryData
data layer fed by a prefetch thread. Each runner runs through the launcher in its venv,
as the training rule runs it.
Checked: pipeline and memory modes train on the same batches (same losses), every
iteration records the time it waited for input (`input_s`), the workers do not outlive
the run, and the analysis reports `input_s` per run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.paths import REPO, caffe_python, framework_python

from dlscale import catalog
from dlscale.analysis import tables
from dlscale.events import read_events


def spec(model="lenet", nodes=1, batch=32, iterations=12, warmup=2, **extra) -> dict:
    return {
        "framework": "torch",
        "model": model,
        "nodes": nodes,
        "ranks_per_node": 1,
        "batch": batch,
        "repeat": 0,
        "run_id": f"torch/{model}/n{nodes}x1/b{batch}/r0",
        "world_size": nodes,
        "scaling": "weak",
        "global_batch": batch * nodes,
        "dataset": catalog.model(model).datasets[0],
        "iterations": iterations,
        "warmup": warmup,
        "threads_per_rank": 1,
        "learning_rate": 0.01,
        "momentum": 0.9,
        "seed": 7,
        "timeout_s": 240,
        "options": {"channels_last": True, "timeout_s": 60},
        **extra,
    }


def launch(python: Path, run_spec: dict, data: Path, events: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(python), "-m", "dlscale.launch", "--spec-json", json.dumps(run_spec), "--data", str(data)]
    cmd += ["--events", str(events), "--python", str(python)]
    env = dict(os.environ)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (DataLoader workers inherit the rank's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(int(entry.name))
    return found


def iterations(events_path: Path, proc: subprocess.CompletedProcess[str]) -> list[dict]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", (events[-1], proc.stdout[-5000:])
    return [e for e in events if e["event"] == "iteration"]


def test_pipeline_trains_on_the_same_batches_as_memory(torch_py, mnist_shards, tmp_path):
    runs = {}
    for mode, extra in (("memory", {}), ("pipeline", {"input": "pipeline", "input_workers": 2})):
        events = tmp_path / mode / "events.jsonl"
        proc = launch(torch_py, spec(**extra), mnist_shards, events)
        runs[mode] = iterations(events, proc)
        assert not processes_mentioning(str(tmp_path / mode)), "input workers outlived the run"
    for mode, iters in runs.items():
        assert len(iters) == 14
        assert all(e["input_s"] >= 0 for e in iters), mode
    np.testing.assert_allclose(
        [e["loss"] for e in runs["pipeline"]], [e["loss"] for e in runs["memory"]], rtol=1e-6
    )


def test_two_ranks_pipeline_and_the_input_column(torch_py, mnist_shards, tmp_path):
    events = tmp_path / "events.jsonl"
    proc = launch(
        torch_py, spec(nodes=2, iterations=10, input="pipeline", input_workers=1), mnist_shards, events
    )
    iters = iterations(events, proc)
    assert sorted({e["rank"] for e in iters}) == [0, 1]
    assert all(e["input_s"] >= 0 and e["comm_s"] > 0 for e in iters)
    assert not processes_mentioning(str(tmp_path))

    runs, table = tables.load_events([events])
    assert runs.loc[0, "status"] == "ok"
    assert np.isfinite(runs.loc[0, "input_s"]) and runs.loc[0, "input_s"] >= 0
    timed = table[~table["warmup"]]
    per_iter = timed.groupby("iteration")["input_s"].mean()
    assert runs.loc[0, "input_s"] == pytest.approx(per_iter.median())

    # A runner that does not report input_s (yet) gets NaN there, not a failed run.
    stripped = tmp_path / "stripped.jsonl"
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    for event in lines:
        event.pop("input_s", None)
    stripped.write_text("".join(json.dumps(event) + "\n" for event in lines))
    runs, table = tables.load_events([stripped])
    assert runs.loc[0, "status"] == "ok" and pd.isna(runs.loc[0, "input_s"])
    assert table["input_s"].isna().all()


def test_pipeline_feeds_an_imagenet_model(torch_py, imagenet_shards, tmp_path):
    events = tmp_path / "events.jsonl"
    run_spec = spec(model="alexnet", batch=4, iterations=2, warmup=1, input="pipeline", input_workers=1)
    proc = launch(torch_py, run_spec, imagenet_shards, events)
    assert all(np.isfinite(e["loss"]) and e["input_s"] >= 0 for e in iterations(events, proc))


def test_input_option_reaches_the_run_spec_only_when_set(schema):
    from dlscale.study.matrix import expand_runs, run_spec
    from dlscale.study.validation import validate_config

    memory = validate_config({"models": ["lenet"]}, schema)
    run = expand_runs(memory)[0]
    assert "input" not in run_spec(memory, run).to_dict()  # the default leaves every run's hash as it was
    pipeline = validate_config({"models": ["lenet"], "input": "pipeline", "input_workers": 3}, schema)
    piped = run_spec(pipeline, run)
    assert piped.input == "pipeline" and piped.input_workers == 3
    assert piped.to_dict()["input"] == "pipeline" and piped.to_dict()["input_workers"] == 3


# --- TensorFlow (tf.data) and Caffe (MemoryData layer + prefetch thread) -----------------


@pytest.fixture(scope="session")
def tf_py() -> Path:
    return framework_python("tensorflow")


@pytest.fixture(scope="session")
def caffe_py_fixture() -> Path:
    return caffe_python()


def framework_spec(framework: str, nodes: int = 2, iterations: int = 3, warmup: int = 1, **extra) -> dict:
    """A short run of ``framework`` (LeNet, batch 32 per rank) in the torch spec's shape."""
    model = extra.pop("model", "lenet")
    options = extra.pop("options", {})
    run_spec = spec(model=model, nodes=nodes, iterations=iterations, warmup=warmup, **extra)
    run_spec["framework"] = framework
    run_spec["run_id"] = f"{framework}/{model}/n{nodes}x1/b32/r0"
    run_spec["options"] = options
    return run_spec


def memory_and_pipeline(python: Path, run_spec: dict, data: Path, root: Path) -> dict[str, list[dict]]:
    """The same run twice, ``input: memory`` then ``input: pipeline``: iteration events of each."""
    runs = {}
    for mode, extra in (("memory", {}), ("pipeline", {"input": "pipeline", "input_workers": 2})):
        events = root / mode / "events.jsonl"
        runs[mode] = iterations(events, launch(python, {**run_spec, **extra}, data, events))
    return runs


def losses_by_rank(iters: list[dict]) -> dict[int, list[float]]:
    ranks = sorted({e["rank"] for e in iters})
    return {
        r: [e["loss"] for e in sorted(iters, key=lambda e: e["iteration"]) if e["rank"] == r] for r in ranks
    }


def test_every_runner_draws_the_same_index_batches():
    """Same seed, same part size: torch, TensorFlow and Caffe train on the same batches,
    because they draw them from one class; each epoch is a permutation of the part."""
    from dlscale.data import shards
    from dlscale.runners.caffe import data as caffe_data
    from dlscale.runners.tensorflow import batches as tf_batches
    from dlscale.runners.torch import data as torch_data

    for module in (caffe_data, tf_batches, torch_data):
        assert module.IndexBatches is shards.IndexBatches, module.__name__
    draws = shards.IndexBatches(100, 32, 7)
    epoch = [next(draws) for _ in range(3)]  # 96 of 100: one epoch, no repeats
    assert all(len(b) == 32 and np.all(np.diff(b) > 0) for b in epoch)  # sorted, no repeats
    assert len(np.unique(np.concatenate(epoch))) == 96
    again = shards.IndexBatches(100, 32, 7)
    assert all(np.array_equal(a, next(again)) for a in epoch)  # the seed fixes the order


def test_caffe_memory_data_net_has_the_input_layers_tops():
    from dlscale.runners.caffe.models import net_prototxt

    lenet = net_prototxt("lenet", 16, "MemoryData")
    head = lenet.split("layer {")[1]
    assert 'type: "MemoryData"' in head and 'top: "label"' in head
    assert all(
        f"{key}: {value}" in head for key, value in (("batch_size", 16), ("channels", 1), ("height", 28))
    )
    assert 'type: "Input"' not in lenet
    # The autoencoder has no labels: MemoryData's label top is silenced, not left as an output.
    autoencoder = net_prototxt("autoencoder", 16, "MemoryData")
    assert 'type: "Silence"' in autoencoder and 'bottom: "label"' in autoencoder
    # Everything after the data layer is the same net.
    assert lenet.split("layer {", 2)[2] == net_prototxt("lenet", 16).split("layer {", 2)[2]
    with pytest.raises(ValueError, match="data_layer"):
        net_prototxt("lenet", 16, "Python")


def test_tensorflow_mwms_pipeline_trains_on_the_same_batches_as_memory(tf_py, mnist_shards, tmp_path):
    run_spec = framework_spec("tensorflow", options={"strategy": "mwms", "collective_timeout_s": 60})
    runs = memory_and_pipeline(tf_py, run_spec, mnist_shards, tmp_path)
    for mode, iters in runs.items():
        assert len(iters) == 2 * 4, mode
        assert all(np.isfinite(e["input_s"]) and e["input_s"] >= 0 for e in iters), mode
    memory, pipeline = losses_by_rank(runs["memory"]), losses_by_rank(runs["pipeline"])
    assert sorted(pipeline) == [0, 1] and memory[0] != memory[1]  # each rank its own part
    for rank in (0, 1):
        # Same initial weights, bit-identical batches in the same order: the same losses.
        assert pipeline[rank][0] == memory[rank][0]
        np.testing.assert_allclose(pipeline[rank], memory[rank], rtol=1e-6)
    sums = {e["rank"]: e["weights_sum"] for e in runs["pipeline"] if "weights_sum" in e}
    assert sums[0] == sums[1]  # the replicas stayed identical


def test_tensorflow_ps_pipeline_feeds_every_worker(tf_py, mnist_shards, tmp_path):
    run_spec = framework_spec("tensorflow", options={"strategy": "ps", "num_ps": 1})
    runs = memory_and_pipeline(tf_py, run_spec, mnist_shards, tmp_path)
    for mode, iters in runs.items():
        assert len(iters) == 4 and {e["rank"] for e in iters} == {0}, mode  # the chief reports
        assert all(np.isfinite(e["input_s"]) and e["input_s"] >= 0 for e in iters), mode
    # The same batches in both modes. Parameter-server updates are asynchronous: even in
    # the first step a worker may read weights another worker has already updated (one
    # small SGD step), so the losses agree closely, not bit for bit.
    first = {mode: iters[0]["worker_losses"] for mode, iters in runs.items()}
    assert len(first["pipeline"]) == len(first["memory"]) == 2
    np.testing.assert_allclose(first["pipeline"], first["memory"], rtol=0.05)


def test_caffe_pipeline_trains_on_the_same_batches_as_memory(caffe_py_fixture, mnist_shards, tmp_path):
    run_spec = framework_spec("caffe", options={"log_every": 0})
    runs = memory_and_pipeline(caffe_py_fixture, run_spec, mnist_shards, tmp_path)
    for mode, iters in runs.items():
        assert len(iters) == 2 * 4, mode
        assert all(np.isfinite(e["input_s"]) and e["input_s"] >= 0 for e in iters), mode
        assert all(e["comm_s"] > 0 for e in iters), mode
    memory, pipeline = losses_by_rank(runs["memory"]), losses_by_rank(runs["pipeline"])
    assert sorted(pipeline) == [0, 1] and memory[0] != memory[1]
    assert pipeline == memory  # exactly: the MemoryData layer reads the very same floats

    runs_table, _ = tables.load_events([tmp_path / "pipeline" / "events.jsonl"])
    assert runs_table.loc[0, "status"] == "ok" and runs_table.loc[0, "input_s"] >= 0


def test_caffe_pipeline_feeds_the_label_free_autoencoder(caffe_py_fixture, mnist_shards, tmp_path):
    run_spec = framework_spec("caffe", model="autoencoder", nodes=1, options={"log_every": 0})
    runs = memory_and_pipeline(caffe_py_fixture, run_spec, mnist_shards, tmp_path)
    assert losses_by_rank(runs["pipeline"]) == losses_by_rank(runs["memory"])
    assert all(e["input_s"] >= 0 for e in runs["pipeline"])


def test_bigdl_pipeline_reads_the_shards_on_the_executors(mnist_shards, tmp_path):
    """BigDL's pipeline: an RDD of index slices, 2 input partitions per executor, read and
    checksummed on the executors. DistriOptimizer caches its training RDD before the first
    step, so its steps never wait for input: ``input_s`` is null (not measured apart) and
    the one-off caching is ``input_load_s`` (dlscale.runners.bigdl.train)."""
    from helpers.paths import framework_python

    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    bigdl_py = framework_python("bigdl")
    run_spec = {
        **spec(nodes=2, batch=32, iterations=4, warmup=1, input="pipeline", input_workers=2),
        "framework": "bigdl",
        "run_id": "bigdl/lenet/n2x1/b32/r0",
        "options": {"driver_memory": "1g", "executor_memory": "1g", "startup_timeout_s": 240},
    }
    events = tmp_path / "events.jsonl"
    iters = iterations(events, launch(bigdl_py, run_spec, mnist_shards, events))
    assert [e["iteration"] for e in iters] == list(range(5)) and all(e["samples"] == 64 for e in iters)
    assert all(e["input_s"] is None and e["input_load_s"] > 0 for e in iters)
    assert not processes_mentioning(str(tmp_path)), "a Spark daemon or executor outlived the run"
    runs, _ = tables.load_events([events])
    assert runs.loc[0, "status"] == "ok" and pd.isna(runs.loc[0, "input_s"])


# --- memory mode: the part prepared before training, a fresh batch gathered per step --------------


@pytest.fixture
def small_shards(tmp_path) -> Path:
    """40 random MNIST-shaped samples in 3 shards: batches of 16 cross an epoch at the third."""
    from dlscale.data.shards import write_shards

    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(40, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, size=40)
    return write_shards(tmp_path / "shards", images, labels, dataset="mnist", split="train",
                        num_classes=10, shard_size=16, source="test")  # fmt: skip


def expected_batches(shards_dir: Path, rank: int, world: int, seed: int, steps: int) -> list:
    """What step after step must train on: the rank's rows of ``IndexBatches`` (seed + rank),
    each converted on its own from the raw uint8 rows (the runners' per-batch code)."""
    from dlscale.data.shards import IndexBatches, ShardSet
    from dlscale.runners.caffe.data import preprocess

    shards = ShardSet(shards_dir)
    images, labels = shards.load_part(rank, world)
    draws = IndexBatches(len(labels), 16, seed + rank)
    out = []
    for _ in range(steps):
        index = next(draws)
        out.append((index, preprocess(images[index], "lenet", shards.mean, shards.std), labels[index]))
    return out


@pytest.mark.parametrize("limit", [1 << 30, 0], ids=["prepared-whole", "per-batch"])
def test_caffe_memory_batches_are_the_fresh_ones_in_order(small_shards, monkeypatch, limit):
    from dlscale.runners.caffe import data as caffe_data

    monkeypatch.setattr(caffe_data, "prepare_whole", lambda images: images.size * 4 <= limit)
    batches = caffe_data.Batches(small_shards, 1, 2, 16, 5, "lenet")  # rank 1's 20 samples
    assert (batches.x_all is not None) == (limit > 0)
    data = np.full((16, 1, 28, 28), np.nan, dtype=np.float32)
    label = np.full((16,), -1.0, dtype=np.float32)
    seen = []
    for index, x, y in expected_batches(small_shards, 1, 2, 5, 4):  # 4 x 16 of 20: epochs turn
        batches.into(data, label)
        np.testing.assert_array_equal(data, x)  # bit for bit: the very floats of per-batch
        np.testing.assert_array_equal(label, y.astype(np.float32))
        seen.append(index)
    assert not np.array_equal(seen[0], seen[1])  # a fresh batch every step


def test_tensorflow_memory_feed_gathers_the_fresh_batch_in_order(small_shards):
    from dlscale.runners.tensorflow import batches as tf_batches

    class NumpyTF:  # the feed only makes tensors: a numpy stand-in for tf.constant
        constant = staticmethod(np.array)

    feed = tf_batches.MemoryFeed(NumpyTF, tf_batches.Batches(str(small_shards), 0, 2, 16, 5), "lenet")
    assert feed.x_all is not None and feed.x_all.shape == (20, 28, 28, 1)
    for _, x, y in expected_batches(small_shards, 0, 2, 5, 4):
        got_x, got_y = feed.next()
        np.testing.assert_array_equal(got_x, x.transpose(0, 2, 3, 1))  # NHWC, same floats
        np.testing.assert_array_equal(got_y, y)
        assert got_y.dtype == np.int64
    # ps mode keeps uint8 (the worker normalises): nothing prepared.
    raw = tf_batches.MemoryFeed(NumpyTF, tf_batches.Batches(str(small_shards), 0, 2, 16, 5), "lenet", False)
    assert raw.x_all is None and raw.next()[0].dtype == np.uint8


def test_bare_loop_dataset_draws_the_runner_batches(small_shards):
    """The benchmark's fair bare loop trains on the same fresh batches as a lone rank."""
    from benchmarks.bare_common import Dataset

    dataset = Dataset(small_shards, "lenet", nchw=True)
    batches = dataset.batches(16, 5)
    for _, x, y in expected_batches(small_shards, 0, 1, 5, 4):
        got_x, got_y = next(batches)
        np.testing.assert_array_equal(got_x, x)
        np.testing.assert_array_equal(got_y, y)


def test_prepare_whole_limit():
    from dlscale.runners.prepared import PREPARED_LIMIT_BYTES, prepare_whole

    mnist = np.empty((60000, 28, 28, 1), dtype=np.uint8)
    assert prepare_whole(mnist)  # 188 MB of float32
    assert not prepare_whole(np.empty((PREPARED_LIMIT_BYTES // 4 + 1,), dtype=np.uint8))
