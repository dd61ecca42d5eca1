"""The pure parts of BigDL's per-study Spark cluster (dlscale.runners.bigdl.shared_cluster):
the cluster key, the lease file, when a lease is stale, and where per_study is allowed."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers.bigdl_runs import spec

from dlscale.host.netns import ENV_NODE_NAMESPACES
from dlscale.runners.bigdl.launcher import host_loopback_reason
from dlscale.runners.bigdl.shared_cluster import (
    ENV_CLUSTERS,
    ENV_OWNER_PID,
    Lease,
    LeaseError,
    choose,
    cluster_key,
    parse_lease,
    same_network,
    stale_reason,
    start_time,
    write_secret,
)
from dlscale.runners.bigdl.spark import ClusterShape
from dlscale.runspec import RunSpec

SHAPE = ClusterShape(workers=2, cores_per_executor=1, executor_memory="1g")
LEASE = Lease(
    key="abc",
    master_url="spark://127.0.0.1:7077",
    root="/r/abc/x",
    secret_file="/r/abc/x/secret",
    processes={"supervisor": (10, 100), "master": (11, 101), "worker0": (12, 102), "worker1": (13, 103)},
    owner=(9, 99),
    startup_s=4.5,
)


def test_the_key_changes_with_the_shape_the_engine_environment_spark_and_the_owner():
    key = cluster_key(SHAPE, {"KMP_BLOCKTIME": "0"}, "/spark")
    assert key == cluster_key(SHAPE, {"KMP_BLOCKTIME": "0"}, "/spark")
    assert len(key) == 16 and key.isalnum()
    others = {
        cluster_key(ClusterShape(1, 1, "1g"), {"KMP_BLOCKTIME": "0"}, "/spark"),
        cluster_key(ClusterShape(2, 2, "1g"), {"KMP_BLOCKTIME": "0"}, "/spark"),
        cluster_key(ClusterShape(2, 1, "2g"), {"KMP_BLOCKTIME": "0"}, "/spark"),
        cluster_key(SHAPE, {}, "/spark"),
        cluster_key(SHAPE, {"KMP_BLOCKTIME": "200"}, "/spark"),
        cluster_key(SHAPE, {"KMP_BLOCKTIME": "0"}, "/other-spark"),
        cluster_key(SHAPE, {"KMP_BLOCKTIME": "0"}, "/spark", owner="123:456"),
    }
    assert key not in others and len(others) == 7


def test_a_lease_reads_back_and_a_broken_one_is_refused():
    assert parse_lease(LEASE.to_json()) == LEASE
    assert parse_lease(LEASE.to_json()).workers() == {0: 12, 1: 13}
    data = json.loads(LEASE.to_json())
    for broken in (
        "",
        "{",
        "[]",
        json.dumps({**data, "processes": {"master": [11, 101]}}),  # no supervisor
        json.dumps({**data, "master_url": "http://x"}),
        json.dumps({**data, "owner": "nine"}),
        json.dumps({k: v for k, v in data.items() if k != "secret_file"}),
    ):
        with pytest.raises(LeaseError, match="not a cluster lease"):
            parse_lease(broken)


def test_a_lease_is_stale_once_any_of_its_processes_is_gone_or_another_process():
    alive = {10: 100, 11: 101, 12: 102, 13: 103}
    assert stale_reason(LEASE, alive.get) is None
    assert stale_reason(LEASE, {**alive, 12: None}.get) == "its worker0 (pid 12) is gone"
    # The PID is another process now (reused): its start time gives it away.
    assert stale_reason(LEASE, {**alive, 10: 555}.get) == "its supervisor (pid 10) is gone"


def test_start_time_names_a_live_process_and_none_once_it_is_reaped():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        first = start_time(proc.pid)
        assert first is not None and start_time(proc.pid) == first
    finally:
        proc.kill()
        proc.wait()
    assert start_time(proc.pid) is None


def test_per_study_only_where_a_shared_cluster_is_safe():
    owner = str(os.getpid())
    ok = {ENV_CLUSTERS: "/study/results/spark", ENV_OWNER_PID: owner}
    assert choose("per_study", ok) == ("per_study", "asked")
    assert choose("per_run", ok) == ("per_run", "asked")
    for environ, why in [
        ({**ok, "DLSCALE_SPARK_MODE": "slurm"}, "not the local mode"),
        ({**ok, ENV_NODE_NAMESPACES: "n0,n1"}, "emulated network"),
        ({ENV_OWNER_PID: owner}, "not set"),
        ({ENV_CLUSTERS: "/x"}, "not set"),
    ]:
        chosen, said = choose("per_study", environ)
        assert chosen == "per_run" and why in said, (environ, said)


def test_per_study_falls_back_when_its_owner_is_gone():
    proc = subprocess.Popen(["true"])
    proc.wait()
    chosen, said = choose("per_study", {ENV_CLUSTERS: "/x", ENV_OWNER_PID: str(proc.pid)})
    assert chosen == "per_run" and "is gone" in said


def test_the_secret_file_is_its_owners_alone(tmp_path):
    path = tmp_path / "secret"
    write_secret(path, "s3cret")
    assert path.read_text() == "s3cret" and (path.stat().st_mode & 0o777) == 0o600


def test_a_run_in_a_network_namespace_of_its_own_does_not_share_the_studys():
    assert same_network(os.getpid())
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not same_network(proc.pid)  # gone: nothing to share


def test_only_a_per_study_run_under_the_workflow_stays_on_the_hosts_loopback():
    ok = {ENV_CLUSTERS: "/study/results/spark", ENV_OWNER_PID: str(os.getpid())}
    per_study = RunSpec.from_dict(spec(cluster="per_study"))
    assert "per_study" in (host_loopback_reason(per_study, ok) or "")
    assert host_loopback_reason(per_study, {}) is None  # not under the workflow: isolated
    assert host_loopback_reason(RunSpec.from_dict(spec()), ok) is None  # per_run: isolated
