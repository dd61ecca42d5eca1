"""The runner contract, stated once: the files of a runner folder and what its modules offer.

A framework's runner, ``dlscale/runners/<framework>/``, is read from two sides, and each side
relies on one Protocol here:

- the workflow's python (Snakemake's DAG, ``dlscale.launch`` when it plans and records a
  run, the tuning stage) imports ``launcher`` (``Launcher``), which reads ``settings``
  (``Settings``); neither imports the framework, which is not installed there;
- the framework's venv runs ``python -m dlscale.runners.<framework>``, whose ``__main__``
  hands ``train`` (``Trainer``) to ``dlscale.runners.common.main``.

A module satisfies a Protocol structurally (PEP 544: a module implements a protocol with
its functions, the members without ``self``); every member is required, so no caller asks
whether a runner has it. ``tests/unit/test_catalog.py`` checks every runner folder against
``RUNNER_FILES`` and its modules against the Protocols: the light ones imported, the
trainer parsed (importing it needs the framework). A runner may have more files (its data
feed, its distributed set-up); these are the ones every runner has.

Standard library only: it describes the runners without importing any of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from dlscale.runners.common import RunContext
    from dlscale.runners.plan import LaunchContext, Plan
    from dlscale.runspec import RunSpec


@runtime_checkable
class Launcher(Protocol):
    """``launcher.py``: how a run starts and what it computes with. No framework import.

    One optional hook, read with ``getattr`` where it is used: ``host_loopback_reason(spec,
    environ) -> str | None`` (``dlscale.launch.network``), why a local run stays on the
    study's loopback instead of a namespace of its own (a daemon of the study that outlives
    its runs, as BigDL's per-study Spark cluster); a runner without it never does.
    """

    def plan(self, ctx: LaunchContext) -> Plan:
        """The run's processes (``dlscale.runners.plan``): ranks, servers or one driver."""
        ...

    def settings(self, spec: RunSpec) -> dict[str, Any]:
        """The CPU settings a run of ``spec`` computes with, by name, recorded in run_start's
        ``settings`` (``Settings.describe``, or what its failure says)."""
        ...

    def listens_on_every_interface(self, spec: RunSpec) -> str | None:
        """What of the run listens on every interface whatever it is told (None: nothing):
        a local run of such a framework needs a private network namespace."""
        ...


@runtime_checkable
class Settings(Protocol):
    """``settings.py``: the runner's tunable CPU settings, from its options. No framework import."""

    def describe(self, spec: RunSpec) -> dict[str, Any]:
        """The settings a run of ``spec`` uses, by name (engine, libraries, threads)."""
        ...


@runtime_checkable
class Trainer(Protocol):
    """``train.py``: one rank (or driver) of a run, in the framework's venv.

    Optional: ``exits_without_teardown(spec) -> bool``; true ends the rank with ``os._exit``
    once its ``rank_end`` is written (``common.exit_skipping_teardown``), for a framework
    whose native teardown can abort after a whole run, or only costs time where no peer can
    still need the rank; not for one whose teardown must run (MPI).
    """

    def versions(self) -> dict[str, str]:
        """The framework's and its libraries' versions, for rank_start."""
        ...

    def peers(self, ctx: RunContext) -> list[tuple[str, str]]:
        """``(who, "host:port")`` of every peer this rank dials besides the master (checked
        to resolve before any server starts); ``[]`` where the rendezvous is the master's."""
        ...

    def train(self, ctx: RunContext) -> None:
        """Set up and run the timed loop, recording every iteration through ``ctx``."""
        ...


#: The module of a runner folder that implements each Protocol.
MODULES: Mapping[str, type] = MappingProxyType({"launcher": Launcher, "settings": Settings, "train": Trainer})

#: The files every runner folder has, and the job of each.
RUNNER_FILES: Mapping[str, str] = MappingProxyType(
    {
        "__init__.py": "the package; importing it imports no framework",
        "__main__.py": "``raise SystemExit(main(train))``: one rank of a run, through runners.common",
        "launcher.py": "``Launcher``",
        "settings.py": "``Settings``",
        "train.py": "``Trainer``",
        "models.py": "the catalog's models in this framework, their parameter counts the catalog's",
        "evaluate.py": "held-out quality with the framework's own inference (rank 0, outside timed steps;"
        " RunContext.record_eval)",
        "options.schema.json": "the framework's config options (key ``<framework>``), with x-tune rules",
    }
)


def members(protocol: type) -> dict[str, tuple[str, ...]]:
    """Each member function of ``protocol`` -> its parameter names (without ``self``): what a
    module must define to satisfy it."""
    return {
        name: tuple(inspect.signature(function).parameters)[1:]
        for name, function in vars(protocol).items()
        if inspect.isfunction(function) and not name.startswith("_")
    }
