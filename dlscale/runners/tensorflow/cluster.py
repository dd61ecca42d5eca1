"""Who talks to whom: the TensorFlow cluster spec and TF_CONFIG of a run (no TF import).

TensorFlow's distributed runtime needs every task's ``host:port`` up front. The plan
(``launcher.py``) picks them for a local run and hands the spec to every process in
``DLSCALE_TF_CLUSTER``, so a port is never assumed free; under srun, where there is no
plan, the spec is derived from the placement alone (every rank's host, and
``master_port + 1 + rank``: ranks on one node need distinct ports, and the master port
itself is left to whoever else wants it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dlscale.host.placement import Placement

ENV_CLUSTER = "DLSCALE_TF_CLUSTER"
#: Written by the ps-mode chief when its loop is over: the servers' signal to exit 0.
DONE_FILE = "tf-chief.done"


def mwms_cluster(hosts: list[str], ports: list[int]) -> dict[str, list[str]]:
    """MultiWorkerMirroredStrategy: one ``worker`` task per rank (worker 0 is the chief)."""
    if len(hosts) != len(ports):
        raise ValueError(f"{len(hosts)} hosts but {len(ports)} ports")
    return {"worker": [f"{h}:{p}" for h, p in zip(hosts, ports, strict=True)]}


def ps_cluster(
    workers: int, num_ps: int, ports: list[int], host: str | list[str] = "127.0.0.1"
) -> dict[str, list[str]]:
    """ParameterServerStrategy: one chief (the coordinator), ``workers`` workers, ``num_ps`` servers.

    ``ports`` lists the chief's port, then the workers', then the parameter servers'; ``host``
    is one host for all, or one per task in the same order (tasks on emulated nodes).
    """
    if workers < 1 or num_ps < 1:
        raise ValueError(f"ps mode needs >= 1 worker and >= 1 parameter server, got {workers} and {num_ps}")
    if len(ports) != 1 + workers + num_ps:
        raise ValueError(f"need {1 + workers + num_ps} ports, got {len(ports)}")
    hosts = [host] * len(ports) if isinstance(host, str) else host
    if len(hosts) != len(ports):
        raise ValueError(f"{len(hosts)} hosts for {len(ports)} tasks")
    addresses = [f"{h}:{port}" for h, port in zip(hosts, ports, strict=True)]
    return {
        "chief": addresses[:1],
        "worker": addresses[1 : 1 + workers],
        "ps": addresses[1 + workers :],
    }


def from_placement(where: Placement) -> dict[str, list[str]]:
    """The MWMS cluster when no plan chose the ports (srun): master_port + 1 + rank."""
    hosts = list(where.rank_hosts) or [where.master_addr] * where.world_size
    if len(hosts) != where.world_size:
        raise ValueError(f"placement knows {len(hosts)} rank hosts for a world of {where.world_size}")
    return mwms_cluster(hosts, [where.master_port + 1 + rank for rank in range(where.world_size)])


def cluster_of(env: Mapping[str, str], where: Placement) -> dict[str, list[str]]:
    """The cluster spec this process belongs to: the plan's, else the placement's."""
    if env.get(ENV_CLUSTER):
        return json.loads(env[ENV_CLUSTER])
    return from_placement(where)


def peers_of(cluster: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """Every task of ``cluster`` as ``(who, "host:port")``, named as a person reads them:
    MWMS workers are ranks ("rank 1"); ps-mode tasks keep their job ("worker 1", "ps 0")."""
    found = []
    for job, addresses in cluster.items():
        for index, address in enumerate(addresses):
            who = f"rank {index}" if job == "worker" and "chief" not in cluster else f"{job} {index}"
            found.append((who, address))
    return found


def tf_config(cluster: Mapping[str, list[str]], task_type: str, index: int) -> dict[str, Any]:
    """The TF_CONFIG of one task; raises if the task is not in the cluster."""
    if index < 0 or index >= len(cluster.get(task_type, [])):
        raise ValueError(f"task {task_type}:{index} is not in the cluster {dict(cluster)}")
    return {"cluster": dict(cluster), "task": {"type": task_type, "index": index}}
