"""The house in layers: every module of dlscale/ belongs to a unit (a stage's package, or a
top-level module), every unit sits on a floor of docs/architecture.md and imports nothing
above it; no module takes part in an import circle or grows past 600 lines outside
dlscale/runners/.

Imports inside functions count as edges too: an import moved into a function to dodge a
circle is still a circle. Read from the source with ``ast`` (nothing is imported), so the
test needs no framework.
"""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import pytest
from helpers.paths import REPO

from dlscale import outputs
from dlscale.figures import charts, quality

PACKAGE = REPO / "dlscale"
ARCHITECTURE = REPO / "docs" / "architecture.md"
MAX_LINES = 600
#: Where the limit does not apply: a runner is one framework's whole training loop.
UNLIMITED = ("dlscale/runners/",)

#: Standard library only, and importing nothing of dlscale outside this set: Snakemake
#: imports them while it plans and every framework's venv imports them through the runners.
STDLIB_CORE = (
    "dlscale.base.atomic",
    "dlscale.base.sysutil",
    "dlscale.catalog",
    "dlscale.networks",
    "dlscale.options",
    "dlscale.outputs",
    "dlscale.host.placement",
    "dlscale.runid",
    "dlscale.runspec",
    "dlscale.thresholds",
)


def read_floors(text: str) -> dict[str, int]:
    """Each unit's floor from the fenced block after the ``floors`` marker of
    docs/architecture.md: one line a floor, ``N  unit, unit, ...``."""
    block = text.split("<!-- floors:", 1)[1].split("```", 2)[1]
    floors: dict[str, int] = {}
    for line in block.splitlines():
        if not line.strip():
            continue
        match = re.fullmatch(r"\s*(\d+)\s+(.+)", line)
        assert match, f"docs/architecture.md: a floor line must be 'N  unit, unit': {line!r}"
        for unit in match[2].split(","):
            floors[f"dlscale.{unit.strip()}"] = int(match[1])
    return floors


FLOORS = read_floors(ARCHITECTURE.read_text(encoding="utf-8"))


def unit_of(module: str) -> str:
    """A module's unit: its stage package (``dlscale.analysis``), or itself at the top level."""
    return ".".join(module.split(".")[:2])


def floor_of(module: str) -> int | None:
    """The floor of ``module``'s unit, None if the unit is on no floor."""
    return FLOORS.get(unit_of(module))


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


def test_no_module_is_over_the_line_limit() -> None:
    big = {
        name: n
        for path in PACKAGE.rglob("*.py")
        if not (name := str(path.relative_to(PACKAGE.parent))).startswith(UNLIMITED)
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
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


def test_the_standard_library_core_imports_only_itself() -> None:
    graph = import_graph()
    for name in STDLIB_CORE:
        assert name in graph, f"{name} is listed in STDLIB_CORE but does not exist"
        outside = sorted(graph[name] - set(STDLIB_CORE))
        assert not outside, f"{name} (standard-library core) imports {outside}"


def test_every_figure_has_one_drawer() -> None:
    """The one list of figures (dlscale.outputs.FIGURES) is exactly what the two drawing
    modules draw, each figure by one of them."""
    drawn = [*charts.STUDY_FIGURES, *quality.QUALITY_FIGURES]
    assert sorted(drawn) == sorted(outputs.FIGURES) and len(set(drawn)) == len(drawn)


def test_the_floors_read_from_the_architecture_page() -> None:
    assert read_floors("<!-- floors: x -->\n```\n 1  cli, __main__\n 0  base\n```\n") == {
        "dlscale.cli": 1,
        "dlscale.__main__": 1,
        "dlscale.base": 0,
    }
    units = {unit_of(name) for name in module_files()}
    listed_but_absent = sorted(set(FLOORS) - units)
    assert not listed_but_absent, f"docs/architecture.md lists units that do not exist: {listed_but_absent}"


def test_every_unit_has_a_floor_and_imports_only_downward() -> None:
    graph = import_graph()
    # The root package's __init__ holds only the version and imports nothing.
    unplaced = sorted({unit_of(m) for m in graph if m != "dlscale" and floor_of(m) is None})
    assert not unplaced, f"units on no floor (add them to docs/architecture.md's floors): {unplaced}"
    upward = sorted(
        f"{m} ({unit_of(m)}, floor {floor_of(m)}) imports {t} ({unit_of(t)}, floor {floor_of(t)})"
        for m, targets in graph.items()
        if m != "dlscale"
        for t in targets
        if floor_of(t) > floor_of(m)
    )
    assert not upward, "imports that run up the house:\n" + "\n".join(upward)
