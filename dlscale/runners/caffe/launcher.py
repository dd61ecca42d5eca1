"""How a Caffe run starts: one MPI job of n x p ranks (mpirun locally, ``srun --mpi`` under SLURM).

The plan has a single process, the MPI launcher, and every rank writes its own part file
through the common harness (``reporting_ranks`` = world size). mpirun ends the whole job
when one rank dies, so no rank waits forever in an all-reduce for a dead peer; under SLURM
``srun --kill-on-bad-exit`` does the same.

pycaffe is not pip-installable: it lives in a Caffe build tree (``<home>/python``), found
in this order: the config's ``caffe.home``; ``DLSCALE_CAFFE_HOME``; the build marker named
by ``DLSCALE_CAFFE_MARKER`` (the training rule passes the one ``caffe_build`` wrote); the
build marker beside the framework venvs (``dlscale.envs.caffe_build_marker``, named by what
the build depends on: where the tests put it).

One build serves every BLAS (``blas.py``): the plan links ``libblas.so.3`` to the run's
implementation in ``<work dir>/blas`` and puts that directory first on every rank's
``LD_LIBRARY_PATH`` (mpirun passes it on with ``-x``; srun with ``--export=ALL``). A marker of
a build from before, linked to one implementation by name (``blas`` open or mkl), serves only
that one: another BLAS fails the run, naming both.
No caffe or MPI import here: this module is loaded when a run is planned.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlscale.envs import caffe_build_marker
from dlscale.host.netns import node_argv as netns_argv
from dlscale.runners.caffe import blas as caffe_blas
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

    With ``blas``, the build must be able to load that BLAS: the one build linked to the
    generic ``libblas.so.3`` loads any; a build from before, linked to one implementation
    by name (marker ``blas`` open, or absent, for OpenBLAS; mkl), only its own. A user's own
    Caffe says nothing (its run records what it loaded).
    """
    try:
        info = json.loads(Path(marker).read_text(encoding="utf-8"))
        home = check_home(info["home"])
    except (OSError, ValueError, KeyError) as err:
        raise CaffeNotFound(f"unreadable Caffe build marker {marker}: {err}") from None
    built = info.get("blas", "open") if info.get("built", True) else None
    only = {"open": "openblas", "mkl": "mkl"}.get(built or "")
    if blas is not None and only is not None and only != blas:
        raise CaffeNotFound(
            f"caffe.blas is {blas} but the Caffe build of {marker} ({home}) is linked to"
            f" BLAS={built} by name: rebuild it (scripts/build_caffe.sh links the generic {caffe_blas.SONAME})"
        )
    return home


def marker_beside_venvs(python: str | os.PathLike[str]) -> Path:
    """The Caffe build marker beside the framework venvs of ``python`` (``<envs>/caffe/bin/python``)."""
    return caffe_build_marker(Path(python).absolute().parent.parent.parent, None)


def caffe_home(options: Mapping[str, Any], env: Mapping[str, str], python: str) -> Path:
    """Where pycaffe and the caffe tool live (see the module docstring for the order)."""
    blas = str(options.get("blas") or "openblas")
    if options.get("home"):  # null (the default): the workflow's own build
        return check_home(options["home"])
    if env.get("DLSCALE_CAFFE_HOME"):
        return check_home(env["DLSCALE_CAFFE_HOME"])
    if env.get("DLSCALE_CAFFE_MARKER"):
        return read_marker(env["DLSCALE_CAFFE_MARKER"], blas)
    beside_venvs = marker_beside_venvs(python)
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


def blas_dir(ctx: LaunchContext) -> Path:
    """The run's BLAS directory: ``libblas.so.3`` linked to the run's implementation."""
    return ctx.work_dir / "blas"


def prepare_blas(ctx: LaunchContext) -> dict[str, str]:
    """The run's BLAS on the ranks' search path (``blas.py``): the directory prepared, and
    the variables every rank needs (LD_LIBRARY_PATH first, the implementation's threads)."""
    name = caffe_settings.blas(ctx.spec)
    try:
        implementation = caffe_blas.library(name, os.environ)
    except caffe_blas.BlasNotInstalled as err:
        raise CaffeNotFound(str(err)) from None
    directory = caffe_blas.prepare_dir(blas_dir(ctx), implementation)
    return caffe_blas.blas_env(name, directory, os.environ, ctx.spec.threads_per_rank)


def mpirun_argv(ctx: LaunchContext, mpirun: str = "mpirun") -> list[str]:
    """mpirun for n x p ranks on this host: root allowed, oversubscription allowed (emulated
    nodes may exceed the cores), no core binding (the node is shared, threads are pinned by
    count), the BLAS's search path exported to every rank (``-x``, on every node), and the
    job aborted as soon as one rank fails."""
    world = ctx.spec.world_size
    return [
        shutil.which(mpirun) or mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
        "-x", "LD_LIBRARY_PATH", "-n", str(world), *ctx.runner_argv(MODULE),
    ]  # fmt: skip


def listens_on_every_interface(spec: RunSpec) -> str | None:
    """mpirun (Open MPI 4.1) listens on 0.0.0.0 and :: for its out-of-band channel and PMIx
    whatever ``oob_tcp_if_include`` says (seen with ``ss -ltnp``), even for one rank: a
    local run needs a private network namespace (dlscale.launch)."""
    return "mpirun listens on every interface (Open MPI's out-of-band TCP and PMIx channels)"


def plan(ctx: LaunchContext) -> Plan:
    options = ctx.spec.options
    home = caffe_home(options, os.environ, ctx.python)
    blas_vars = prepare_blas(ctx)
    world = ctx.spec.world_size
    if ctx.mode == "slurm":
        env = {**slurm_env(ctx), **caffe_env(home, os.environ), **blas_vars}
        argv = srun_argv(ctx, f"--mpi={options['srun_mpi']}", *ctx.runner_argv(MODULE))
        return Plan([Process(f"srun --mpi ({world} ranks)", argv, env, None)], reporting_ranks=world)
    env = {
        **ctx.base_env(),
        **caffe_env(home, os.environ),
        **blas_vars,
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
        # namespace (dlscale.host.netns), and reaches mpirun's PMIx server across the emulated
        # network, which PMIx allows only when told (it listens on loopback by default).
        env.update({"PMIX_MCA_ptl_tcp_remote_connections": "1", "PMIX_MCA_ptl_tcp_if_include": ctx.interface})
        cut = argv.index(ctx.python)
        argv[cut:cut] = netns_argv(ctx.python, rank_var="OMPI_COMM_WORLD_RANK")
    return Plan([Process(f"mpirun ({world} ranks)", argv, env, None)], reporting_ranks=world)
