"""Clear errors where a traceback showed (issue 33, item 5).

A full disk during aggregation ends in one line naming the table being written, with every
old table intact (``dlscale.base.atomic.WriteError``); a Snakemake lock left by a killed
invocation is named, with the command that clears it (``dlscale.study.preflight``).
"""

from __future__ import annotations

import errno
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from helpers.events import steady_run
from helpers.paths import REPO

from dlscale.analysis import aggregate
from dlscale.base import atomic
from dlscale.study import preflight

# --- a full disk ------------------------------------------------------------------------------


def _full_after(nbytes: int, code: int = errno.ENOSPC) -> Callable[..., None]:
    """A DataFrame writer that writes ``nbytes`` of the file, then finds the disk full."""

    def write(self: pd.DataFrame, path: str, *args: Any, **kwargs: Any) -> None:
        with open(path, "wb") as handle:
            handle.write(b"x" * nbytes)
        raise OSError(code, os.strerror(code))

    return write


def _tables() -> aggregate.Tables:
    runs = pd.DataFrame({"run_id": ["torch/lenet/n1x1/b64/r0"], "throughput": [64.0]})
    empty = pd.DataFrame({"x": []})
    return aggregate.Tables(runs, empty, empty, empty, empty)


def _old_tables(out: Path) -> dict[str, Path]:
    targets = {
        "runs_csv": out / "runs.csv",
        "cells_csv": out / "cells.csv",
        "findings_csv": out / "findings.csv",
    }
    out.mkdir()
    for name, path in targets.items():
        path.write_text(f"old {name}\n")
    return targets


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_names_the_table_and_keeps_every_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    targets = _old_tables(tmp_path / "results")
    monkeypatch.setattr(pd.DataFrame, "to_csv", _full_after(4096, code))
    with pytest.raises(atomic.WriteError) as err:
        aggregate.write_outputs(_tables(), targets)
    message = str(err.value)
    assert message.startswith(f"cannot write {targets['runs_csv']}: the file system is full")
    assert os.strerror(code) in message and "left as it was" in message
    assert err.value.errno == code and isinstance(err.value, OSError)
    for name, path in targets.items():
        assert path.read_text() == f"old {name}\n"
    assert sorted(p.name for p in targets["runs_csv"].parent.iterdir()) == sorted(
        p.name for p in targets.values()
    )


def test_a_full_disk_at_the_last_table_leaves_the_first_ones_old_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All or none: never a new runs.csv beside an old findings.csv."""
    targets = _old_tables(tmp_path / "results")
    real = pd.DataFrame.to_csv

    def to_csv(self: pd.DataFrame, path: str, *args: Any, **kwargs: Any) -> None:
        if Path(path).name.startswith(".findings."):
            _full_after(10)(self, path)
        real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
    with pytest.raises(
        atomic.WriteError, match=f"cannot write {targets['findings_csv']}: the file system is full"
    ):
        aggregate.write_outputs(_tables(), targets)
    for name, path in targets.items():
        assert path.read_text() == f"old {name}\n"
    assert not [p for p in targets["runs_csv"].parent.iterdir() if p.name.startswith(".")]


def test_fsync_on_a_full_disk_and_other_errors_name_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFS reports a full disk at fsync; a read-only file system is named as such."""
    target = tmp_path / "check.json"
    target.write_text("old")

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    with pytest.raises(atomic.WriteError, match=rf"cannot write {target}: the file system is full"):
        atomic.write_text(target, "new")
    assert target.read_text() == "old" and sorted(tmp_path.iterdir()) == [target]

    def read_only(fd: int) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(atomic.os, "fsync", read_only)
    with pytest.raises(atomic.WriteError) as err:
        atomic.write_text(target, "new")
    assert str(err.value) == f"cannot write {target}: Read-only file system; {target} is left as it was"


