"""How a Caffe run starts: one MPI job of n x p ranks (mpirun locally, ``srun --mpi`` under SLURM).

The plan has a single process, the MPI launcher, and every rank writes its own part file
through the common harness (``reporting_ranks`` = world size). mpirun ends the whole job
when one rank dies, so no rank waits forever in an all-reduce for a dead peer; under SLURM
``srun --kill-on-bad-exit`` does the same.

pycaffe is not pip-installable: it lives in a Caffe build tree (``<home>/python``), found
in this order: the config's ``caffe.home``; ``DLSCALE_CAFFE_HOME``; the build marker named
by ``DLSCALE_CAFFE_MARKER`` (the training rule passes the one ``caffe_build`` wrote for the
run's ``blas``); the build marker beside the framework venvs
(``dlscale.envs.caffe_build_marker``, named by what the build depends on and by the BLAS:
where the tests put it). A marker built against another BLAS than the run's fails the run.
No caffe or MPI import here: this module is loaded when a run is planned.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlscale.envs import CAFFE_BLAS, caffe_build_marker
from dlscale.netns import node_argv as netns_argv
from dlscale.runners.caffe import settings as caffe_settings
from dlscale.runners.plan import LaunchContext, Plan, Process, slurm_env, srun_argv
from dlscale.runspec import RunSpec

MODULE = "dlscale.runners.caffe"


class CaffeNotFound(RuntimeError):
    """No usable Caffe install: the message says where it looked and how to provide one."""


def check_home(home: str | os.PathLike[str]) -> Path:
    """A Caffe build tree with pycaffe (``python/caffe``) and the tool (``build/tools/caffe``)."""
    path = Path(home).expanduser().resolve()
    missing = [p for p in ("python/caffe/__init__.py", "build/tools/caffe") if not (path / p).exists()]
    if missing:
        raise CaffeNotFound(f"{path} is not a built Caffe tree: missing {', '.join(missing)}")
    return path


def read_marker(marker: str | os.PathLike[str], blas: str | None = None) -> Path:
    """The Caffe home recorded in a build marker (written by scripts/build_caffe.sh).

    With ``blas``, the marker must be of a build against that BLAS (a marker from before
    the choice, without ``blas``, is an OpenBLAS build; a user's own Caffe says nothing).
    """
    try:
        info = json.loads(Path(marker).read_text(encoding="utf-8"))
        home = check_home(info["home"])
    except (OSError, ValueError, KeyError) as err:
        raise CaffeNotFound(f"unreadable Caffe build marker {marker}: {err}") from None
    built = info.get("blas", "open") if info.get("built", True) else None
    if blas is not None and built is not None and built != CAFFE_BLAS[blas]:
        raise CaffeNotFound(
            f"caffe.blas is {blas} but the Caffe build of {marker} ({home}) is linked against"
            f" BLAS={built} (scripts/build_caffe.sh, DLSCALE_CAFFE_BLAS)"
        )
    return home


def marker_beside_venvs(python: str | os.PathLike[str], blas: str = "openblas") -> Path:
    """The Caffe build marker beside the framework venvs of ``python`` (``<envs>/caffe/bin/python``)."""
    return caffe_build_marker(Path(python).absolute().parent.parent.parent, None, blas=blas)


def caffe_home(options: Mapping[str, Any], env: Mapping[str, str], python: str) -> Path:
    """Where pycaffe and the caffe tool live (see the module docstring for the order)."""
    blas = str(options.get("blas") or "openblas")
    if options.get("home"):  # null (the default): the workflow's own build
        return check_home(options["home"])
    if env.get("DLSCALE_CAFFE_HOME"):
        return check_home(env["DLSCALE_CAFFE_HOME"])
    if env.get("DLSCALE_CAFFE_MARKER"):
        return read_marker(env["DLSCALE_CAFFE_MARKER"], blas)
    beside_venvs = marker_beside_venvs(python, blas)
    if beside_venvs.is_file():
        return read_marker(beside_venvs, blas)
    raise CaffeNotFound(
        "no Caffe install found: set config caffe.home to a built Caffe tree, or let the"
        f" workflow build one (rule caffe_build; looked for {beside_venvs})"
    )


def settings(spec: RunSpec) -> dict[str, Any]:
    """What a Caffe run computes with (run_start's ``settings``): see
    ``dlscale.runners.caffe.settings.describe``."""
    return caffe_settings.describe(spec)


def caffe_env(home: Path, env: Mapping[str, str]) -> dict[str, str]:
    """pycaffe importable (dlscale is installed in the venv); Caffe's glog quiet below warnings."""
    path = [str(home / "python")]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    return {
        "PYTHONPATH": os.pathsep.join(path),
        "DLSCALE_CAFFE_HOME": str(home),
        "GLOG_minloglevel": str(env.get("GLOG_minloglevel", "1")),
    }


def mpirun_argv(ctx: LaunchContext, mpirun: str = "mpirun") -> list[str]:
    """mpirun for n x p ranks on this host: root allowed, oversubscription allowed (emulated
    nodes may exceed the cores), no core binding (the node is shared, threads are pinned by
    count), and the job aborted as soon as one rank fails."""
    world = ctx.spec.world_size
    return [
        shutil.which(mpirun) or mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
        "-n", str(world), *ctx.runner_argv(MODULE),
    ]  # fmt: skip


def listens_on_every_interface(spec: RunSpec) -> str | None:
    """mpirun (Open MPI 4.1) listens on 0.0.0.0 and :: for its out-of-band channel and PMIx
    whatever ``oob_tcp_if_include`` says (seen with ``ss -ltnp``), even for one rank: a
    local run needs a private network namespace (dlscale.launch)."""
    return "mpirun listens on every interface (Open MPI's out-of-band TCP and PMIx channels)"


def plan(ctx: LaunchContext) -> Plan:
    options = ctx.spec.options
    home = caffe_home(options, os.environ, ctx.python)
    world = ctx.spec.world_size
    if ctx.mode == "slurm":
        env = {**slurm_env(ctx), **caffe_env(home, os.environ)}
        argv = srun_argv(ctx, f"--mpi={options['srun_mpi']}", *ctx.runner_argv(MODULE))
        return Plan([Process(f"srun --mpi ({world} ranks)", argv, env, None)], reporting_ranks=world)
    env = {
        **ctx.base_env(),
        **caffe_env(home, os.environ),
        # Emulated nodes talk over TCP on loopback, as torch's gloo does here, and as ranks
        # on different nodes would: no shared-memory shortcut between "nodes".
        "OMPI_MCA_btl": os.environ.get("OMPI_MCA_btl", "self,tcp"),
        "DLSCALE_MPIRUN": "1",
        "DLSCALE_RANKS_PER_NODE": str(ctx.spec.ranks_per_node),
        "DLSCALE_MASTER_ADDR": ctx.master_addr,
        "DLSCALE_MASTER_PORT": str(ctx.master_port),
    }
    argv = mpirun_argv(ctx, options["mpirun"])
    if ctx.emulated:
        # mpirun starts every rank itself: each rank first joins its emulated node's network
        # namespace (dlscale.netns), and reaches mpirun's PMIx server across the emulated
        # network, which PMIx allows only when told (it listens on loopback by default).
        env.update({"PMIX_MCA_ptl_tcp_remote_connections": "1", "PMIX_MCA_ptl_tcp_if_include": ctx.interface})
        cut = argv.index(ctx.python)
        argv[cut:cut] = netns_argv(ctx.python, rank_var="OMPI_COMM_WORLD_RANK")
    return Plan([Process(f"mpirun ({world} ranks)", argv, env, None)], reporting_ranks=world)
