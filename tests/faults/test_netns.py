"""Network namespaces: loopback-only isolation of local runs, and the emulated interconnect.

The namespace tests need root and iproute2 (CI has both); without them they are skipped
with that reason, and the launcher's fallback is tested instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.faults import fault_spec, launch
from helpers.paths import caffe_python, framework_python

from dlscale.events import read_events
from dlscale.host import netns
from dlscale.launch import network as launcher
from dlscale.networks import PRESETS, emulated_preset, network_choices
from dlscale.study.matrix import IMPLEMENTED_FRAMEWORKS

needs_netns = pytest.mark.skipif(
    netns.unavailable(shaping=True) is not None, reason=str(netns.unavailable(shaping=True))
)


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


STREAM = """
import socket, sys, time
role, addr, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "server":
    srv = socket.create_server((addr, 47001))
    conn, _ = srv.accept()
    got = 0
    while got < size:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        got += len(chunk)
    conn.sendall(b"k")
else:
    for _ in range(100):
        try:
            conn = socket.create_connection((addr, 47001))
            break
        except OSError:
            time.sleep(0.05)
    start = time.time()
    conn.sendall(b"x" * size)
    conn.recv(1)
    print(size / (time.time() - start))
"""


def stream_rate(net: netns.RunNetwork, size: int) -> float:
    """Bytes/s of one TCP stream from emulated node 0 to node 1, through the namespaces."""
    prefix = [sys.executable, "-m", "dlscale.host.netns"]
    env = netns.node_env(net)
    server = subprocess.Popen(
        [*prefix, "--node", "1", "--", sys.executable, "-c", STREAM, "server", net.addresses[1], str(size)],
        env=env,
    )
    try:
        client = subprocess.run(
            [
                *prefix,
                "--node",
                "0",
                "--",
                sys.executable,
                "-c",
                STREAM,
                "client",
                net.addresses[1],
                str(size),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert client.returncode == 0, client.stderr
        return float(client.stdout)
    finally:
        server.wait(timeout=30)


def test_presets_and_choices():
    assert emulated_preset("host") is None
    assert emulated_preset("emulated-1gbe") is PRESETS["1gbe"]
    for bad in ("emulated-th-express2", "1gbe", "emulated-"):
        with pytest.raises(KeyError):
            emulated_preset(bad)
    assert "emulated-th-express2" not in network_choices()  # faster than this host can emulate


def test_shaping_args_rate_and_bucket():
    args = netns.shaping_args(PRESETS["1gbe"])
    assert args[:3] == ["tbf", "rate", "1000000000bit"]
    assert int(args[args.index("burst") + 1]) >= 64 * 1024  # one GSO packet always fits


@needs_netns
def test_isolated_namespace_has_only_loopback_and_is_removed():
    with netns.isolated("test") as net:
        (name,) = net.namespaces
        assert name in namespaces()
        found = netns.interfaces(name)
        assert set(found) == {"lo"}, found
        assert all(addr.startswith(("127.", "::1")) for addr in found["lo"])
    assert name not in namespaces()


@needs_netns
def test_emulated_links_are_shaped_and_everything_is_removed():
    half = PRESETS["100mbe"]
    with netns.emulated(2, half, "test") as net:
        made = set(net.namespaces) | {net.hub}
        assert made <= namespaces()
        for node, name in enumerate(net.namespaces):
            found = netns.interfaces(name)
            assert set(found) == {"lo", "eth0"}
            assert f"{net.addresses[node]}/24" in found["eth0"]
            assert "tbf" in netns.qdisc(name) and "100Mbit" in netns.qdisc(name)
        # 4 MB at 100 Mbit/s takes ~0.3 s: the shaped link carries no more than its rate.
        rate = stream_rate(net, 4 << 20)
        assert rate < 1.2 * half.bandwidth_Bps, rate
    assert not made & namespaces(), f"left: {made & namespaces()}"


@needs_netns
def test_stale_namespaces_of_dead_launchers_are_swept():
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"{netns.PREFIX}{dead.pid}-stale-000000"
    subprocess.run(["ip", "netns", "add", stale], check=True, timeout=10)
    with netns.isolated("alive") as net:  # ours: the launcher (this process) is alive
        assert stale not in namespaces(), "a dead launcher's namespace was left"
        netns.sweep_stale()
        assert net.namespaces[0] in namespaces()


def test_setup_network_degrades_for_isolation_and_refuses_emulation(monkeypatch):
    monkeypatch.setattr(netns, "unavailable", lambda shaping=False: "network namespaces need root (test)")
    host = fault_spec("torch", nodes=2)
    none = {"namespace": "network namespaces need root (test)", "user namespace": "disabled (test)"}
    net, info = launcher.setup_network(host, "local", none)
    assert net is None and "need root" in info["isolation"] and "disabled (test)" in info["isolation"]
    emulated = dataclasses.replace(host, network="emulated-1gbe")
    with pytest.raises(netns.NetnsError, match="cannot be emulated here: network namespaces need root"):
        launcher.setup_network(emulated, "local", none)
    with pytest.raises(netns.NetnsError, match="local profile only"):
        launcher.setup_network(emulated, "slurm", none)


def test_netns_cli_errors_name_what_is_missing(monkeypatch, capsys):
    monkeypatch.delenv(netns.ENV_NODE_NAMESPACES, raising=False)
    assert netns.main(["--node", "0", "--", "true"]) == 2
    assert netns.ENV_NODE_NAMESPACES in capsys.readouterr().err
    monkeypatch.setenv(netns.ENV_NODE_NAMESPACES, "/run/netns/a,/run/netns/b")
    assert netns.main(["--node", "5", "--", "true"]) == 2
    assert "node 5 is not one of the 2" in capsys.readouterr().err


def comm_median(events_path: Path) -> tuple[float, dict]:
    events = read_events(events_path)
    assert events[-1]["status"] == "ok", events[-1]
    timed = [e for e in events if e["event"] == "iteration" and not e.get("warmup")]
    return statistics.median(e["comm_s"] for e in timed), events[0]


@needs_netns
def test_torch_allreduce_follows_the_emulated_bandwidth(mnist_shards, tmp_path):
    """Two torch ranks on emulated nodes: a 10x slower link slows the all-reduce >= 1.5x,
    the run records its network, and no namespace outlives the run."""
    python = framework_python("torch")
    comm = {}
    for network in ("emulated-1gbe", "emulated-100mbe"):
        spec = fault_spec("torch", iterations=6, network=network)
        assert spec.network == network and spec.run_id.endswith(
            f"n2x1-{network.removeprefix('emulated-')}/b64/r0"
        )
        run = launch(python, spec, mnist_shards, tmp_path / network / "events.jsonl")
        try:
            assert run.wait(180) is not None, run.output()
        finally:
            run.stop()
        comm[network], start = comm_median(tmp_path / network / "events.jsonl")
        setup = start["network_setup"]
        assert start["network"] == network and setup["interface"] == "eth0"
        assert setup["node_addresses"] == ["10.77.0.1", "10.77.0.2"]
        assert start["hosts"][0] != start["hosts"][1]
        left = [n for n in namespaces() if n.startswith(f"{netns.PREFIX}{run.proc.pid}-")]
        assert not left, f"namespaces left: {left}"
    assert comm["emulated-100mbe"] >= 1.5 * comm["emulated-1gbe"], comm
    print(json.dumps({"comm_median_s": comm}))


@needs_netns
def test_host_network_runs_are_isolated_in_their_own_namespace(mnist_shards, tmp_path):
    """A 2-rank torch run: its ranks' network namespace has loopback only, and is gone after."""
    spec = fault_spec("torch", iterations=150)
    run = launch(framework_python("torch"), spec, mnist_shards, tmp_path / "events.jsonl")
    try:
        run.wait_for_iterations(rank=1, count=3)
        pids = run.rank_pids()
        own = Path("/proc/self/ns/net").resolve()
        for pid in pids.values():
            assert Path(f"/proc/{pid}/ns/net").resolve() != own
            out = subprocess.run(
                ["nsenter", "-t", str(pid), "-n", "ip", "-o", "addr", "show"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            assert {line.split()[1] for line in out.splitlines()} == {"lo"}, out
        assert run.wait(180) is not None, "the run did not end"
    finally:
        run.stop()
    start = read_events(tmp_path / "events.jsonl")[0]
    assert start["network_setup"]["isolation"] == "namespace"
    assert not [n for n in namespaces() if n.startswith(f"{netns.PREFIX}{run.proc.pid}-")]


@needs_netns
@pytest.mark.parametrize("framework", IMPLEMENTED_FRAMEWORKS)
def test_every_runner_works_unchanged_on_the_emulated_network(framework, mnist_shards, tmp_path):
    """Each framework's ranks land on their own emulated nodes (distinct namespaces, the
    nodes' addresses) and train to the end; nothing of the network outlives the run."""
    python = caffe_python() if framework == "caffe" else framework_python(framework)
    # Long enough to look at both ranks while they train (a torch step is ~16 ms), no longer:
    # BigDL's steps are a Spark job each (~0.4 s on 2 executors), so 12 leave it seconds.
    iterations = 12 if framework == "bigdl" else 40
    spec = fault_spec(framework, iterations=iterations, network="emulated-1gbe")
    run = launch(python, spec, mnist_shards, tmp_path / "events.jsonl")
    try:
        run.wait_for_iterations(rank=0, count=2, timeout=240)
        pids = run.rank_pids()
        assert {0, 1} <= set(pids), pids
        spaces = {rank: os.readlink(f"/proc/{pid}/ns/net") for rank, pid in pids.items()}
        assert spaces[0] != spaces[1] != os.readlink("/proc/self/ns/net"), spaces
        assert run.wait(240) is not None, "the run did not end"
    finally:
        run.stop()
    events = read_events(tmp_path / "events.jsonl")
    assert events[-1]["status"] == "ok", events[-1]
    assert events[0]["network_setup"]["node_addresses"] == ["10.77.0.1", "10.77.0.2"]
    left = [n for n in namespaces() if n.startswith(f"{netns.PREFIX}{run.proc.pid}-")]
    assert not left, f"namespaces left: {left}"
