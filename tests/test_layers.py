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

from dlscale import figures, outputs, quality_figures

PACKAGE = Path(__file__).resolve().parent.parent / "dlscale"
MAX_LINES = 1000

#: The ground floor: standard library only, imported at DAG time and by every runner venv.
GROUND_FLOOR = (
    "dlscale.atomic",
    "dlscale.catalog",
    "dlscale.networks",
    "dlscale.options",
    "dlscale.outputs",
    "dlscale.placement",
    "dlscale.runspec",
    "dlscale.thresholds",
)


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
    drawn = [*figures.STUDY_FIGURES, *quality_figures.QUALITY_FIGURES]
    assert sorted(drawn) == sorted(outputs.FIGURES) and len(set(drawn)) == len(drawn)
