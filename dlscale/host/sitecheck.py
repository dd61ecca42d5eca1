"""Site check: one small 2-node job verifies what the study's frameworks need, before the
study spends node-hours.

Runs inside an allocation of at least two nodes (rule ``check_site``, ``make check-site``)::

    python -m dlscale.host.sitecheck --frameworks torch,caffe --envs-dir DIR --shared DIR --out FILE

Each check is one ``srun`` step with one task per node (the first two nodes), under a time
limit, in this order, and the first failure ends the check with a reason that names the
check, the node and what it said:

1. ``shared-fs``: every node writes a file into ``--shared`` (a folder of the run's work
   tree) and reads the others' back: the results and venvs must be one file system.
2. ``venv:<framework>``: each framework's venv python exists on every node and imports the
   framework (``IMPORTS``, from the catalog); a venv path not visible from a compute node fails here.
3. ``tcp``: task 0 listens on its node's address, task 1 connects to task 0's node *by
   name* (what gloo, gRPC and Spark do): name resolution and TCP between nodes.
4. ``mpi-pmix`` (Caffe): ``srun --mpi=pmix`` and an MPI all-reduce across the nodes (mpi4py
   in Caffe's venv): PMIx and Open MPI's transport between nodes.
5. ``java`` (BigDL): ``java -version`` on every node.

The result (``{"status", "reason", "checks": [...]}``) is written atomically. Standard
library only: this runs with the workflow's python, before any framework is trusted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dlscale import catalog
from dlscale.base import atomic
from dlscale.host.placement import expand_hostlist

#: What proves a framework's venv works on a node: the module its catalog entry names
#: (``catalog.Framework.venv_import``), so a framework added there is checked too.
IMPORTS = {fw.name: fw.venv_import for fw in catalog.FRAMEWORKS.values()}

CHECK_TIMEOUT_S = 120  # one srun step (an import of TensorFlow on a cold file system included)
TCP_TIMEOUT_S = 30


class CheckFailed(RuntimeError):
    """A check failed; the message names the check, the node and the evidence."""


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


# ------------------------------------------------------------------ probes (one per task)
def probe_shared(shared: Path) -> None:
    """Write this node's file, then wait for every task's (the job's tasks share the folder)."""
    tasks = int(os.environ.get("SLURM_NTASKS", "1"))
    shared.mkdir(parents=True, exist_ok=True)
    atomic.write_text(shared / f"node-{os.environ.get('SLURM_PROCID', '0')}", node_name())
    deadline = time.time() + TCP_TIMEOUT_S
    while len(list(shared.glob("node-*"))) < tasks:
        if time.time() > deadline:
            seen = sorted(p.read_text() for p in shared.glob("node-*"))
            raise CheckFailed(
                f"{node_name()} sees only the files of {seen} in {shared}: not one shared file system"
            )
        time.sleep(0.2)


def probe_tcp(shared: Path) -> None:
    """Task 0 listens on its node and publishes the port; task 1 connects to it by node name."""
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    nodes = expand_hostlist(os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST", ""))
    if len(nodes) < 2:
        raise CheckFailed(f"the step has {len(nodes)} node(s); the site check needs 2")
    port_file = shared / "tcp-port"
    if rank == 0:
        with socket.create_server(("", 0)) as server:
            server.settimeout(TCP_TIMEOUT_S)
            atomic.write_text(port_file, str(server.getsockname()[1]))
            try:
                conn, _ = server.accept()
            except TimeoutError:
                raise CheckFailed(
                    f"no connection from {nodes[1]} reached {nodes[0]} in {TCP_TIMEOUT_S} s"
                ) from None
            with conn:
                conn.sendall(b"ok")
        return
    deadline = time.time() + TCP_TIMEOUT_S
    while not port_file.exists():
        if time.time() > deadline:
            raise CheckFailed(f"{nodes[0]} never published its port in {port_file}")
        time.sleep(0.2)
    port = int(port_file.read_text())
    try:
        address = socket.gethostbyname(nodes[0])
    except OSError as err:
        raise CheckFailed(f"{node_name()}: node name {nodes[0]} does not resolve ({err})") from None
    try:
        with socket.create_connection((address, port), timeout=TCP_TIMEOUT_S) as conn:
            if conn.recv(2) != b"ok":
                raise CheckFailed(f"{node_name()}: {nodes[0]} ({address}:{port}) answered wrongly")
    except OSError as err:
        raise CheckFailed(f"{node_name()} cannot connect to {nodes[0]} ({address}:{port}): {err}") from None


def probe_mpi() -> None:
    from mpi4py import MPI  # the caffe venv's

    comm = MPI.COMM_WORLD
    total = comm.allreduce(1)
    if total != comm.Get_size() or total < 2:
        raise CheckFailed(f"{node_name()}: MPI all-reduce over {comm.Get_size()} rank(s) gave {total}")


def probe(argv: list[str]) -> int:
    """``python -m dlscale.host.sitecheck probe NAME [SHARED]``: one task's part of a check."""
    name, rest = argv[0], argv[1:]
    try:
        if name == "shared-fs":
            probe_shared(Path(rest[0]))
        elif name == "tcp":
            probe_tcp(Path(rest[0]))
        elif name == "mpi":
            probe_mpi()
        else:
            print(f"unknown probe {name!r}", file=sys.stderr)
            return 2
    except CheckFailed as err:
        print(f"FAILED: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


# ------------------------------------------------------------- the checks (in the job)
def srun(*argv: str, mpi: str | None = None, coupled: bool = True) -> list[str]:
    """One task on each of the first two nodes.

    ``coupled`` (the tasks talk to each other, so one's death would hang the other): the
    step dies with any task. Otherwise every task runs to its end, and srun then waits for
    what each said: a step force-terminated at one task's failure can lose that very task's
    last words (SLURM's I/O forwarding races the kill), the line that names the node."""
    return [
        "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", f"--kill-on-bad-exit={int(coupled)}",
        *((f"--mpi={mpi}",) if mpi else ()), *argv,
    ]  # fmt: skip


def run_check(name: str, argv: list[str], timeout: float = CHECK_TIMEOUT_S) -> dict[str, Any]:
    """Run one srun step; raise CheckFailed with the tail of what the nodes said."""
    started = time.time()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CheckFailed(
            f"{name}: no answer from the nodes within {timeout:.0f} s (`{' '.join(argv)}`)"
        ) from None
    except OSError as err:
        raise CheckFailed(f"{name}: cannot run `{argv[0]}`: {err}") from None
    said = " | ".join(line for line in (out.stderr + out.stdout).strip().splitlines()[-6:] if line.strip())
    if out.returncode != 0:
        raise CheckFailed(f"{name}: exit {out.returncode}: {said[-800:]}")
    return {"name": name, "ok": True, "seconds": round(time.time() - started, 2), "detail": said[-300:]}


def venv_python(envs_dir: Path, framework: str) -> Path:
    return envs_dir / framework / "bin" / "python"


def checks(frameworks: list[str], envs_dir: Path, shared: Path, python: str) -> list[tuple[str, list[str]]]:
    """The study's checks, in order (see the module docstring)."""
    me = [python, "-m", "dlscale.host.sitecheck", "probe"]
    planned = [("shared-fs", srun(*me, "shared-fs", str(shared / "fs")))]
    for framework in frameworks:
        venv = venv_python(envs_dir, framework)
        code = f"import {IMPORTS[framework]}, socket, os; print(os.environ.get('SLURMD_NODENAME'), 'ok')"
        # sh: a python missing on one node is said with that node's name.
        probe_cmd = (
            f'test -x {venv} || {{ echo "$SLURMD_NODENAME: {venv} not found" >&2; exit 1; }};'
            f' exec {venv} -c "{code}"'
        )
        planned.append((f"venv:{framework}", srun("sh", "-c", probe_cmd, coupled=False)))
    planned.append(("tcp", srun(*me, "tcp", str(shared))))
    if "caffe" in frameworks:
        venv = str(venv_python(envs_dir, "caffe"))
        planned.append(("mpi-pmix", srun(venv, "-m", "dlscale.host.sitecheck", "probe", "mpi", mpi="pmix")))
    if "bigdl" in frameworks:
        java = (
            'j=$(command -v java || echo "$JAVA_HOME/bin/java"); "$j" -version >/dev/null 2>&1'
            ' || { echo "$SLURMD_NODENAME: no working java ($j)" >&2; exit 1; }; echo "$SLURMD_NODENAME ok"'
        )
        planned.append(("java", srun("sh", "-c", java, coupled=False)))
    return planned


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["probe"]:
        return probe(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.host.sitecheck", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--frameworks", required=True, help="comma-separated, from the study")
    parser.add_argument("--envs-dir", required=True, type=Path)
    parser.add_argument("--shared", required=True, type=Path, help="a scratch folder on the work tree")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    frameworks = [f for f in args.frameworks.split(",") if f]
    unknown = [f for f in frameworks if f not in IMPORTS]
    if unknown:
        parser.error(f"unknown framework(s) {unknown}; known: {sorted(IMPORTS)}")
    # Only SLURM_JOB_ID is certain: Snakemake's SLURM plugin strips the other SLURM_*
    # variables from its jobs; srun finds the allocation from it.
    job = os.environ.get("SLURM_JOB_ID")
    result: dict[str, Any] = {"status": "ok", "reason": None, "job": job, "nodes": [], "checks": []}
    try:
        if not job:
            raise CheckFailed("not inside a SLURM allocation (no SLURM_JOB_ID): submit it (make check-site)")
        shutil.rmtree(args.shared, ignore_errors=True)  # a previous check's files
        args.shared.mkdir(parents=True)
        envs_dir = args.envs_dir.absolute()
        for name, command in checks(frameworks, envs_dir, args.shared.absolute(), sys.executable):
            result["checks"].append(run_check(name, command))
            if name == "shared-fs":  # every node's name, as each wrote it
                result["nodes"] = sorted(p.read_text() for p in (args.shared / "fs").glob("node-*"))
            print(f"[site] {name}: ok", flush=True)
    except CheckFailed as err:
        result.update(status="failed", reason=str(err))
        print(f"[site] FAILED: {err}", file=sys.stderr, flush=True)
    atomic.write_text(args.out, json.dumps(result, indent=1) + "\n")
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
