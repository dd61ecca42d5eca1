"""Caffe's BLAS choice (issue 32 item 3): one Caffe build, the BLAS chosen at run time.

The build is never made here: the workflow tests are dry runs that show one build job
whatever the BLAS, the BLAS implementation(s) installed beside it (rule caffe_blas) and the
build marker every run's launcher is handed; the rest checks the keys, the markers and the
recorded settings directly. A real run with each BLAS: tests/runners/test_caffe_blas_run.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO

from dlscale import envs
from dlscale.catalog import CONFIG_SCHEMA
from dlscale.runners.caffe import launcher
from dlscale.runspec import RunSpec
from dlscale.study import validation
from dlscale.tune import grid

TINY = {
    "frameworks": ["caffe"],
    "models": ["lenet"],
    "nodes": [1],
    "iterations": {"lenet": 4},
    "warmup": 1,
    "repeats": 1,
    "commbench": {"enabled": False},
}


def dry_run(workdir: Path, config: dict) -> str:
    """``snakemake --dry-run --printshellcmds`` of a study; its whole output."""
    (workdir / "study.yaml").write_text(yaml.safe_dump({**config, "envs_dir": str(workdir / "venvs")}))
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--profile", str(REPO / "profiles" / "local"), "--dry-run", "--printshellcmds",
        "--configfile", str(workdir / "study.yaml"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=workdir)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def build_marker(workdir: Path) -> str:
    return str(envs.caffe_build_marker(workdir / "venvs", None))


def blas_markers(workdir: Path) -> dict[str, str]:
    return {blas: str(envs.caffe_blas_marker(workdir / "venvs", blas)) for blas in envs.CAFFE_BLAS}


def launched_with(output: str) -> list[str]:
    """The Caffe marker each planned training (or tuning) run hands its launcher."""
    return re.findall(r"DLSCALE_CAFFE_MARKER=(\S+) .* -m dlscale\.launch ", output)


def jobs(output: str, rule: str) -> int:
    """How many jobs of ``rule`` the dry run plans (its job-count table)."""
    found = re.search(rf"^{rule} +(\d+)$", output, re.M)
    return int(found.group(1)) if found else 0


def test_the_default_study_plans_one_build_and_openblas(tmp_path):
    output = dry_run(tmp_path, TINY)
    assert jobs(output, "caffe_build") == 1 and jobs(output, "caffe_blas") == 1
    assert blas_markers(tmp_path)["openblas"] in output
    assert launched_with(output) == [build_marker(tmp_path)]
    assert "caffe_build_mkl" not in output


def test_blas_mkl_plans_the_same_one_build_and_installs_mkl_beside_it(tmp_path):
    output = dry_run(tmp_path, {**TINY, "caffe": {"blas": "mkl"}})
    assert jobs(output, "caffe_build") == 1 and jobs(output, "caffe_blas") == 1
    assert blas_markers(tmp_path)["mkl"] in output and "caffe_blas.sh" in output
    assert launched_with(output) == [build_marker(tmp_path)]
    assert re.search(r'\\?"blas\\?": \\?"mkl\\?"', output), "the run's spec names mkl"


def test_a_blas_grid_is_one_build_and_each_implementation_installed_once(tmp_path):
    config = {
        **TINY,
        "tune": {"enabled": True, "repeats": 2, "options": {"caffe": {"blas": ["openblas", "blis", "mkl"]}}},
    }
    output = dry_run(tmp_path, config)
    assert jobs(output, "caffe_build") == 1, "one compile whatever the BLAS"
    assert jobs(output, "caffe_blas") == 3
    # 3 settings x 2 repeats at least (the race may plan more), every one handed the same build.
    handed = launched_with(output)
    assert len(handed) >= 6 and set(handed) == {build_marker(tmp_path)}, handed


def job_block(output: str, produced: str) -> str:
    """The dry run's block of the job that writes ``produced`` (its header to the next)."""
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", output)
    found = [block for block in blocks if re.search(rf"output: .*{re.escape(produced)}", block)]
    assert len(found) == 1, f"{produced}: {len(found)} jobs write it"
    return found[0]


def test_caffe_micro_benchmarks_wait_for_the_build_that_installs_open_mpi(tmp_path):
    """Their mpirun is the Open MPI the build's system step installs: on a fresh machine a
    micro-benchmark scheduled before the build failed with "mpirun not found"."""
    config = {**TINY, "commbench": {"enabled": True, "worlds": [2], "networks": ["host"]}}
    block = job_block(dry_run(tmp_path, config), "results/perfmodel/commbench/caffe-host.csv")
    inputs = re.search(r"input: (.*)", block)
    assert inputs and build_marker(tmp_path) in inputs.group(1), block


