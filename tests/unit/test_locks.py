"""The locked environments (envs/<env>.lock) and how the venv markers follow them.

No framework venv is built here (minutes each): the locks are parsed, and the markers'
names computed on a copy of envs/. Building the workflow's locked venv from scratch and
comparing its `pip freeze` was measured by hand (README, "Handing a study to someone
else").
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from dlscale import catalog, envs

LOCAL_TORCH_WHEELS = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """A copy of the repository's envs/ (requirements and locks) to edit."""
    copy = tmp_path / "envs"
    shutil.copytree(envs.SPEC_DIR, copy)
    return copy


@pytest.mark.parametrize("env", envs.environments())
def test_every_lock_pins_every_package_with_a_hash(env):
    for requirements in envs.requirement_files(env):
        lock = envs.check_lock(requirements)  # present, and made from the current requirements
        packages = envs.parse_lock(lock)  # every entry name==version with sha256 hashes
        assert packages, f"{lock} pins nothing"
        for entry in packages.values():
            assert entry["hashes"], entry
            assert all(len(digest) == 64 for digest in entry["hashes"]), entry
        # What the requirements file names is in the lock (the rest are its dependencies).
        for line in envs.requirement_lines(requirements):
            name = envs.normalise(line.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0])
            assert name in packages, f"{lock} lacks {name} (from {requirements.name})"


def test_every_framework_and_the_workflow_have_a_lock():
    for env in [*(fw.env for fw in catalog.FRAMEWORKS.values()), envs.WORKFLOW_ENV]:
        assert envs.lock_path(envs.requirement_files(env)[0]).is_file(), env
    # BigDL's --no-deps wheels are locked too, and installed from their own lock.
    assert [p.name for p in envs.lock_files("bigdl")] == ["bigdl.lock", "bigdl.nodeps.lock"]
    assert set(envs.parse_lock(envs.SPEC_DIR / "bigdl.nodeps.lock")) == {"bigdl-dllib-spark3", "bigdl-core"}


def test_torch_is_the_local_cpu_wheel():
    torch = envs.parse_lock(envs.SPEC_DIR / "torch.lock")["torch"]
    assert torch["version"] == "2.13.0+cpu"
    for wheel in LOCAL_TORCH_WHEELS:  # where this machine kind has it, its hash is the lock's
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() in torch["hashes"]
    for name in envs.parse_lock(envs.SPEC_DIR / "torch.lock"):
        assert not name.startswith("nvidia-"), f"torch.lock pulls CUDA ({name})"


def test_the_marker_is_named_by_the_lock(spec: Path, tmp_path: Path):
    venvs = tmp_path / "venvs"
    lock = spec / "torch.lock"
    marker = envs.env_marker(venvs, "torch", spec)
    assert marker.name == f"dlscale-env-{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}.json"
    assert envs.lock_sha256("torch", spec) == hashlib.sha256(lock.read_bytes()).hexdigest()
    others = {fw: envs.env_marker(venvs, fw, spec) for fw in ("tensorflow", "bigdl", "caffe")}
    caffe_build = envs.caffe_build_marker(venvs, None, spec)

    lock.write_text(lock.read_text() + "# a changed lock\n")
    changed = envs.env_marker(venvs, "torch", spec)
    assert changed != marker
    assert changed.name == f"dlscale-env-{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}.json"
    assert {fw: envs.env_marker(venvs, fw, spec) for fw in others} == others
    assert envs.caffe_build_marker(venvs, None, spec) == caffe_build


def test_bigdl_marker_follows_its_nodeps_lock_and_caffe_build_follows_caffe_lock(spec: Path, tmp_path: Path):
    venvs = tmp_path / "venvs"
    bigdl = envs.env_marker(venvs, "bigdl", spec)
    nodeps = spec / "bigdl.nodeps.lock"
    nodeps.write_text(nodeps.read_text() + "# changed\n")
    assert envs.env_marker(venvs, "bigdl", spec) != bigdl

    build = envs.caffe_build_marker(venvs, None, spec)
    assert envs.marker_key(build) == envs.caffe_build_key(None, spec)
    caffe = spec / "caffe.lock"
    caffe.write_text(caffe.read_text() + "# changed\n")
    assert envs.caffe_build_marker(venvs, None, spec) != build
    assert envs.caffe_build_marker(venvs, "/opt/caffe", spec) != envs.caffe_build_marker(venvs, None, spec)


def test_a_comment_in_the_requirements_keeps_the_lock(spec: Path, tmp_path: Path):
    marker = envs.env_marker(tmp_path, "torch", spec)
    requirements = spec / "torch.txt"
    requirements.write_text("# a new comment\n" + requirements.read_text() + "\n\n")
    assert envs.env_marker(tmp_path, "torch", spec) == marker


