"""BigDL's CPU settings (issue 15) reach the driver's AND the executors' JVMs, and are recorded;
and every log of the run's processes lands in its own folder (issue 45).

One real run (LeNet, real MNIST, 2 nodes, 3 timed iterations: ~30 s on 2 loaded cores)
with a non-default setting of every kind: what each JVM got is read back from /proc by the
run itself (``bigdl-settings.json``), and the executors' own logs (MKL_VERBOSE /
MKLDNN_VERBOSE, kept beside the events) show the engine that computed and the runner's
log4j2 set-up; nothing new appears outside the run's folder but the JVM's per-user
``hsperfdata_<user>``. The rest are checks of the pure mapping.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers.bigdl_runs import assert_gone, daemon_pids, spec

from dlscale.events import read_events
from dlscale.runners.bigdl import settings as bigdl_settings
from dlscale.runners.bigdl.train import LOG4J2
from dlscale.runspec import RunSpec


def launch(python: Path, run_spec: dict, data: Path, events: Path) -> subprocess.CompletedProcess[str]:
    """The launcher as the training rule runs it, but never redone for a busy host: what is
    checked here is where the settings went, not a timing (a busy CI host would triple it).
    The events path is relative, as the workflow gives it (MKL-DNN's loader once failed on
    the relative scratch path that followed from it)."""
    cwd = events.parents[1]
    cmd = [
        str(python), "-m", "dlscale.launch", "--spec-json", json.dumps(run_spec), "--data", str(data),
        "--events", str(events.relative_to(cwd)), "--python", str(python), "--contended-retries", "0",
    ]  # fmt: skip
    return subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=900, cwd=cwd)


#: Names a Spark, log4j, BigDL or JVM process would give what it leaves behind (other
#: processes share the temporary folder, so only such names are compared), and the literal
#: unset log4j property BigDL's bundled configuration appends to.
JVM_NAMES = re.compile(
    r"spark|blockmgr|log4j|bigdl|executor|driver|worker|lz4|snappy|mkl|jna|netty|py4j|\$\{"
)
ALLOWED = re.compile(r"hsperfdata_")


def jvm_files(folder: Path) -> set[str]:
    return {name for name in os.listdir(folder) if JVM_NAMES.search(name.lower()) and not ALLOWED.match(name)}


def test_every_setting_reaches_the_driver_and_the_executors_and_every_log_stays_in_the_run(
    bigdl_py, mnist_shards, no_leftovers, monkeypatch
):  # noqa: F811
    # A variable the settings leave unset must not leak from the calling shell into the JVMs.
    monkeypatch.setenv("KMP_AFFINITY", "granularity=fine,compact")
    events_path = no_leftovers / "run" / "events.jsonl"
    options = {"engine": "mkldnn", "mkl_debug_cpu_type": 5, "kmp_blocktime": 0, "verbose": True}
    # Start-up (3 JVMs, BigDL's engine) took over 240 s here with a load of 34 on 2 cores.
    options["startup_timeout_s"] = 600
    # Nothing of the run's may appear outside its folder: the system temporary folder, the
    # test's and the launcher's working directories (a file left by an earlier run would hide
    # this run's: the literal unset-property name must not exist).
    temp = Path(tempfile.gettempdir())
    (temp / "${sys:logFilename}").unlink(missing_ok=True)
    outside = {folder: jvm_files(folder) for folder in (temp, Path.cwd(), no_leftovers)}
    proc = launch(bigdl_py, spec(nodes=2, iterations=3, warmup=1, **options), mnist_shards, events_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    for folder, names in outside.items():
        assert jvm_files(folder) - names == set(), f"new files in {folder}"
    events = read_events(events_path)
    start, end = events[0], events[-1]
    assert end["status"] == "ok", end
    # run_start: what the run asked for, and the variables its driver process was given.
    settings = start["settings"]
    assert settings["engine"] == "mkldnn" and settings["batch_split"] == "per_executor"
    assert settings["mkl_num_threads"] == 1 and settings["replicas_per_executor"] == 1
    assert settings["samples_per_replica"] == 64
    assert settings["env"]["MKL_DEBUG_CPU_TYPE"] == "5" and settings["env"]["KMP_BLOCKTIME"] == "0"
    # What each JVM carried, read back from /proc while it ran.
    seen = json.loads(events_path.with_name("bigdl-settings.json").read_text())
    jvms = {"driver": seen["driver"], **{f"executor {n}": r for n, r in seen["executors"].items()}}
    assert set(jvms) == {"driver", "executor 0", "executor 1"}
    assert len({jvm["pid"] for jvm in jvms.values()}) == 3
    for name, jvm in jvms.items():
        props = jvm["java_properties"]
        assert props["bigdl.engineType"] == "mkldnn", (name, props)
        assert props["bigdl.mklNumThreads"] == "1" and props["bigdl.multiModels"] == "false", (name, props)
        env = jvm["env"]
        assert env["MKL_DEBUG_CPU_TYPE"] == "5" and env["KMP_BLOCKTIME"] == "0", (name, env)
        assert env["OMP_NUM_THREADS"] == "1" and env["MKL_VERBOSE"] == "1", (name, env)
        assert env["KMP_AFFINITY"] is None, (name, env)
    # Each executor computed with MKL-DNN primitives (its own verbose output, kept with the run).
    run_dir = events_path.parent
    stdout_logs = sorted(run_dir.glob("spark-worker*-executor*.stdout.log"))
    assert len(stdout_logs) == 2, sorted(p.name for p in run_dir.iterdir())
    for path in stdout_logs:
        log = path.read_text(errors="replace")
        assert "mkldnn_verbose,exec,convolution" in log, path
        assert "MKL_VERBOSE Intel(R) MKL" in log, path  # the bundled MKL reports itself (and its code path)
    # Each executor logged through the runner's log4j2 set-up (its console, kept by its
    # worker), not BigDL's bundled one, whose console lines start with a 2-digit year.
    stderr_logs = sorted(run_dir.glob("spark-worker*-executor*.stderr.log"))
    assert len(stderr_logs) == 2, sorted(p.name for p in run_dir.iterdir())
    for log in stderr_logs:  # the worker writes the executor's command line first
        assert f"-Dlog4j2.configurationFile={LOG4J2}" in log.read_text(errors="replace"), log
    for log in run_dir.glob("spark-worker*-executor*.log"):
        assert not re.search(r"(?m)^\d\d-\d\d-\d\d \d\d:\d\d:\d\d \[", log.read_text(errors="replace")), log
    assert_gone(daemon_pids(output))


def test_a_model_mkldnn_refuses_is_a_failed_run_before_any_jvm(bigdl_py, mnist_shards, no_leftovers):  # noqa: F811
    # BigDL 2.4's MKL-DNN graph cannot run the AutoEncoder (its Sigmoid layers: the executors'
    # first forward fails with "InvalidOperationException: Haven't been implemented yet"):
    # refused with that reason before any JVM starts (settings.MKLDNN_REFUSES).
    events_path = no_leftovers / "ae" / "events.jsonl"
    run_spec = spec(model="autoencoder", nodes=1, iterations=2, warmup=1, engine="mkldnn")
    proc = launch(bigdl_py, run_spec, mnist_shards, events_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]  # recorded, not crashed, not hung
    end = read_events(events_path)[-1]
    assert end["status"] == "failed"
    assert "bigdl.engine=mkldnn cannot run the autoencoder: its nn.Sigmoid" in end["reason"], end["reason"]
    assert "daemon pids" not in proc.stdout


def test_innermost_cause_skips_the_wrappers():
    trace = (
        "org.apache.spark.SparkException: Job aborted\n"
        "Caused by: java.util.concurrent.ExecutionException: com.intel...UnKnownException: IRGraph[1]\n"
        "Caused by: com.intel.analytics.bigdl.dllib.utils.UnKnownException: IRGraph[a564d82f]\n"
        "Caused by: com.intel.analytics.bigdl.dllib.utils.InvalidOperationException: Haven't been implemented yet.\n"
        "\tat com.intel.analytics.bigdl.dllib.nn.abstractnn.AbstractModule.forward(AbstractModule.scala:295)\n"
    )
    assert bigdl_settings.innermost_cause(trace) == "InvalidOperationException: Haven't been implemented yet."
    assert bigdl_settings.innermost_cause("Caused by: java.util.concurrent.ExecutionException: x\n") is None
    assert bigdl_settings.innermost_cause("no trace at all") is None


def test_per_executor_split_with_mklblas_is_a_failed_run_before_any_jvm(bigdl_py, mnist_shards, no_leftovers):  # noqa: F811
    events_path = no_leftovers / "bad" / "events.jsonl"
    run_spec = {**spec(nodes=1, batch=64, batch_split="per_executor"), "threads_per_rank": 2}
    proc = launch(bigdl_py, run_spec, mnist_shards, events_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    end = read_events(events_path)[-1]
    assert end["status"] == "failed"
    assert "bigdl.batch_split=per_executor needs bigdl.engine=mkldnn" in end["reason"], end["reason"]
    assert "daemon pids" not in proc.stdout


def run_spec(threads: int = 1, ranks: int = 1, **options) -> RunSpec:
    data = spec(nodes=1, **options)
    world = ranks
    return RunSpec.from_dict(
        {
            **data,
            "ranks_per_node": ranks,
            "world_size": world,
            "global_batch": 64 * world,
            "threads_per_rank": threads,
        }
    )


def test_engine_defaults_and_batch_split():
    # BigDL's defaults: mklblas, one replica per core with one MKL thread each.
    eng = bigdl_settings.engine_settings(run_spec(threads=2))
    assert eng.properties == {
        "bigdl.engineType": "mklblas",
        "bigdl.mklNumThreads": "1",
        "bigdl.multiModels": "true",
    }
    assert eng.replicas_per_executor == 2 and eng.env == {"OMP_NUM_THREADS": "1"}
    got = bigdl_settings.describe(run_spec(threads=2))
    assert got["samples_per_replica"] == 32 and got["core_number"] == 2 and "mkldnn" not in got
    # mkldnn: one replica on the executor's share, with the executor's cores as threads (not
    # BigDL's own default of every core the JVM may use).
    eng = bigdl_settings.engine_settings(run_spec(threads=2, engine="mkldnn"))
    assert eng.multi_models is False and eng.mkl_num_threads == 2 and eng.env["OMP_NUM_THREADS"] == "2"
    assert bigdl_settings.describe(run_spec(threads=2, engine="mkldnn"))["samples_per_replica"] == 64
    eng = bigdl_settings.engine_settings(run_spec(threads=2, engine="mkldnn", batch_split="per_core"))
    assert eng.properties["bigdl.multiModels"] == "true" and eng.mkl_num_threads == 1
    with pytest.raises(bigdl_settings.BigDLSettingsError, match="per_executor needs bigdl.engine=mkldnn"):
        bigdl_settings.engine_settings(run_spec(threads=2, batch_split="per_executor"))
    with pytest.raises(bigdl_settings.BigDLSettingsError, match="mkldnn cannot run the autoencoder"):
        bigdl_settings.engine_settings(RunSpec.from_dict(spec(model="autoencoder", nodes=1, engine="mkldnn")))
    assert (
        bigdl_settings.engine_settings(RunSpec.from_dict(spec(model="autoencoder", nodes=1))).engine
        == "mklblas"
    )
    # The same at one core: nothing to split.
    assert (
        bigdl_settings.engine_settings(run_spec(threads=1, batch_split="per_executor")).replicas_per_executor
        == 1
    )


def test_new_options_stay_out_of_the_canonical_spec_at_their_default():
    plain = run_spec().to_dict()["options"]
    for option in (
        "engine",
        "mkl_debug_cpu_type",
        "batch_split",
        "mkl_num_threads",
        "kmp_affinity",
        "verbose",
    ):
        assert option not in plain
    assert run_spec(engine="mkldnn").to_dict()["options"]["engine"] == "mkldnn"


def test_a_jvm_without_a_setting_is_a_mismatch(tmp_path):
    """``observed`` on a real process (this test's child) and ``mismatches`` on what it lacks."""
    eng = bigdl_settings.engine_settings(run_spec(mkl_debug_cpu_type=5))
    env = {k: v for k, v in os.environ.items() if k not in bigdl_settings.MANAGED_VARS}
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "-Dbigdl.engineType=mklblas"],
        env={**env, "OMP_NUM_THREADS": "1", "KMP_AFFINITY": "compact"},
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 20
        while b"time.sleep" not in Path(f"/proc/{child.pid}/cmdline").read_bytes():  # exec'd yet?
            assert time.time() < deadline, "the child never started"
            time.sleep(0.05)
        seen = bigdl_settings.observed(child.pid, eng)
    finally:
        child.kill()
        child.wait()
    assert seen["java_properties"] == {"bigdl.engineType": "mklblas"}
    wrong = bigdl_settings.mismatches(seen, eng)
    assert any(w.startswith("-Dbigdl.mklNumThreads=None") for w in wrong), wrong
    assert "MKL_DEBUG_CPU_TYPE=None (expected '5')" in wrong
    assert "KMP_AFFINITY='compact' (expected None)" in wrong
