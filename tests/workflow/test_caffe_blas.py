"""Caffe's BLAS choice (issue 15): one cached build per BLAS, the run takes its own.

The MKL build itself is never made here (10-25 min): the workflow tests are dry runs that
show which build each job depends on and which marker its launcher is handed; the rest
checks the keys, the markers and the recorded settings directly.
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

from dlscale import envs, study, tuning
from dlscale.runners.caffe import launcher
from dlscale.runspec import RunSpec

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


def markers(workdir: Path) -> dict[str, str]:
    return {
        blas: str(envs.caffe_build_marker(workdir / "venvs", None, blas=blas)) for blas in envs.CAFFE_BLAS
    }


def launched_with(output: str) -> list[str]:
    """The Caffe marker each planned training (or tuning) run hands its launcher."""
    return re.findall(r"DLSCALE_CAFFE_MARKER=(\S+) .* -m dlscale\.launch ", output)


def test_the_default_study_builds_openblas_caffe_only(tmp_path):
    output = dry_run(tmp_path, TINY)
    built = markers(tmp_path)
    assert re.search(r"^caffe_build +1$", output, re.M)
    assert not re.search(r"^caffe_build_mkl +1$", output, re.M), "the MKL build must not be planned"
    assert launched_with(output) == [built["openblas"]]


def test_blas_mkl_plans_the_mkl_build_and_hands_its_marker_to_the_run(tmp_path):
    output = dry_run(tmp_path, {**TINY, "caffe": {"blas": "mkl"}})
    built = markers(tmp_path)
    assert re.search(r"^caffe_build_mkl +1$", output, re.M)
    assert "DLSCALE_CAFFE_BLAS=mkl" in output and built["mkl"] in output
    assert launched_with(output) == [built["mkl"]]
    assert not re.search(r"^caffe_build +1$", output, re.M), "the run needs the MKL build only"


def test_a_blas_grid_gives_each_tuning_run_its_own_build(tmp_path):
    config = {
        **TINY,
        "tune": {"enabled": True, "repeats": 2, "options": {"caffe": {"blas": ["openblas", "mkl"]}}},
    }
    output = dry_run(tmp_path, config)
    built = markers(tmp_path)
    assert re.search(r"^caffe_build_mkl +1$", output, re.M) and re.search(r"^caffe_build +1$", output, re.M)
    # 2 settings x 2 repeats; the study's run waits for the choice (its spec is not known yet).
    handed = launched_with(output)
    assert sorted(handed) == sorted([built["openblas"]] * 2 + [built["mkl"]] * 2), handed


def test_the_demo_config_does_not_tune_caffe_over_mkl():
    schema = study.load_schema(REPO / "schemas" / "config.schema.yaml")
    demo = study.validate_config(yaml.safe_load((REPO / "config.yaml").read_text()), schema, REPO)
    assert "blas" in tuning.tunable("caffe")  # tunable where a study asks for it
    assert all(setting.get("blas", "openblas") == "openblas" for setting in tuning.grid(demo, "caffe"))
    assert demo["caffe"]["blas"] == "openblas"


def test_each_blas_is_its_own_build_and_the_openblas_key_is_unchanged():
    old_formula = envs._sha16(
        envs.CAFFE_BUILD_SCRIPT.read_bytes(), envs.requirements_sha("caffe").encode(), b""
    )  # the key before there was a choice: existing OpenBLAS markers keep their names
    assert envs.caffe_build_key(None) == envs.caffe_build_key(None, blas="openblas") == old_formula
    assert envs.caffe_build_key(None, blas="mkl") != old_formula
    with pytest.raises(envs.EnvError, match="unknown Caffe BLAS 'atlas'"):
        envs.caffe_build_key(None, blas="atlas")
    assert "caffe-mkl" in envs.environments()  # the MKL wheels are locked like every env


def fake_home(root: Path) -> Path:
    for path in ("python/caffe/__init__.py", "build/tools/caffe"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).touch()
    return root


def test_a_marker_of_another_blas_is_refused_with_both_named(tmp_path):
    home = fake_home(tmp_path / "home")
    mkl = tmp_path / "mkl.json"
    mkl.write_text(json.dumps({"home": str(home), "blas": "mkl", "built": True}))
    before_choice = tmp_path / "old.json"  # an OpenBLAS build's marker from before the choice
    before_choice.write_text(json.dumps({"home": str(home), "built": True}))
    assert launcher.read_marker(mkl, "mkl") == home
    assert launcher.read_marker(before_choice, "openblas") == home
    with pytest.raises(launcher.CaffeNotFound, match="caffe.blas is openblas but .* BLAS=mkl"):
        launcher.caffe_home({"blas": "openblas"}, {"DLSCALE_CAFFE_MARKER": str(mkl)}, sys.executable)
    with pytest.raises(launcher.CaffeNotFound, match="caffe.blas is mkl but .* BLAS=open"):
        launcher.caffe_home({"blas": "mkl"}, {"DLSCALE_CAFFE_MARKER": str(before_choice)}, sys.executable)
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
    got = launcher.settings(spec(None, threads=1))
    assert got["blas"] == "openblas" and got["blas_threads"] == {"OPENBLAS_NUM_THREADS": 1}
    assert "OpenBLAS" in got["blas_library"]
    # The default stays out of the canonical spec: existing Caffe runs keep their hashes.
    assert "blas" not in spec("openblas").to_dict()["options"]
    assert spec("mkl").to_dict()["options"]["blas"] == "mkl"
