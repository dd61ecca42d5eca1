"""verify's "same analysis code" covers what the aggregation runs: the files are derived from
the imports, so a module the analysis comes to import is counted without anyone listing it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.paths import REPO

from dlscale.archive import artifact, codehash
from dlscale.outputs import AGGREGATE_FILES


def _copy_package(root: Path) -> Path:
    shutil.copytree(
        REPO / "dlscale", root / "dlscale", ignore=shutil.ignore_patterns("__pycache__", "runners")
    )
    return root


def test_the_hash_covers_every_module_the_aggregation_imports() -> None:
    """Import the analysis package's modules in a fresh interpreter: every dlscale module that
    ends up loaded is one whose content the hash covers."""
    script = (
        "import json, pkgutil, importlib, sys\n"
        "import dlscale.analysis as pkg\n"
        "for info in pkgutil.iter_modules(pkg.__path__):\n"
        "    if info.name != '__main__':\n"
        "        importlib.import_module(f'dlscale.analysis.{info.name}')\n"
        "print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items()"
        " if n.split('.')[0] == 'dlscale' and getattr(m, '__file__', None))))\n"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", script], check=True, capture_output=True, text=True, cwd=REPO
        ).stdout
    )
    covered = set(codehash.analysis_code())
    missing = [
        rel for rel in (Path(f).resolve().relative_to(REPO).as_posix() for f in loaded) if rel not in covered
    ]
    assert not missing, f"loaded by the analysis but not hashed: {missing}"
    for name in ("dlscale/analysis/convergence.py", "dlscale/analysis/target_claims.py", "dlscale/analysis/evals.py",
                 "dlscale/analysis/readevents.py", "dlscale/thresholds.py", "dlscale/events.py"):  # fmt: skip
        assert name in covered


def test_a_module_the_analysis_comes_to_import_is_counted(tmp_path: Path) -> None:
    root = _copy_package(tmp_path)
    before = codehash.analysis_code(root)
    assert "dlscale/newhelper.py" not in before
    (root / "dlscale" / "newhelper.py").write_text("HELPER = 1\n", encoding="utf-8")
    sha_unused = codehash.analysis_code_sha256(root)
    assert codehash.analysis_code(root) == before  # not imported: not the analysis's code
    tables = root / "dlscale" / "analysis" / "tables.py"
    # Imported inside a function, and relatively: still followed.
    tables.write_text(
        tables.read_text(encoding="utf-8")
        + "\n\ndef _helper():\n    from .. import newhelper\n\n    return newhelper\n",
        encoding="utf-8",
    )
    after = codehash.analysis_code(root)
    assert set(after) - set(before) == {"dlscale/newhelper.py"}
    sha_used = codehash.analysis_code_sha256(root)
    assert sha_used != sha_unused
    (root / "dlscale" / "newhelper.py").write_text("HELPER = 2\n", encoding="utf-8")
    assert codehash.analysis_code_sha256(root) != sha_used


def test_a_new_module_in_the_analysis_package_is_counted(tmp_path: Path) -> None:
    root = _copy_package(tmp_path)
    (root / "dlscale" / "analysis" / "brand_new.py").write_text(
        "from dlscale import catalog\n", encoding="utf-8"
    )
    assert "dlscale/analysis/brand_new.py" in codehash.analysis_code(root)


def test_the_archive_records_the_derived_files_and_the_aggregations_tables() -> None:
    record = artifact.provenance(None, Path(".venvs"))
    assert record["analysis_code"] == codehash.analysis_code()
    assert record["analysis_sha256"] == codehash.analysis_code_sha256()
    assert artifact.analysis_outputs() == dict(AGGREGATE_FILES)
    assert not hasattr(artifact, "LEGACY_OUTPUT_FILES")


def test_the_aggregations_tables_are_the_one_list() -> None:
    from dlscale.analysis import aggregate

    assert aggregate.OUTPUT_FILES is AGGREGATE_FILES
    rule = (REPO / "rules" / "analysis.smk").read_text(encoding="utf-8")
    block = rule[rule.index("rule aggregate:") : rule.index("log:", rule.index("rule aggregate:"))]
    assert "AGGREGATE_FILES.items()" in block
    assert not any(f'"results/{name}"' in block for name in AGGREGATE_FILES.values())
