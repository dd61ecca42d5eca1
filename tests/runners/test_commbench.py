"""dlscale.commbench: one module per framework, the blob lists, the sweep, a real run of the cheap ones."""

from __future__ import annotations

import csv
import importlib
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import REPO, framework_python

from dlscale import catalog, commbench
from dlscale.commbench import blobs, common
from dlscale.host import netns


def test_every_benchmark_module_has_its_entry_points_and_every_set_up_a_library() -> None:
    """A framework's module is optional (``has_module``); the written ones stay."""
    assert {"torch", "tensorflow", "bigdl", "caffe", "jax", commbench.TCP} <= {
        name for name in [*catalog.FRAMEWORK_NAMES, commbench.TCP] if commbench.has_module(name)
    }
    for name in [*catalog.FRAMEWORK_NAMES, commbench.TCP]:
        if commbench.has_module(name):
            module = importlib.import_module(commbench.module_of(name))
            assert callable(module.main) and callable(module.rank_main), name
    assert not commbench.has_module("no-such-framework")
    assert set(commbench.LIBRARIES) == set(catalog.SETUP_PATTERNS)


def test_blob_sizes_add_up_to_the_catalog() -> None:
    for model in catalog.MODEL_NAMES:
        assert sum(blobs.blob_parameters(model)) == catalog.PARAMETERS[model]
    assert blobs.blob_parameters("lenet") == (500, 20, 25000, 50, 400000, 500, 5000, 10)
    assert len(blobs.blob_parameters("resnet50")) == 161  # 53 convolutions, 53 x (gamma, beta), fc
    assert blobs.blob_bytes("lenet")[0] == 2000


def test_sweep_sizes() -> None:
    assert commbench.log_sizes(1024, 256 << 20, per_octave=0.5)[:3] == [1024, 4096, 16384]
    assert commbench.log_sizes(1024, 256 << 20, per_octave=0.5)[-1] == 256 << 20
    sizes = [1024, 1 << 20, 64 << 20, 256 << 20]
    assert common.sizes_for(sizes, "host", 2.0) == sizes
    # 100 Mbit/s: 2 x 64 MB would take 10 s
    assert common.sizes_for(sizes, "emulated-100mbe", 2.0) == [1024, 1 << 20]
    assert common.sizes_for([256 << 20], "emulated-100mbe", 2.0) == [256 << 20]  # the smallest stays
    with pytest.raises(ValueError):
        commbench.log_sizes(1, 10)


def test_rows_are_written_whole_with_every_column(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    common.write_rows(
        [{"op": "allreduce", "world": 2, "nbytes": 4, "repeat": 0, "seconds": 0.5}],
        out,
        network="host",
        framework="torch",
        library="gloo",
    )
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(commbench.RAW_COLUMNS)
    assert rows[0]["library"] == "gloo" and rows[0]["parts"] == "1" and int(rows[0]["host_cores"]) >= 1


def run_bench(python: Path, name: str, out: Path, *args: str, timeout: int = 300) -> pd.DataFrame:
    proc = subprocess.run(
        [
            str(python),
            "-m",
            commbench.module_of(name),
            *args,
            "--repeats",
            "2",
            "--timeout-s",
            "120",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pd.read_csv(out)


def test_tcp_ping_pong_on_the_host(tmp_path: Path) -> None:
    table = run_bench(Path(sys.executable), "tcp", tmp_path / "tcp.csv", "--sizes", "1024", "1048576")
    assert set(table["op"]) == {"pingpong"} and len(table) == 4
    assert (table["seconds"] > 0).all() and set(table["nbytes"]) == {1024, 1048576}


@pytest.mark.skipif(netns.unavailable(shaping=True) is not None, reason="needs root and iproute2")
def test_tcp_ping_pong_sees_the_emulated_bandwidth(tmp_path: Path) -> None:
    table = run_bench(
        Path(sys.executable), "tcp", tmp_path / "tcp.csv", "--network", "emulated-1gbe", "--sizes", "4194304"
    )
    # 4 MiB at 1 Gbit/s is 33.6 ms (minus the 256 KiB the token bucket lets through at once)
    assert table["seconds"].median() == pytest.approx((4194304 - 262144) / 125e6, rel=0.35)


def test_gloo_all_reduce_on_two_ranks(tmp_path: Path, torch_py: Path) -> None:
    # The torch venv is built if missing (never skipped: a fresh CI machine has none yet).
    table = run_bench(torch_py, "torch", tmp_path / "gloo.csv", "--worlds", "2", "--sizes", "4096")
    assert set(table["library"]) == {"gloo"} and set(table["world"]) == {2} and len(table) == 2


def test_jax_psum_on_two_ranks_over_gloo(tmp_path: Path) -> None:
    """JAX's all-reduce as its runner does it (a jitted shard_map psum, over gloo), on the
    emulated network where there is one: each rank in its own namespace, on its address."""
    network = "emulated-1gbe" if netns.unavailable(shaping=True) is None else "host"
    jax_py = framework_python("jax")
    table = run_bench(
        jax_py,
        "jax",
        tmp_path / "jax.csv",
        "--network",
        network,
        "--worlds",
        "2",
        "--sizes",
        "4096",
        "4194304",
    )
    assert set(table["library"]) == {commbench.LIBRARIES["jax"]} and set(table["world"]) == {2}
    assert len(table) == 4 and (table["seconds"] > 0).all()
    if network != "host":  # 4 MiB each way through a 1 Gbit/s link: tens of milliseconds
        assert table.loc[table["nbytes"] == 4194304, "seconds"].median() > 0.02


def test_spark_jobs_and_shuffles_on_two_executors(tmp_path: Path) -> None:
    """BigDL's path (Spark standalone with authentication, as the runner starts it): a job
    round trip and a shuffle per executor count. It ran in no test before, and broke
    unseen when the runner's clusters began to require a secret."""
    subprocess.run(["bash", str(REPO / "scripts" / "ensure-java.sh")], check=True, timeout=900)
    bigdl_py = framework_python("bigdl")
    table = run_bench(
        bigdl_py, "bigdl", tmp_path / "spark.csv", "--executors", "1", "2", "--sizes", "65536", timeout=600
    )
    assert set(table["library"]) == {"spark"} and set(table["op"]) == {"job", "shuffle"}
    assert set(table["world"]) == {1, 2}
    assert (table["seconds"] > 0).all()
