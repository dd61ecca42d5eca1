"""How a BigDL run starts: one driver process, which brings up its own Spark cluster.

BigDL's "ranks" are Spark executor cores (see ``spark.ClusterShape``): the launcher does not
start them, the driver does, through the standalone master and workers it starts and stops
itself (``dlscale.runners.bigdl.spark``). Only the driver reports: BigDL's log gives one
line per iteration for the whole cluster, so the plan has ``reporting_ranks=1`` and each
iteration event carries the GLOBAL samples.
"""

import os
import shutil
from collections.abc import Mapping
from typing import Any

from dlscale import envs
from dlscale.host import placement
from dlscale.runners.bigdl import settings as bigdl_settings
from dlscale.runners.plan import LaunchContext, Plan, Process
from dlscale.runspec import RunSpec


def settings(spec: RunSpec) -> dict[str, Any]:
    """The engine, libraries, threads and batch split this run computes with (run_start's
    ``settings``): see ``dlscale.runners.bigdl.settings.describe``."""
    try:
        return bigdl_settings.describe(spec)
    except bigdl_settings.BigDLSettingsError as err:
        return {"error": str(err)}


def listens_on_every_interface(spec: RunSpec) -> str | None:
    """Nothing: every Spark daemon and the driver bind their node's address
    (``dlscale.runners.bigdl.spark``)."""
    return None


def host_loopback_reason(spec: RunSpec, environ: Mapping[str, str]) -> str | None:
    """Why this run stays on the study's network (the host's loopback) instead of a namespace
    of its own, or None: with ``cluster: per_study`` the study's Spark cluster outlives every
    run, so its runs must reach it where it listens (every daemon and the driver bind
    127.0.0.1 only, and authenticate: ``spark``). Only where per_study applies
    (``shared_cluster.choose``, as the driver decides it)."""
    from dlscale.runners.bigdl.shared_cluster import choose

    chosen, _ = choose(str(spec.options.get("cluster") or "per_run"), environ)
    if chosen != "per_study":
        return None
    return "BigDL cluster per_study: the study's Spark cluster, shared by its runs, on the host's loopback"


def java_env(environ: Mapping[str, str]) -> dict[str, str]:
    """JAVA_HOME for a run that has no Java of its own (none on PATH, no JAVA_HOME): the JDK
    from PyPI that scripts/ensure-java.sh installs for a user without root, where it is."""
    if shutil.which("java", path=environ.get("PATH")) or environ.get("JAVA_HOME"):
        return {}
    home = envs.user_java_home(environ)
    return {"JAVA_HOME": str(home)} if (home / "bin" / "java").is_file() else {}


def plan(ctx: LaunchContext) -> Plan:
    env = {
        **ctx.base_env(),
        **java_env(os.environ),
        "PYSPARK_PYTHON": ctx.python,
        "DLSCALE_SPARK_MODE": ctx.mode,
    }
    try:  # the engine's variables, as the driver gets them (and records them: run_start)
        env.update(bigdl_settings.engine_settings(ctx.spec).env)
    except bigdl_settings.BigDLSettingsError:
        pass  # the driver fails the run with the reason, before any JVM starts
    if ctx.mode == "local":
        env.update(
            placement.local_rank_env(
                0, ctx.spec.nodes, ctx.spec.ranks_per_node, ctx.master_port, ctx.address_of(0)
            )
        )
    driver = Process("bigdl driver", ctx.runner_argv("dlscale.runners.bigdl"), env, rank=0)
    return Plan([driver], reporting_ranks=1)
