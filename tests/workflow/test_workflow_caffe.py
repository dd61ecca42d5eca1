"""The workflow with Caffe beside the other frameworks, end to end on the local profile.

The session's tiny four-framework study (tests/workflow/conftest.py: LeNet on real MNIST, 1
and 2 emulated nodes): the Caffe build rule (cached: instant after the first build on a
machine), MPI training runs, the `caffe time` per-layer figure in the report; and, in a
study of its own (``TINY``), ``caffe.home`` naming an existing install.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.paths import ENVS_DIR, REPO
from helpers.workflow import FOUR_FRAMEWORKS

from dlscale.envs import caffe_build_marker

pytestmark = pytest.mark.workflow

TINY = {
    "frameworks": ["torch", "caffe"],
    "models": ["lenet"],
    "nodes": [1, 2],
    "iterations": {"lenet": 20},
    "warmup": 2,
    "repeats": 1,
    "envs_dir": str(ENVS_DIR),
    "caffe": {"time_iterations": 2},
}


def snakemake(workdir: Path, *args: str, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(workdir), "--profile", str(REPO / "profiles" / "local"),
        *args, "--configfile", str(workdir / "study.yaml"),  # last: it takes several values
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)


@pytest.fixture(scope="module")
def study_dir(four_framework_study) -> Path:
    return four_framework_study


def test_caffe_and_torch_runs_in_one_table(study_dir):
    runs = pd.read_csv(study_dir / "results" / "runs.csv").set_index("run_id")
    assert {"caffe/lenet/n1x1/b64/r0", "caffe/lenet/n2x1/b64/r0", "torch/lenet/n1x1/b64/r0"} <= set(
        runs.index
    )
    assert (runs["status"] == "ok").all(), runs[["reason"]]
    caffe = runs[runs["framework"] == "caffe"]
    assert (caffe["throughput"] > 0).all() and (
        caffe["timed_iterations"] == FOUR_FRAMEWORKS["iterations"]["lenet"]
    ).all()
    assert caffe.loc["caffe/lenet/n2x1/b64/r0", "comm_s"] > 0
    assert caffe.loc["caffe/lenet/n1x1/b64/r0", "comm_s"] == 0
    assert caffe.loc["caffe/lenet/n2x1/b64/r0", "world_size"] == 2
    assert "caffe" in caffe.loc["caffe/lenet/n1x1/b64/r0", "versions"]
    events = [
        json.loads(line) for line in (study_dir / "results/runs/caffe/lenet/n2x1/b64/r0/events.jsonl").open()
    ]
    assert events[0]["launcher"] == "local" and events[-1]["status"] == "ok"


def test_per_layer_figure_and_report(study_dir, four_framework_report):
    timed = [json.loads(line) for line in (study_dir / "results/caffe/time/lenet.jsonl").open()]
    layers = [e["layer"] for e in timed if e["event"] == "layer_time"]
    assert layers == ["data", "conv1", "pool1", "conv2", "pool2", "ip1", "relu1", "ip2", "loss"]
    bench = next(e for e in timed if e["event"] == "benchmark")
    assert (
        bench["batch"] == 64
        and bench["iterations"] == FOUR_FRAMEWORKS["caffe"]["time_iterations"]
        and bench["forward_backward_ms"] > 0
    )
    figures = study_dir / "results" / "figures"
    assert (figures / "caffe_layers_lenet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (figures / "caffe_layers_lenet.svg").read_bytes()[:2000]
    assert "caffe_layers_lenet.svg" in four_framework_report.read_text()


def test_second_invocation_does_nothing(study_dir):
    proc = snakemake(study_dir, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_build_rule_takes_the_cache_or_caffe_home(tmp_path, caffe_py):
    """caffe_build: the machine's cached build (instant), or caffe.home checked and named."""
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "caffe").symlink_to(ENVS_DIR / "caffe")  # the same venv, a marker of its own
    marker = caffe_build_marker(envs, None)
    log = tmp_path / "results" / "logs" / "envs" / "caffe-build.log"
    study = {**TINY, "envs_dir": str(envs)}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    proc = snakemake(tmp_path, str(marker))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Building Caffe from source (once per machine" in proc.stdout + proc.stderr
    built = json.loads(marker.read_text())
    assert built["built"] is True and "build_caffe: cached: " in log.read_text()
    home = built["home"]
    assert (
        Path(home, "build", "tools", "caffe").exists() and Path(home, "python", "caffe", "_caffe.so").exists()
    )

    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**study, "caffe": {"home": home}}))
    marker = caffe_build_marker(envs, home)  # named by caffe.home too: a new marker
    proc = snakemake(tmp_path, str(marker))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"Using the Caffe install at {home}" in proc.stdout + proc.stderr
    assert json.loads(marker.read_text()) == {"home": home, "built": False}

    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**study, "caffe": {"home": str(tmp_path)}}))
    proc = snakemake(tmp_path, str(caffe_build_marker(envs, str(tmp_path))))
    # Refused by the preflight before any job (the build rule never starts), naming what is missing.
    assert proc.returncode != 0
    assert f"caffe.home {tmp_path} is not a built Caffe tree: missing" in proc.stdout + proc.stderr
    assert "python/caffe/__init__.py" in proc.stdout + proc.stderr
