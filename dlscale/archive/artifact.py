"""One archive per study: everything needed to hand a study to someone else and check it.

``python -m dlscale.archive.artifact --config config.yaml --out results/artifact.tar.gz`` (what
``make artifact`` runs) writes a single ``.tar.gz`` whose one top folder holds:

* ``MANIFEST.json``: the sha256 and size of every other file, the study (config files,
  the run ids it expands to, how many ran ok), and the provenance: git revision and
  whether the tree had uncommitted changes, host, platform, Python and library versions,
  the sha256 of the analysis code, each environment's ``lock_sha256`` and whether the
  venv in use was built from that lock, and the Caffe build's key;
* ``config/``: the study's config files as given;
* ``envs/``: every requirements file and lock (``envs/<env>.txt``, ``.lock``), and under
  ``envs/installed/`` the markers of the venvs the runs used (their ``pip freeze``);
* ``results/``: every run's folder (events, logs, failed attempts), the tables
  (runs.csv/.parquet, iterations.parquet, findings.csv, the scaling model's CSVs), the
  figures, the report, and the workflow's logs. Datasets are left out (shards are large
  and remade by the workflow): only their small JSON records (checksums, indexes) come.

``python -m dlscale.archive.verify ARCHIVE`` checks every checksum of the manifest and recomputes
the tables from the events (dlscale.archive.verify). Paths inside the archive are those of the
study folder, so the same checks run on the archive and on a results folder.

Standard library only, but for reading the config (PyYAML, and jsonschema through
dlscale.study.matrix), both in the workflow's environment.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import os
import platform
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from dlscale import catalog, envs
from dlscale.archive.codehash import analysis_code, analysis_code_sha256
from dlscale.base import atomic
from dlscale.catalog import CONFIG_SCHEMA, REPO_DIR
from dlscale.outputs import AGGREGATE_FILES, ARCHIVE_MANIFEST
from dlscale.study import matrix as dlstudy
from dlscale.study import validation

#: /2: the manifest carries its seal (``MANIFEST_SEAL``); /1 archives have none.
FORMAT = "dlscale-artifact/2"
MANIFEST = ARCHIVE_MANIFEST
#: The manifest's key holding the sha256 of the rest of it (``manifest_seal``): an edit of
#: the provenance (host, platform, versions) that does not redo the seal fails verify's
#: integrity check, as an edited data file does; one that redoes it is caught only by the
#: publisher's digest of the archive (docs/verify.md, "What verify proves").
MANIFEST_SEAL = "manifest_sha256"
#: Needed for a study to be handed over: without them there is nothing to verify.
REQUIRED = ("results/runs.csv", "results/findings.csv")
#: Under results/: what is never archived (datasets and benchmarks are not the study's
#: results; data/ keeps its small *.json records).
EXCLUDED_DIRS = ("data", "bench")
#: A single file larger than this is left out (and named in the manifest's ``left_out``).
MAX_FILE_BYTES = 64 * 1024 * 1024
#: Library versions recorded in the provenance (those that make and read the tables).
VERSION_PACKAGES = ("snakemake", "pandas", "numpy", "pyarrow", "altair", "vl-convert-python", "jsonschema")


class ArtifactError(RuntimeError):
    """The study cannot be archived (e.g. no tables yet); the message says what is missing."""


def analysis_outputs() -> dict[str, str]:
    """The tables the aggregate rule writes (``dlscale.outputs.AGGREGATE_FILES``): output
    name -> file name under results/. dlscale.archive.verify recomputes each of them."""
    return dict(AGGREGATE_FILES)


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(REPO_DIR), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("dlscale", *VERSION_PACKAGES):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def provenance(study: dict[str, Any] | None, envs_dir: Path) -> dict[str, Any]:
    """Where and with what the study's files were made (as far as this host can tell)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    frameworks = study["frameworks"] if study else list(catalog.FRAMEWORKS)
    environments: dict[str, Any] = {}
    for env in [*frameworks, envs.WORKFLOW_ENV]:
        try:
            sha = envs.lock_sha256(env)
        except (envs.EnvError, OSError) as err:
            environments[env] = {"error": str(err)}
            continue
        entry: dict[str, Any] = {"lock_sha256": sha, "locks": [p.name for p in envs.lock_files(env)]}
        if env != envs.WORKFLOW_ENV:
            marker = envs.env_marker(envs_dir, env)
            entry["venv_built_from_lock"] = marker.exists()
        environments[env] = entry
    record: dict[str, Any] = {
        "git_sha": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "git_describe": _git("describe", "--always", "--dirty", "--tags"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "versions": _versions(),
        "analysis_code": analysis_code(),
        "analysis_sha256": analysis_code_sha256(),
        "environments": environments,
    }
    if study and "caffe" in study["frameworks"]:
        try:
            record["caffe_build_key"] = envs.caffe_build_key(study["caffe"]["home"])
        except (envs.EnvError, OSError) as err:
            record["caffe_build_key"] = f"unknown: {err}"
    return record


def read_study_config(config_files: Sequence[Path]) -> dict[str, Any]:
    """The validated study (defaults filled) of config files merged in order, as Snakemake
    merges ``configfile`` and ``--configfile``."""
    merged: dict[str, Any] = {}
    for path in config_files:
        data = validation.read_config_file(path) or {}  # a key given twice refused, as the workflow does
        merged = _merge(merged, data)
    schema = validation.load_schema(CONFIG_SCHEMA)
    return validation.validate_config(merged, schema, Path(config_files[0]).parent if config_files else ".")


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _results_files(results: Path, out: Path) -> tuple[list[Path], list[dict[str, str]]]:
    files: list[Path] = []
    left_out: list[dict[str, str]] = []
    for root, dirs, names in os.walk(results):
        rel_root = Path(root).relative_to(results)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(root) / name
            top = rel_root.parts[0] if rel_root.parts else ""
            if name.startswith(".") or (
                path.parent.resolve() == out.parent.resolve() and name.startswith(out.name)
            ):
                continue
            if top in EXCLUDED_DIRS and not (top == "data" and name.endswith(".json")):
                continue
            if not path.is_file():
                continue
            if path.stat().st_size > MAX_FILE_BYTES:
                left_out.append({"path": str(path), "why": f"larger than {MAX_FILE_BYTES} bytes"})
                continue
            files.append(path)
    return files, left_out


def _count_runs(runs_csv: Path) -> dict[str, int]:
    with open(runs_csv, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    ok = sum(1 for row in rows if row.get("status") == "ok")
    return {"rows": len(rows), "ok": ok, "failed": len(rows) - ok}


def collect(
    results: Path, config_files: Sequence[Path], envs_dir: Path, out: Path
) -> tuple[dict[str, Path], dict[str, Any]]:
    """``{path in the archive: file here}`` and the manifest without its ``files``."""
    for name in REQUIRED:
        if not (results / Path(name).relative_to("results")).is_file():
            raise ArtifactError(
                f"{results / Path(name).relative_to('results')} is missing: run the study first (make demo)"
            )
    study = read_study_config(config_files) if config_files else None
    members: dict[str, Path] = {}
    for path in config_files:
        members[f"config/{Path(path).name}"] = Path(path)
    for path in sorted(envs.SPEC_DIR.iterdir()):
        if path.suffix in (".txt", ".lock") and path.is_file():
            members[f"envs/{path.name}"] = path
    installed = []
    for env in study["frameworks"] if study else []:
        marker = envs.env_marker(envs_dir, env)
        if marker.exists():
            members[f"envs/installed/{env}.json"] = marker
            installed.append(env)
    if study and "caffe" in study["frameworks"]:
        marker = envs.caffe_build_marker(envs_dir, study["caffe"]["home"])
        if marker.exists():
            members["envs/installed/caffe-build.json"] = marker
    files, left_out = _results_files(results, out)
    for path in files:
        members["results/" + path.relative_to(results).as_posix()] = path
    expected = [*(f"results/{name}" for name in analysis_outputs().values()), "results/report.html"]
    absent = [name for name in expected if name not in members]
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "study": {
            "config": [f"config/{Path(p).name}" for p in config_files],
            "run_ids": [run.run_id for run in dlstudy.expand_runs(study)] if study else None,
            "runs": _count_runs(results / "runs.csv"),
            "events_files": sum(1 for name in members if name.endswith("/events.jsonl")),
        },
        "provenance": provenance(study, envs_dir),
        "installed_envs": installed,
        "recomputed_tables": [f"results/{name}" for name in analysis_outputs().values()],
        "absent": absent,
        "left_out": left_out,
    }
    return members, manifest


def manifest_seal(manifest: dict[str, Any]) -> str:
    """The sha256 of ``manifest`` without its seal, as canonical JSON (sorted keys, no spaces)."""
    body = {key: value for key, value in manifest.items() if key != MANIFEST_SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_entries(members: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {
        name: {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        for name, path in sorted(members.items())
    }


def write_archive(out: Path, top: str, members: dict[str, Path], manifest: dict[str, Any]) -> None:
    """A gzip'd tar with one top folder, members sorted, owner and gzip time neutral."""

    def add(tar: tarfile.TarFile, name: str, data: bytes | None = None, path: Path | None = None) -> None:
        info = tarfile.TarInfo(f"{top}/{name}")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        if path is not None:
            stat = path.stat()
            info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o644
            with open(path, "rb") as handle:
                tar.addfile(info, handle)
        else:
            assert data is not None
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))

    def write(tmp: str) -> None:
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                add(tar, MANIFEST, data=(json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
                for name in sorted(members):
                    add(tar, name, path=members[name])

    atomic.replace_with(out, write)


def make_artifact(
    results: str | Path = "results",
    config_files: Iterable[str | Path] = ("config.yaml",),
    out: str | Path = "results/artifact.tar.gz",
    envs_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Write the study's archive to ``out`` and return its manifest (plus ``archive``)."""
    results, out = Path(results), Path(out)
    config_paths = [Path(p) for p in config_files]
    for path in config_paths:
        if not path.is_file():
            raise ArtifactError(f"config file {path} does not exist")
    if envs_dir is None:
        envs_dir = Path(read_study_config(config_paths)["envs_dir"]) if config_paths else Path(".venvs")
    members, manifest = collect(results, config_paths, Path(envs_dir), out)
    manifest["files"] = file_entries(members)
    manifest[MANIFEST_SEAL] = manifest_seal(manifest)
    top = out.name.removesuffix(".gz").removesuffix(".tgz").removesuffix(".tar")
    write_archive(out, top, members, manifest)
    digest = sha256_file(out)
    atomic.write_text(out.with_name(out.name + ".sha256"), f"{digest}  {out.name}\n")
    return {**manifest, "archive": {"path": str(out), "bytes": out.stat().st_size, "sha256": digest}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlscale.archive.artifact", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--results", default="results", help="the study's results folder (default: results)")
    parser.add_argument(
        "--config",
        action="append",
        help="the study's config file(s), in Snakemake's order (default: config.yaml)",
    )
    parser.add_argument("--envs-dir", help="where the venvs are (default: the config's envs_dir)")
    parser.add_argument("--out", default="results/artifact.tar.gz", help="the archive (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        made = make_artifact(args.results, args.config or ["config.yaml"], args.out, args.envs_dir)
    except (ArtifactError, envs.EnvError) as err:
        print(f"artifact: {err}", file=sys.stderr)
        return 1
    archive = made["archive"]
    runs = made["study"]["runs"]
    print(
        f"{archive['path']}: {archive['bytes'] / 1e6:.2f} MB, {len(made['files'])} files + {MANIFEST};"
        f" {runs['rows']} runs ({runs['ok']} ok, {runs['failed']} failed); sha256 {archive['sha256']}"
        f" (also in {archive['path']}.sha256)"
    )
    for name in made["absent"]:
        print(f"artifact: note: {name} is absent (not made by this study's run)", file=sys.stderr)
    for entry in made["left_out"]:
        print(f"artifact: note: left out {entry['path']}: {entry['why']}", file=sys.stderr)
    if made["provenance"].get("git_dirty"):
        print("artifact: note: the git tree has uncommitted changes (recorded as git_dirty)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
