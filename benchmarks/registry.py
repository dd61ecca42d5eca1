"""Which frameworks the benchmarks cover: the catalog's frameworks that have a bench module.

A framework's entry is the ``BENCH`` (a ``benchmarks.common.FrameworkBench``) that its own
module ``benchmarks/<framework>_bench.py`` declares; the modules import
``benchmarks.common``, never this registry, which collects them by the names in
``dlscale.catalog.FRAMEWORK_NAMES`` (in the catalog's order). Adding a framework's
benchmarks is writing that module (its owner knows how its runner steps); a framework of
the catalog without one is reported as "not covered", never silently skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from benchmarks.common import FrameworkBench
from dlscale import catalog


def bench_module(framework: str) -> str:
    return f"{__package__}.{framework}_bench"


def _entry(framework: str) -> FrameworkBench | None:
    """The framework's entry, or None when it has no bench module (yet)."""
    name = bench_module(framework)
    if importlib.util.find_spec(name) is None:
        return None
    entry = importlib.import_module(name).BENCH
    if not isinstance(entry, FrameworkBench) or entry.name != framework:
        raise TypeError(f"{name}.BENCH must be the FrameworkBench of {framework!r}, not {entry!r}")
    return entry


#: Every catalog framework that has benchmarks, by name, in the catalog's order.
FRAMEWORKS: Mapping[str, FrameworkBench] = MappingProxyType(
    {name: entry for name in catalog.FRAMEWORK_NAMES if (entry := _entry(name)) is not None}
)


def covered(
    frameworks: Iterable[str], entries: Mapping[str, FrameworkBench] = FRAMEWORKS
) -> tuple[list[FrameworkBench], list[str]]:
    """The entries among ``frameworks`` (catalog names), and the names that have none yet."""
    asked = list(frameworks)
    return [entries[fw] for fw in asked if fw in entries], [fw for fw in asked if fw not in entries]