def test_the_full_tuning_races_caffe_over_its_three_blas_and_the_demo_keeps_openblas():
    """No compile per BLAS any more: studies/tune-full.yaml races them (its study runs keep
    OpenBLAS unless one of the others separates from it); the demo keeps OpenBLAS unraced,
    the choice every demo race made (docs/tuning.md)."""
    schema = validation.load_schema(CONFIG_SCHEMA)

    def study(path: str) -> dict:
        text = yaml.safe_load((REPO / path).read_text())
        return validation.validate_config(text, schema, REPO)

    assert grid.tunable("caffe")["blas"] == ["openblas", "blis", "mkl"]
    full = study("studies/tune-full.yaml")
    assert sorted(setting.get("blas", "openblas") for setting in grid.grid(full, "caffe")) == [
        "blis",
        "mkl",
        "openblas",
    ]
    demo = study("config.yaml")
    assert grid.grid(demo, "caffe") == [] and demo["caffe"]["blas"] == "openblas"


def test_one_build_key_whatever_the_blas_and_one_marker_per_implementation():
    assert envs.caffe_build_key(None) == envs._sha16(
        envs.CAFFE_BUILD_SCRIPT.read_bytes(), envs.requirements_sha("caffe").encode(), b""
    )  # the build script (its link line, -lblas) keys it: a -lopenblas build has another key
    assert b"BLAS=libblas.so.3" in envs.CAFFE_BUILD_SCRIPT.read_bytes()
    named = {blas: envs.caffe_blas_marker(Path("/v"), blas).name for blas in envs.CAFFE_BLAS}
    assert len(set(named.values())) == 3 and named["blis"].startswith("caffe-blas-blis-")
    with pytest.raises(envs.EnvError, match="unknown Caffe BLAS 'atlas'"):
        envs.caffe_blas_marker(Path("/v"), "atlas")
    assert "caffe-mkl" in envs.environments()  # the MKL wheels are locked like every env


def fake_home(root: Path) -> Path:
    for path in ("python/caffe/__init__.py", "build/tools/caffe"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).touch()
    return root


def test_the_generic_build_serves_every_blas_and_an_old_one_only_its_own(tmp_path):
    home = fake_home(tmp_path / "home")
    generic = tmp_path / "generic.json"
    generic.write_text(json.dumps({"home": str(home), "blas": "libblas.so.3", "built": True}))
    for blas in envs.CAFFE_BLAS:
        assert launcher.read_marker(generic, blas) == home
    mkl = tmp_path / "mkl.json"  # a build from before, linked to MKL by name
    mkl.write_text(json.dumps({"home": str(home), "blas": "mkl", "built": True}))
    before_choice = tmp_path / "old.json"  # an OpenBLAS build's marker from before the choice
    before_choice.write_text(json.dumps({"home": str(home), "built": True}))
    assert launcher.read_marker(mkl, "mkl") == home
    assert launcher.read_marker(before_choice, "openblas") == home
    with pytest.raises(launcher.CaffeNotFound, match="caffe.blas is openblas but .* BLAS=mkl by name"):
        launcher.caffe_home({"blas": "openblas"}, {"DLSCALE_CAFFE_MARKER": str(mkl)}, sys.executable)
    with pytest.raises(launcher.CaffeNotFound, match="caffe.blas is blis but .* BLAS=open by name"):
        launcher.caffe_home({"blas": "blis"}, {"DLSCALE_CAFFE_MARKER": str(before_choice)}, sys.executable)
    users_own = tmp_path / "own.json"  # caffe.home: a user's Caffe, whatever its BLAS
    users_own.write_text(json.dumps({"home": str(home), "built": False}))
    assert launcher.read_marker(users_own, "mkl") == home


def spec(blas: str | None, threads: int = 2) -> RunSpec:
    options = {} if blas is None else {"blas": blas}
    return RunSpec.from_dict(
        {
            "framework": "caffe", "model": "lenet", "nodes": 1, "ranks_per_node": 1, "batch": 64,
            "repeat": 0, "run_id": "caffe/lenet/n1x1/b64/r0", "world_size": 1, "scaling": "weak",
            "global_batch": 64, "dataset": "mnist", "iterations": 4, "warmup": 1,
            "threads_per_rank": threads, "learning_rate": 0.01, "momentum": 0.9, "seed": 1,
            "timeout_s": 60, "options": options,
        }
    )  # fmt: skip


def test_settings_name_the_blas_its_version_and_threads():
    mkl_version = envs.parse_lock(envs.SPEC_DIR / "caffe-mkl.lock")["mkl"]["version"]
    got = launcher.settings(spec("mkl", threads=2))
    assert got["blas"] == "mkl" and got["blas_threads"] == {"MKL_NUM_THREADS": 2}
    assert f"Intel MKL {mkl_version}" in got["blas_library"]
    got = launcher.settings(spec("blis", threads=2))
    assert got["blas"] == "blis" and got["blas_threads"] == {"BLIS_NUM_THREADS": 2}
    assert "BLIS" in got["blas_library"]
    got = launcher.settings(spec(None, threads=1))
    assert got["blas"] == "openblas" and got["blas_threads"] == {"OPENBLAS_NUM_THREADS": 1}
    assert "OpenBLAS" in got["blas_library"]
    # The default stays out of the canonical spec: existing Caffe runs keep their hashes.
    assert "blas" not in spec("openblas").to_dict()["options"]
    assert spec(None).sha256 == spec("openblas").sha256 != spec("blis").sha256
    assert spec("mkl").to_dict()["options"]["blas"] == "mkl"