def test_the_aggregation_command_ends_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m dlscale.analysis`` on a full disk: exit 1, one line naming the file."""
    steady_run(tmp_path / "runs", 640.0, nodes=1)
    out = tmp_path / "results"
    out.mkdir()
    (out / "runs.parquet").write_bytes(b"old")
    monkeypatch.setattr(pd.DataFrame, "to_parquet", _full_after(100))
    assert aggregate.main([str(tmp_path / "runs"), "--out", str(out)]) == 1
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [
        f"python -m dlscale.analysis: cannot write {out / 'runs.parquet'}: the file system is full"
        f" ({os.strerror(errno.ENOSPC)}); {out / 'runs.parquet'} is left as it was: free space (or quota)"
        " there and run again"
    ]
    assert (out / "runs.parquet").read_bytes() == b"old"
    assert sorted(p.name for p in out.iterdir()) == ["runs.parquet"]


# --- a stale Snakemake lock -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [".venvs/workflow/bin/snakemake", "--profile", "profiles/local", "-n", "results/runs.csv"],
            ".venvs/workflow/bin/snakemake --profile profiles/local --unlock",
        ),
        (
            ["snakemake", "results/site/check.json", "--profile=profiles/slurm", "--configfile", "a.yaml",
             "b.yaml", "--forcerun", "check_site"],
            "snakemake --profile=profiles/slurm --configfile a.yaml b.yaml --unlock",
        ),
        (
            ["snakemake", "-s", "/w/Snakefile", "-d", "/my study", "--config", "x=1", "--report", "r.html"],
            "snakemake -s /w/Snakefile -d '/my study' --config x=1 --unlock",
        ),
    ],
)  # fmt: skip
def test_the_unlock_command_keeps_what_chooses_the_workflow(argv: list[str], expected: str) -> None:
    assert preflight.unlock_command(argv) == expected


def test_python_m_snakemake_is_unlocked_the_same_way() -> None:
    argv = ["/venv/lib/python3.11/site-packages/snakemake/__main__.py", "--profile", "p"]
    assert preflight.unlock_command(argv) == shlex.join(
        [sys.executable, "-m", "snakemake", "--profile", "p", "--unlock"]
    )


def test_a_lock_is_named_only_when_no_snakemake_holds_it(tmp_path: Path) -> None:
    argv = ["snakemake", "--profile", "profiles/local"]
    assert preflight.stale_lock_advice(tmp_path, argv, running=[]) is None  # no lock
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/runs.csv\n")
    assert preflight.stale_lock_advice(tmp_path, argv, running=[4242]) is None  # live: its own
    advice = preflight.stale_lock_advice(tmp_path, argv, running=[])
    assert advice is not None
    assert f"{locks} holds 1 lock file(s) (0.output.lock)" in advice
    assert "killed" in advice and "Directory cannot be locked" in advice
    assert advice.splitlines()[1].strip() == "snakemake --profile profiles/local --unlock"


def test_a_running_snakemake_in_the_directory_is_seen(tmp_path: Path) -> None:
    """A process named snakemake working in the directory holds its locks; one elsewhere,
    or not a snakemake, does not."""
    fake = tmp_path / "bin" / "snakemake"
    fake.parent.mkdir()
    fake.symlink_to(Path("/bin/sleep"))
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    procs = [
        subprocess.Popen([str(fake), "30"], cwd=work),
        subprocess.Popen([str(fake), "30"], cwd=elsewhere),
        subprocess.Popen(["sleep", "30"], cwd=work),
    ]
    try:
        assert preflight.running_snakemakes(work) == [procs[0].pid]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
    assert preflight.running_snakemakes(work) == []


def test_a_dry_run_over_a_stale_lock_says_how_to_clear_it(tmp_path: Path) -> None:
    """The workflow itself says it (make demo, a plain snakemake, any profile); the command
    it gives clears the lock."""
    study = {"frameworks": ["torch"], "models": ["lenet"], "nodes": [1], "iterations": 4, "envs_dir": "venvs"}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/runs.csv\n")
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
        "--profile", str(REPO / "profiles" / "local"), "--configfile", str(tmp_path / "study.yaml"),
    ]  # fmt: skip
    dry = subprocess.run([*cmd, "--dry-run", "results/runs.csv"], capture_output=True, text=True, timeout=120)
    output = dry.stdout + dry.stderr
    assert dry.returncode == 0, output[-3000:]
    assert "stale Snakemake lock" in output and "0.output.lock" in output
    advised = output.split("clear it with\n", 1)[1].splitlines()[0].strip()
    assert advised == shlex.join([*cmd, "--unlock"])
    unlock = subprocess.run(shlex.split(advised), capture_output=True, text=True, timeout=120)
    assert unlock.returncode == 0, (unlock.stdout + unlock.stderr)[-3000:]
    assert "stale Snakemake lock" not in unlock.stdout + unlock.stderr
    assert not locks.exists()
