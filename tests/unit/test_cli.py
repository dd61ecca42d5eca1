"""The installed ``dlscale`` command: each subcommand reaches its tool's own ``main``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO

from dlscale.cli import SUBCOMMANDS

DLSCALE = Path(sys.executable).with_name("dlscale")


def dlscale(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DLSCALE), *args], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_the_command_is_installed_beside_the_python_that_runs_the_tests() -> None:
    assert DLSCALE.exists(), "dlscale is not installed: make (or pip install --no-deps -e .)"


def test_help_names_every_subcommand_and_its_python_m_form() -> None:
    done = dlscale("--help")
    assert done.returncode == 0
    for name, sub in SUBCOMMANDS.items():
        assert f"  {name} " in done.stdout
        assert f"python -m {sub.module}" in done.stdout


def test_python_m_dlscale_prints_the_same_help() -> None:
    done = subprocess.run([sys.executable, "-m", "dlscale"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0
    assert done.stdout == dlscale().stdout


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_subcommand_shows_its_tools_help(name: str) -> None:
    via_command = dlscale(name, "--help")
    via_module = subprocess.run(
        [sys.executable, "-m", SUBCOMMANDS[name].module, "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert via_command.returncode == 0, via_command.stderr
    assert via_command.stdout.startswith("usage: ")
    # the same parser: the same options, whatever the program is called in the usage line
    assert via_command.stdout.split("\n\n", 1)[1] == via_module.stdout.split("\n\n", 1)[1]


def test_bad_input_exits_2_as_the_module_does(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such.log")
    via_command = dlscale("parse", "caffe", missing)
    via_module = subprocess.run(
        [sys.executable, "-m", "dlscale.parse", "caffe", missing], capture_output=True, text=True
    )
    assert via_command.returncode == via_module.returncode == 2
    assert missing in via_command.stderr
    assert dlscale("analyse").returncode == 2  # a required argument left out: argparse's 2


def test_an_unknown_subcommand_exits_2_naming_the_choices() -> None:
    done = dlscale("analyze-everything")
    assert done.returncode == 2
    assert "unknown subcommand 'analyze-everything'" in done.stderr
    assert "analyse" in done.stderr
