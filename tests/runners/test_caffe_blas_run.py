"""The BLAS choice reaches a real Caffe run and its record (issue 32 item 3).

One Caffe build (linked to the generic libblas.so.3) runs LeNet for a few iterations on one
rank through dlscale.launch, as the training rule does, once with the default OpenBLAS and
once with BLIS (and MKL where its wheels are installed): each run's run_start names the
library its rank really mapped (/proc/self/maps after the first step), and they differ.
An implementation missing here is installed by scripts/caffe_blas.sh (as root) or skipped.
"""

from __future__ import annotations

import subprocess

import pytest
from helpers.caffe_runs import launch, spec
from helpers.paths import REPO

from dlscale.events import read_events
from dlscale.runners.caffe import blas


def ensure(name: str, python) -> None:
    """The implementation installed (rule caffe_blas's script), or the test skipped."""
    try:
        blas.library(name, {})
        return
    except blas.BlasNotInstalled:
        pass
    if name == "mkl":
        pytest.skip("MKL's wheels are not in the cache (scripts/caffe_blas.sh mkl: ~1 GB)")
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "caffe_blas.sh"), name, str(python)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.skip(f"{name} not installable here: {proc.stderr.strip()[-300:]}")


def run_with(name: str, caffe_py, mnist_shards, tmp_path) -> dict:
    ensure(name, caffe_py)
    options = {"log_every": 0} if name == "openblas" else {"log_every": 0, "blas": name}
    events_path = tmp_path / name / "events.jsonl"
    run_spec = spec(iterations=4, warmup=1, batch=64, timeout_s=120, options=options)
    proc = launch(caffe_py, run_spec, mnist_shards, events_path, retries=0)
    assert proc.returncode == 0, proc.stdout[-3000:]
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    return events[0]


@pytest.mark.parametrize("name", ["blis", "mkl"])
def test_the_run_loads_the_blas_it_asked_for_and_records_the_library_it_mapped(
    name, caffe_py, mnist_shards, tmp_path
):
    start = run_with(name, caffe_py, mnist_shards, tmp_path)
    loaded = start["measured"]["blas"]
    assert loaded["implementation"] == name, loaded
    assert loaded["library"] == str(blas.library(name, {}).resolve()), loaded
    assert start["settings"]["blas"] == name
    assert not any("openblas" in f for f in loaded["mapped"]), loaded  # not OpenBLAS beside it
    if name == "mkl":  # one thread: MKL's sequential layer, no OpenMP runtime
        assert "Intel" in loaded["version"] and any("libmkl_core" in f for f in loaded["mapped"])
        assert any("libmkl_sequential" in f for f in loaded["mapped"]), loaded
    else:
        assert loaded["version"].startswith("Debian libblis4-pthread "), loaded


def test_the_default_run_loads_openblas_through_the_same_build(caffe_py, mnist_shards, tmp_path):
    start = run_with("openblas", caffe_py, mnist_shards, tmp_path)
    loaded = start["measured"]["blas"]
    assert loaded["implementation"] == "openblas" and "blas" not in start["spec"]["options"]
    assert loaded["version"].startswith("OpenBLAS ")  # its config string: version and kernel core
    assert any("libopenblas" in f for f in loaded["mapped"])
