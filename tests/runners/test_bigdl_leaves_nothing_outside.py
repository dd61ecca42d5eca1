"""A BigDL run writes every log of its processes (driver, Spark's master, workers and
executors) inside its own folder: nothing new in the system temporary folder or the working
directory but the JVM's per-user ``hsperfdata_<user>`` folder."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from helpers.bigdl_runs import run_ok, spec

from dlscale.runners.bigdl.train import LOG4J2

#: Names a Spark, log4j, BigDL or JVM process would give what it leaves behind (other
#: processes share the temporary folder, so only such names are compared), and the literal
#: unset log4j property BigDL's bundled configuration appends to.
JVM_NAMES = re.compile(
    r"spark|blockmgr|log4j|bigdl|executor|driver|worker|lz4|snappy|mkl|jna|netty|py4j|\$\{"
)
ALLOWED = re.compile(r"hsperfdata_")


def jvm_files(folder: Path) -> set[str]:
    return {name for name in os.listdir(folder) if JVM_NAMES.search(name.lower()) and not ALLOWED.match(name)}


def test_a_run_leaves_no_file_outside_its_folder(bigdl_py, mnist_shards, no_leftovers):
    temp, cwd = Path(tempfile.gettempdir()), Path.cwd()
    # A file left by an earlier run would hide this run's: the literal name must not exist.
    (temp / "${sys:logFilename}").unlink(missing_ok=True)
    before = {temp: jvm_files(temp), cwd: jvm_files(cwd)}
    # verbose: the executors' logs are kept beside the events, so the test can read them.
    run_spec = spec(nodes=2, iterations=6, warmup=1, verbose=True)
    run_ok(bigdl_py, run_spec, mnist_shards, no_leftovers)
    for folder, names in before.items():
        assert jvm_files(folder) - names == set(), f"new files in {folder}"
    # Each executor logged through the runner's log4j2 set-up (its console, kept by its
    # worker), not BigDL's bundled one, whose console lines start with a 2-digit year.
    stderr_logs = sorted((no_leftovers / "run").glob("spark-worker*-executor*.stderr.log"))
    assert len(stderr_logs) == 2, sorted(p.name for p in (no_leftovers / "run").iterdir())
    for log in stderr_logs:  # the worker writes the executor's command line first
        assert f"-Dlog4j2.configurationFile={LOG4J2}" in log.read_text(errors="replace"), log
    for log in (no_leftovers / "run").glob("spark-worker*-executor*.log"):
        assert not re.search(r"(?m)^\d\d-\d\d-\d\d \d\d:\d\d:\d\d \[", log.read_text(errors="replace")), log