def test_a_changed_requirement_without_make_lock_is_refused(spec: Path, tmp_path: Path):
    requirements = spec / "torch.txt"
    requirements.write_text(requirements.read_text() + "filelock\n")
    with pytest.raises(envs.LockError, match=r"torch.lock is stale: .*torch.txt changed .*make lock"):
        envs.env_marker(tmp_path, "torch", spec)
    (spec / "tensorflow.lock").unlink()
    with pytest.raises(envs.LockError, match=r"tensorflow.lock is missing: run `make lock`"):
        envs.requirements_sha("tensorflow", spec)


def test_parse_lock_refuses_what_pip_require_hashes_would(tmp_path: Path):
    lock = tmp_path / "x.lock"
    lock.write_text("six==1.16.0\n")
    with pytest.raises(envs.LockError, match="six==1.16.0 has no --hash"):
        envs.parse_lock(lock)
    lock.write_text("six>=1.16 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(envs.LockError, match=r"x.lock:1: not an exact pin"):
        envs.parse_lock(lock)
    lock.write_text("six==1.16.0 \\\n    --hash=md5:" + "0" * 32 + "\n")
    with pytest.raises(envs.LockError, match="md5"):
        envs.parse_lock(lock)
    lock.write_text(
        "Six==1.16.0 \\\n    --hash=sha256:" + "a" * 64 + " \\\n    --hash=sha256:" + "b" * 64 + "\n"
    )
    assert envs.parse_lock(lock) == {
        "six": {"name": "Six", "version": "1.16.0", "hashes": ["a" * 64, "b" * 64]}
    }


def test_env_record_is_what_the_launcher_records(tmp_path: Path):
    marker = tmp_path / "dlscale-env-0123456789abcdef.json"
    marker.write_text(
        '{"env": "torch", "locks": ["torch.lock"], "lock_sha256": "' + "f" * 64 + '", "python": "3.11.7",'
        ' "packages": ["torch==2.13.0+cpu"]}'
    )
    assert envs.env_record(marker) == {
        "env": "torch",
        "lock": ["torch.lock"],
        "lock_sha256": "f" * 64,
        "python": "3.11.7",
    }
    assert envs.marker_key(marker) == "0123456789abcdef"


FAKE_UV = """#!{python}
# A stand-in for uv: records its arguments, writes the lock body it is given.
import json, os, sys
if sys.argv[1:] == ["--version"]:
    print("uv 0.0.0-test")
    sys.exit(0)
with open(os.environ["FAKE_UV_ARGS"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
out = sys.argv[sys.argv.index("--output-file") + 1]
with open(out, "w") as handle:
    handle.write(os.environ["FAKE_UV_BODY"])
"""

HASHED = "    --hash=sha256:" + "a" * 64 + "\n"


@pytest.fixture
def fake_uv(tmp_path: Path, monkeypatch) -> Path:
    import sys

    uv = tmp_path / "uv"
    uv.write_text(FAKE_UV.format(python=sys.executable))
    uv.chmod(0o755)
    monkeypatch.setenv("FAKE_UV_ARGS", str(tmp_path / "args.jsonl"))
    return uv


def test_compile_lock_writes_the_header_that_keeps_it_fresh(spec: Path, fake_uv: Path, monkeypatch):
    import json

    monkeypatch.setenv("FAKE_UV_BODY", "torch==2.13.0+cpu \\\n" + HASHED)
    lock = envs.compile_lock(spec / "torch.txt", fake_uv)
    assert lock == spec / "torch.lock"
    assert envs.check_lock(spec / "torch.txt") == lock
    assert envs.lock_input(lock) == ("torch.txt", envs.requirements_digest(spec / "torch.txt"))
    assert envs.parse_lock(lock)["torch"]["version"] == "2.13.0+cpu"
    first = lock.read_bytes()
    envs.compile_lock(spec / "torch.txt", fake_uv)
    assert lock.read_bytes() == first, "the same inputs must give the same lock (no dates in it)"

    envs.compile_lock(spec / "bigdl.nodeps.txt", fake_uv)
    calls = [json.loads(line) for line in (fake_uv.parent / "args.jsonl").read_text().splitlines()]
    assert calls[0][:3] == ["pip", "compile", "torch.txt"]
    assert "--generate-hashes" in calls[0] and "--no-deps" not in calls[0]
    assert "--no-deps" in calls[-1], "nodeps wheels are locked without their dependencies"


def test_compile_lock_refuses_a_cuda_build_and_keeps_the_old_lock(spec: Path, fake_uv: Path, monkeypatch):
    before = (spec / "torch.lock").read_bytes()
    monkeypatch.setenv(
        "FAKE_UV_BODY", "torch==2.13.0 \\\n" + HASHED + "nvidia-cublas-cu12==12.8 \\\n" + HASHED
    )
    with pytest.raises(envs.LockError, match="CUDA build"):
        envs.compile_lock(spec / "torch.txt", fake_uv)
    assert (spec / "torch.lock").read_bytes() == before
