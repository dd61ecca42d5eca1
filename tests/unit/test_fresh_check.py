"""`make fresh-check`'s plan (scripts/fresh-check.sh --dry): what it would run and what it
cannot check here, as root or as the user without root it can stand in for. The full check
runs a whole `make demo` from a clean clone (docs/fresh-machine.md), never in the suite."""

from __future__ import annotations

import os
import subprocess

from helpers.paths import REPO

SCRIPT = REPO / "scripts" / "fresh-check.sh"


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "--dry", *args], capture_output=True, text=True, timeout=60)


def test_the_plan_names_a_clean_clone_empty_caches_and_what_it_cannot_check():
    done = plan()
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "git clone" in out and "DLSCALE_CACHE=" in out and "make demo" in out
    assert "cannot check here:" in out and "--dry: nothing run" in out
    assert "setpriv" not in out


def test_the_unprivileged_plan_runs_the_demo_as_nobody_or_refuses_without_root():
    done = plan("--unprivileged")
    if os.geteuid() != 0:
        assert done.returncode == 2 and "--unprivileged needs root" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert "setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=" in done.stdout
    assert "the demo runs as nobody" in done.stdout


def test_an_unknown_argument_is_refused_naming_the_ones_it_takes():
    done = subprocess.run(["bash", str(SCRIPT), "--fast"], capture_output=True, text=True, timeout=60)
    assert (
        done.returncode == 2
        and "unknown argument '--fast'" in done.stderr
        and "--unprivileged" in done.stderr
    )


def test_a_workdir_without_its_folder_is_refused():
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry", "--workdir"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "needs a folder" in done.stderr
