"""The house in layers: no module of dlscale/ takes part in an import circle, none grows past
1,000 lines, and the ground floor (what Snakemake imports at DAG time and every framework's
venv imports) imports nothing above it.

Imports inside functions count as edges too: an import moved into a function to dodge a
circle is still a circle. Read from the source with ``ast`` (nothing is imported), so the
test needs no framework.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest
from helpers.paths import REPO

from dlscale import outputs
from dlscale.figures import charts, quality

PACKAGE = REPO / "dlscale"
MAX_LINES = 1000

#: The ground floor: standard library only, imported at DAG time and by every runner venv.
GROUND_FLOOR = (
    "dlscale.base.atomic",
    "dlscale.catalog",
    "dlscale.networks",
    "dlscale.options",
    "dlscale.outputs",
    "dlscale.host.placement",
    "dlscale.runid",
    "dlscale.runspec",
    "dlscale.thresholds",
)


#: The floors of the house (docs/architecture.md), lowest first: a module may import only
#: modules on its own floor or below. A package is named by its prefix.
FLOORS: tuple[tuple[str, ...], ...] = (
    # ground: the catalog and what the DAG and every runner's venv import
    ("dlscale", "dlscale.base.atomic", "dlscale.catalog", "dlscale.networks", "dlscale.options", "dlscale.outputs",
     "dlscale.host.placement", "dlscale.runid", "dlscale.runspec", "dlscale.thresholds", "dlscale.quality", "dlscale.data.initweights",
     "dlscale.events", "dlscale.study.jobs", "dlscale.base.sysutil", "dlscale.base.logsetup", "dlscale.study.preflight",
     "dlscale.host.netns", "dlscale.host.userns", "dlscale.host.contention", "dlscale.host.roofline", "dlscale.envs",
     "dlscale.host.sitecheck", "dlscale.analysis.stats", "dlscale.archive.safety"),
    # config -> runs; data; native logs
    ("dlscale.study.matrix", "dlscale.study.validation", "dlscale.base.strictyaml", "dlscale.data", "dlscale.parse"),
    # one folder per framework behind one contract
    ("dlscale.runners",),
    # start, watch and record a run; the micro-benchmarks; the tuning grid (asks the runners)
    ("dlscale.launch", "dlscale.commbench", "dlscale.tune.grid"),
    # events -> tables
    ("dlscale.analysis.evals", "dlscale.analysis.readevents", "dlscale.analysis.eventchecks", "dlscale.analysis.runstats",
     "dlscale.analysis.speedup",
     "dlscale.analysis.tables", "dlscale.analysis.parity", "dlscale.analysis.convergence"),
    # tables -> cells, findings, claims; the tuning stage's choice
    ("dlscale.analysis.cells", "dlscale.analysis.findings", "dlscale.analysis.claims", "dlscale.tune.choice", "dlscale.analysis.batch_scaling"),
    # what a person reads, and the scaling model
    ("dlscale.figures", "dlscale.analysis.target_claims", "dlscale.analysis.nodes_to_target",
     "dlscale.perfmodel", "dlscale.perfmodel.systems", "dlscale.perfmodel.replay"),
    # the aggregation entry point
    ("dlscale.analysis.aggregate", "dlscale.analysis.__main__"),
    # archives in and out
    ("dlscale.archive.artifact", "dlscale.archive.codehash", "dlscale.archive.recompute", "dlscale.archive.verify"),
    # studies against each other (archives read through verify)
    ("dlscale.compare.comparison", "dlscale.compare.__main__", "dlscale.compare.studies", "dlscale.compare.page",
     "dlscale.compare.cells"),
)  # fmt: skip


def floor_of(module: str) -> int | None:
    """The floor of ``module`` (its own name or its package's prefix), None if unplaced."""
    best: tuple[int, int] | None = None
    for floor, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > best[1]):
                best = (floor, len(name))
    return None if best is None else best[0]


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The dlscale modules ``name`` imports anywhere in its source (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        for target in targets:
            if not target.startswith("dlscale"):
                continue
            resolved = resolve(target)
            # The root package and a module's own package __init__ are not edges of a circle.
            if (
                resolved
                and resolved != "dlscale"
                and resolved != name
                and not name.startswith(resolved + ".")
            ):
                found.add(resolved)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def test_no_module_takes_part_in_an_import_circle() -> None:
    graph = import_graph()
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        circle = " -> ".join(err.args[1])
        pytest.fail(f"import circle in dlscale/: {circle}")


def test_the_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    """The reader finds an import hidden in a function (else the circle test could not fail)."""
    source = tmp_path / "dlscale" / "a.py"
    source.parent.mkdir()
    source.write_text("def f():\n    from dlscale import b\n    return b\n")
    (tmp_path / "dlscale" / "b.py").write_text("from dlscale.a import f\n")
    modules = {"dlscale.a": source, "dlscale.b": tmp_path / "dlscale" / "b.py"}
    assert imported_modules("dlscale.a", source, modules) == {"dlscale.b"}
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter(graph).static_order())


def test_no_module_is_over_a_thousand_lines() -> None:
    big = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not big, f"modules over {MAX_LINES} lines (split them along their seams): {big}"


def test_no_module_level_getattr() -> None:
    """A module ``__getattr__`` re-exporting names hides which module owns them."""
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
            for node in ast.parse(path.read_text(encoding="utf-8")).body
        )
    ]
    assert not offenders, f"module-level __getattr__ in {offenders}"


def test_the_ground_floor_imports_only_the_ground_floor() -> None:
    graph = import_graph()
    for name in GROUND_FLOOR:
        assert name in graph, f"{name} is listed as ground floor but does not exist"
        above = sorted(graph[name] - set(GROUND_FLOOR))
        assert not above, f"{name} (ground floor) imports {above}, which are above it"


def test_every_figure_has_one_drawer() -> None:
    """The one list of figures (dlscale.outputs.FIGURES) is exactly what the two drawing
    modules draw, each figure by one of them."""
    drawn = [*charts.STUDY_FIGURES, *quality.QUALITY_FIGURES]
    assert sorted(drawn) == sorted(outputs.FIGURES) and len(set(drawn)) == len(drawn)


def test_every_module_has_a_floor_and_imports_only_downward() -> None:
    graph = import_graph()
    unplaced = sorted(m for m in graph if floor_of(m) is None)
    assert not unplaced, f"modules on no floor (add them to FLOORS and docs/architecture.md): {unplaced}"
    upward = sorted(
        f"{m} (floor {floor_of(m)}) imports {t} (floor {floor_of(t)})"
        for m, targets in graph.items()
        for t in targets
        if floor_of(t) > floor_of(m)
    )
    assert not upward, "imports that run up the house:\n" + "\n".join(upward)
