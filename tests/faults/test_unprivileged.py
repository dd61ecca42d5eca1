"""Local runs without root: nothing of a run listens on the host's interfaces (issue 17).

Without root (or iproute2) the launcher isolates a run in an unprivileged user+network
namespace (dlscale.host.userns); where that cannot be made either, it runs only what binds
loopback (torch, BigDL) and refuses TensorFlow and MPI, which listen on every interface.

The real tests run the launcher as ``nobody`` (``setpriv``), on files it can read under a
world-readable folder of /tmp, and read the host's /proc/net/tcp{,6} for the listening
sockets of the run's processes. The decision itself is tested with an injected probe.

A user without root (issue 45): a small study runs through the whole workflow as nobody,
and one without the torch wheel's source stops before any job, naming the setting.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.faults import descendants, fault_spec
from helpers.paths import REPO

from dlscale.events import read_events
from dlscale.host import netns, userns
from dlscale.launch import network as launcher

pytestmark = pytest.mark.faults  # a host without namespaces is a fault of the environment

NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
#: A hang guard, not a timing: LeNet for a few iterations took up to 220 s here with the
#: host at load 20-30 (BigDL's Spark start-up alone ~100 s of it); a run past this is stuck.
RUN_TIMEOUT_S = 600

NONE = {"namespace": "network namespaces need root (test)", "user namespace": "user namespaces off (test)"}


# -- the decision (injected probe) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("framework", "nodes", "what"),
    [("tensorflow", 2, "TensorFlow's gRPC servers"), ("caffe", 1, "mpirun listens on every interface")],
)
def test_without_any_namespace_tensorflow_and_mpi_are_refused(framework, nodes, what):
    spec = fault_spec(framework, nodes=nodes)
    with pytest.raises(netns.NetnsError) as err:
        launcher.setup_network(spec, "local", NONE)
    message = str(err.value)
    assert f"refusing to run {framework} on the host's network" in message
    assert what in message
    # Why: both probes' reasons; what to do: the remedy.
    assert "need root (test)" in message and "user namespaces off (test)" in message
    assert "user.max_user_namespaces" in message


def test_tensorflow_ps_is_refused_even_on_one_rank():
    spec = fault_spec("tensorflow", nodes=1, tensorflow={"strategy": "ps"})
    with pytest.raises(netns.NetnsError, match="gRPC servers"):
        launcher.setup_network(spec, "local", NONE)


@pytest.mark.parametrize(("framework", "nodes"), [("torch", 2), ("bigdl", 2), ("tensorflow", 1)])
def test_without_any_namespace_loopback_only_runs_go_ahead_saying_so(framework, nodes):
    """torch (a file rendezvous, gloo on lo), BigDL (Spark on SPARK_LOCAL_IP) and a single
    MWMS rank (no server at all) listen on loopback only: they run, and say why unisolated."""
    net, info = launcher.setup_network(fault_spec(framework, nodes=nodes), "local", NONE)
    assert net is None
    assert info["isolation"].startswith("none (") and "user namespaces off (test)" in info["isolation"]
    assert info["listen"] == "127.0.0.1 only"


def test_a_namespace_that_cannot_be_made_falls_back_to_the_next_kind(monkeypatch):
    made = []

    def failing(tag="run"):
        raise netns.NetnsError("`ip netns add x` failed: Operation not permitted")

    def fake_userns(python=sys.executable):
        made.append(python)
        return netns.RunNetwork(["fake"], ["127.0.0.1"], "lo")

    monkeypatch.setattr(netns, "isolated", failing)
    monkeypatch.setattr(userns, "isolated", fake_userns)
    spec = fault_spec("tensorflow", nodes=2)
    net, _ = launcher.setup_network(spec, "local", {"namespace": None, "user namespace": None}, python="/py")
    assert net is not None and made == ["/py"]
    # Neither works: the refusal carries the error of each.
    monkeypatch.setattr(userns, "isolated", lambda python: (_ for _ in ()).throw(userns.UsernsError("no")))
    with pytest.raises(netns.NetnsError, match="Operation not permitted.*user namespace: no"):
        launcher.setup_network(spec, "local", {"namespace": None, "user namespace": None})


def test_choose_takes_the_first_available_kind():
    assert userns.choose({"namespace": "no root", "user namespace": None}) == "user namespace"
    assert userns.choose({"namespace": None, "user namespace": None}) == "namespace"
    assert userns.choose(NONE) is None


def test_slurm_runs_are_not_namespaced():
    net, info = launcher.setup_network(fault_spec("tensorflow", nodes=2), "slurm", NONE)
    assert net is None and "SLURM" in info["isolation"]


# -- real runs as nobody ---------------------------------------------------------------------


def listening_sockets(pids: list[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every TCP socket in LISTEN state in THIS process's network
    namespace (the host's) that one of ``pids`` holds."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    owner[target[8:-1]] = pid
        except OSError:
            continue  # ended meanwhile
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in owner:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            # The kernel prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append((socket.inet_ntop(family, raw), int(hex_port, 16), owner[fields[9]]))
    return found


def loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1")


def nobody_can(*argv: str, env: dict[str, str] | None = None) -> bool:
    try:
        return subprocess.run([*NOBODY, *argv], capture_output=True, timeout=120, env=env).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def unprivileged_python(framework: str) -> tuple[str, dict[str, str]] | None:
    """A python ``nobody`` can run with the framework importable, and the environment it needs.

    The framework venv's own interpreter may live under /root (pyenv): then the system
    interpreter of the same version, with the venv's site-packages on PYTHONPATH.
    """
    venv = REPO / ".venvs" / framework
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{site}", "HOME": "/tmp"}
    module = {"torch": "torch", "tensorflow": "tensorflow", "bigdl": "pyspark"}[framework]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (str(venv / "bin" / "python"), f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        # Through a shell's exec, as the launcher starts its ranks (setpriv alone may run
        # a python whose own install it cannot read).
        check = ("sh", "-c", 'exec "$0" "$@"', str(python), "-c", f"import {module}, dlscale.launch.run")
        if python and nobody_can(*check, env=env):
            return python, env
    return None


@pytest.fixture(scope="module")
def shared(mnist_shards) -> Iterator[Path]:
    """A folder under /tmp that ``nobody`` can read (the shards) and write (``runs/``)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to become nobody with setpriv)")
    root = Path(tempfile.mkdtemp(prefix="dlscale-unpriv-", dir="/tmp"))
    try:
        root.chmod(0o755)
        shutil.copytree(mnist_shards, root / "shards")
        for path in [root / "shards", *(root / "shards").rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (root / "runs").mkdir()
        (root / "runs").chmod(0o1777)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def without(tool: str, into: Path) -> str:
    """A PATH with every program of this one but ``tool`` (symlinks in ``into``)."""
    into.mkdir(parents=True, exist_ok=True)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            link = into / entry.name
            if entry.name != tool and not link.exists() and not link.is_symlink():
                link.symlink_to(entry.path)
    into.chmod(0o755)
    return str(into)


def launch_as_nobody(framework: str, spec, shared: Path, name: str, path: str | None = None):
    found = unprivileged_python(framework)
    if found is None:
        pytest.skip(f"no python that nobody can run with {framework} importable")
    python, env = found
    if path:
        env = {**env, "PATH": path}
    run_dir = shared / "runs" / name
    run_dir.mkdir()
    run_dir.chmod(0o777)
    events = run_dir / "events.jsonl"
    with open(run_dir / "run.log", "wb") as log:
        os.chown(run_dir / "run.log", 65534, 65534)
        proc = subprocess.Popen(
            [
                *NOBODY,
                python,
                "-m",
                "dlscale.launch",
                "--spec-json",
                spec.to_json(),
                "--data",
                str(shared / "shards"),
                "--events",
                str(events),
                "--python",
                python,
                "--contended-retries",
                "0",
            ],  # fmt: skip
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, events


def wait_for_training(proc, events: Path, ranks: int = 1, timeout: float = RUN_TIMEOUT_S) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        counts = []
        for rank in range(ranks):
            part = events.parent / ".work" / f"rank{rank}.jsonl"
            try:
                counts.append(sum('"iteration"' in line for line in part.read_text().splitlines()))
            except OSError:
                counts.append(0)
        if min(counts) >= 2:
            return
        if proc.poll() is not None:
            raise AssertionError((events.parent / "run.log").read_text()[-3000:])
        time.sleep(0.2)
    raise TimeoutError("no training within the time limit")


def finish(proc) -> None:
    try:
        proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        raise


def test_unprivileged_run_lives_in_its_own_user_and_network_namespace(shared):
    """A 2-rank torch run by nobody: its ranks share a namespace that is not the host's,
    run as nobody outside it, hold no listening socket in the host's namespace, and the
    namespace's holder is gone afterwards."""
    if not nobody_can("unshare", *userns.UNSHARE_ARGS, "true"):
        pytest.skip("unprivileged user namespaces are not available here")
    spec = fault_spec("torch", iterations=30)
    proc, events = launch_as_nobody("torch", spec, shared, "userns")
    try:
        wait_for_training(proc, events, ranks=2)
        run = descendants(proc.pid)
        starts = [
            json.loads((events.parent / ".work" / f"rank{r}.jsonl").read_text().splitlines()[0])
            for r in (0, 1)
        ]
        ranks = [start["pid"] for start in starts]
        host = os.readlink("/proc/self/ns/net")
        spaces = {os.readlink(f"/proc/{pid}/ns/net") for pid in ranks}
        assert len(spaces) == 1 and host not in spaces, spaces
        for pid in ranks:
            uids = Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[:2]
            assert uids == ["65534", "65534"], uids  # root inside the namespace only
        assert listening_sockets([proc.pid, *run]) == []
    finally:
        finish(proc)
    records = read_events(events)
    assert records[-1]["status"] == "ok", records[-1]
    assert records[0]["network_setup"]["isolation"] == "user namespace"
    assert not [pid for pid in descendants(proc.pid)], "the holder or a rank outlived the run"


@pytest.mark.parametrize(("framework", "iterations"), [("torch", 30), ("bigdl", 12)])
def test_without_user_namespaces_torch_and_spark_listen_on_loopback_only(shared, framework, iterations):
    """nobody, with no `unshare` on PATH (a host where user namespaces cannot be made):
    torch (gloo's pairs) and BigDL (Spark's master, worker, executor, driver, block
    managers and web UIs) run on the host's loopback, and every socket they listen on is
    a loopback one, looked at while they train."""
    path = without("unshare", shared / "bin-no-unshare")
    # BigDL's start-up bound (180 s by default) is struck on a host at load 30 (seen).
    extra = {"bigdl": {"startup_timeout_s": RUN_TIMEOUT_S}} if framework == "bigdl" else {}
    spec = fault_spec(framework, iterations=iterations, **extra)
    proc, events = launch_as_nobody(framework, spec, shared, f"host-{framework}", path)
    listening = []
    try:
        wait_for_training(proc, events, ranks=2 if framework == "torch" else 1)
        listening = listening_sockets([proc.pid, *descendants(proc.pid)])
    finally:
        finish(proc)
    records = read_events(events)
    assert records[-1]["status"] == "ok", records[-1]
    isolation = records[0]["network_setup"]["isolation"]
    assert isolation.startswith("none (") and "unshare" in isolation, isolation
    assert listening, "the run's processes listen: none seen, so this check saw nothing"
    assert all(loopback(address) for address, _, _ in listening), listening


@pytest.mark.parametrize(("framework", "what"), [("tensorflow", "gRPC servers"), ("caffe", "mpirun")])
def test_without_user_namespaces_tensorflow_and_mpi_are_refused(shared, framework, what):
    """The same host: a 2-rank TensorFlow run and a Caffe (mpirun) run are recorded as
    failed, naming why and what to do, before any process of theirs starts."""
    path = without("unshare", shared / "bin-no-unshare")
    spec = fault_spec(framework, iterations=5)
    # Refused before any Caffe build or TensorFlow is looked for: torch's python does.
    proc, events = launch_as_nobody("torch", spec, shared, f"refused-{framework}", path)
    finish(proc)
    end = read_events(events)[-1]
    assert end["status"] == "failed"
    assert f"refusing to run {framework} on the host's network" in end["reason"] and what in end["reason"]
    assert "To run it" in end["reason"]
    assert "[launch] FAILED" in (events.parent / "run.log").read_text()


# -- a study through the workflow as nobody ---------------------------------------------------

#: A tiny torch-only study: 1 model, 1 node, a few iterations (a hang guard, not a timing:
#: ~40 s here, most of it Snakemake's start-up and the MNIST shards).
NOBODY_STUDY = {
    "frameworks": ["torch"],
    "models": ["lenet"],
    "nodes": [1],
    "iterations": {"lenet": 5},
    "warmup": 1,
    "repeats": 1,
}
STUDY_TIMEOUT_S = 600
#: The folders anyone may write to: the only places nobody could leave a file outside its own.
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")


def nobody_venv(into: Path, framework: str) -> Path:
    """A venv of the system python whose site-packages chain to ``framework``'s venv (read,
    never written: root owns it): nobody cannot run that venv's own python when it lives
    under /root (pyenv), but can the system one of the same version."""
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.exists():
        pytest.skip(f"no {system} for nobody")
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(into)], check=True, timeout=60)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    source = REPO / ".venvs" / framework / "lib" / version / "site-packages"
    (into / "lib" / version / "site-packages" / "dlscale-shared.pth").write_text(
        f"import site; site.addsitedir({str(source)!r})\n"
    )
    return into / "bin" / "python"


