"""The analysis code's files and their hash: what lets verify say "the same analysis code".

An archive records the sha256 of the code that turned its events into tables; verify
compares it with its own, so that a table difference can be put down to the code rather
than the data. The files are not listed by hand (a list drifts: a module the aggregation
came to import was left out, and verify vouched for code that had changed): they are the
analysis package and every dlscale module it imports, followed through the imports read
with ``ast`` (nothing is imported), including imports inside functions, together with the
packages' ``__init__.py`` files that importing them runs.

Standard library only.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from pathlib import Path

from dlscale.catalog import REPO_DIR

#: The package whose code makes the tables; every dlscale module it imports counts too.
ANALYSIS_PACKAGE = "dlscale.analysis"
#: The top-level package the imports are followed within.
ROOT_PACKAGE = "dlscale"


def module_file(repo: Path, module: str) -> Path | None:
    """The source file of ``module`` under ``repo`` (a module or a package), None if none."""
    base = repo.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(repo: Path, path: Path) -> str:
    """The package a source file belongs to (itself for an ``__init__.py``)."""
    parts = path.relative_to(repo).with_suffix("").parts
    return ".".join(parts[:-1])


def imported_modules(repo: Path, path: Path) -> set[str]:
    """Every dlscale module ``path`` imports (anywhere in it), by dotted name: for
    ``from a import b`` both ``a`` and, where it is a module, ``a.b``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(repo, path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names if alias.name != "*"}
    return {
        name
        for name in found
        if (name == ROOT_PACKAGE or name.startswith(ROOT_PACKAGE + ".")) and module_file(repo, name)
    }


def _with_parents(module: str) -> Iterable[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: importing a module runs its packages' inits."""
    parts = module.split(".")
    return (".".join(parts[:end]) for end in range(1, len(parts) + 1))


def analysis_code(repo: Path = REPO_DIR) -> list[str]:
    """The analysis package's files and every dlscale module they import, transitively:
    paths relative to ``repo``, sorted."""
    package_dir = repo.joinpath(*ANALYSIS_PACKAGE.split("."))
    todo = [
        ".".join(path.relative_to(repo).with_suffix("").parts).removesuffix(".__init__")
        for path in sorted(package_dir.glob("*.py"))
    ]
    seen: set[str] = set()
    files: set[Path] = set()
    while todo:
        module = todo.pop()
        for name in _with_parents(module):
            if name in seen:
                continue
            seen.add(name)
            path = module_file(repo, name)
            if path is None:
                continue
            files.add(path)
            todo.extend(imported_modules(repo, path) - seen)
    return sorted(path.relative_to(repo).as_posix() for path in files)


def analysis_code_sha256(repo: Path = REPO_DIR) -> str:
    """sha256 over the analysis code (``analysis_code``, in order, each name and content)."""
    digest = hashlib.sha256()
    for name in analysis_code(repo):
        digest.update(name.encode() + b"\0" + (repo / name).read_bytes() + b"\0")
    return digest.hexdigest()