def owned_by_nobody() -> set[str]:
    """Entries nobody owns in the world-writable folders, and one level into those of them
    that anyone may write to (where else could nobody create a file)."""
    found = set()
    for top in WORLD_WRITABLE:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid == 65534:
                found.add(entry.path)
            elif entry.is_dir(follow_symlinks=False) and info.st_mode & 0o002:
                try:
                    found.update(
                        sub.path
                        for sub in os.scandir(entry.path)
                        if sub.stat(follow_symlinks=False).st_uid == 65534
                    )
                except OSError:
                    continue
    return found


@pytest.fixture(scope="module")
def nobody_home(mnist_idx) -> Iterator[Path]:
    """A world-writable folder under /tmp: nobody's HOME, the study's working directory, MNIST's
    idx files it reads, and a workflow venv and an envs_dir of venvs that nobody can run,
    chained to the project's own (read-only, root-owned)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to become nobody with setpriv)")
    from dlscale.envs import env_marker

    root = Path(tempfile.mkdtemp(prefix="dlscale-nobody-", dir="/tmp"))
    try:
        root.chmod(0o1777)
        shutil.copytree(mnist_idx, root / "mnist")
        nobody_venv(root / "workflow", "workflow")
        (root / "envs").mkdir()
        nobody_venv(root / "envs" / "torch", "torch")
        marker = env_marker(REPO / ".venvs", "torch")
        if not marker.exists():
            pytest.skip("the torch venv is not built (tests/helpers/paths.py builds it)")
        shutil.copy(marker, root / "envs" / "torch" / marker.name)
        for path in [root / "mnist", *root.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else (path.stat().st_mode | 0o444))
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def snakemake_as_nobody(
    home: Path, name: str, study: dict, envs: Path, extra_env: dict[str, str] | None = None
):
    """Snakemake as nobody on ``study`` in ``home/name`` (HOME: ``home/name/home``), the
    local profile, asking for the runs table; its whole process group ended on the way out."""
    workdir = home / name
    config = {**study, "envs_dir": str(envs), "data": {"mnist": {"source": str(home / "mnist")}}}
    (workdir / "home").mkdir(parents=True)
    (workdir / "study.yaml").write_text(json.dumps(config))
    for path in (workdir, workdir / "home", workdir / "study.yaml"):
        os.chown(path, 65534, 65534)  # nobody's own folders, as a user's are
    env = {"PATH": os.environ["PATH"], "HOME": str(workdir / "home"), "LANG": "C.UTF-8", **(extra_env or {})}
    cmd = [
        *NOBODY, str(home / "workflow" / "bin" / "python"), "-m", "snakemake", "results/runs.csv",
        "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--profile", str(REPO / "profiles" / "local"), "--configfile", str(workdir / "study.yaml"),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=STUDY_TIMEOUT_S)
    finally:
        try:
            os.killpg(proc.pid, 9)  # anything of the group still there (none when it ended well)
        except ProcessLookupError:
            pass
        proc.wait()
    return proc.returncode, out, workdir


def test_a_study_runs_through_the_workflow_as_nobody(nobody_home):
    """A torch-only study (1 model, 1 node) through Snakemake as nobody, with the project's
    venvs read-only: the run is ok, and nobody wrote nothing outside the study's folder."""
    before = owned_by_nobody()
    code, out, workdir = snakemake_as_nobody(nobody_home, "study", NOBODY_STUDY, nobody_home / "envs")
    assert code == 0, out[-5000:]
    events_file = next((workdir / "results" / "runs" / "torch" / "lenet" / "n1x1").glob("b*/r0/events.jsonl"))
    assert events_file.stat().st_uid == 65534  # nobody's run
    assert read_events(events_file)[-1]["status"] == "ok"
    with open(workdir / "results" / "runs.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    assert [(row["status"], row["timed_iterations"]) for row in rows] == [("ok", "5")], rows
    outside = owned_by_nobody() - before
    inside = {str(nobody_home)}
    assert {path for path in outside if not any(path.startswith(p) for p in inside)} == set()


def test_without_a_wheel_source_nobody_is_stopped_before_any_job(nobody_home):
    """nobody, no torch venv yet, pip told of no wheel source at all (no config file, no
    index: pip answers from nothing, no network): the invocation fails before any job with
    one missing piece, naming the setting."""
    empty = nobody_home / "no-envs"
    empty.mkdir(mode=0o755)
    os.chown(empty, 65534, 65534)  # nobody's own (a folder anyone may write is refused)
    no_source = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    code, out, workdir = snakemake_as_nobody(nobody_home, "no-wheels", NOBODY_STUDY, empty, no_source)
    assert code != 0
    assert "this study cannot run here yet; missing:" in out, out[-3000:]
    pieces = [line for line in out.splitlines() if line.startswith("  - ")]
    assert len(pieces) == 1 and "PIP_FIND_LINKS" in pieces[0] and "torch==" in pieces[0], pieces
    assert list(empty.iterdir()) == [] and not (workdir / "results" / "logs").exists()
