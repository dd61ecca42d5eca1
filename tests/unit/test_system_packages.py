"""One list of the system packages (scripts/system-packages.txt): the scripts install from
it, and the README's one `apt-get install` line for an administrator (and its `dnf install`
line) names exactly its packages, so neither can drift from what the scripts install."""

from __future__ import annotations

import re
import subprocess

import pytest

from dlscale.catalog import REPO_DIR

LIST = REPO_DIR / "scripts" / "system-packages.txt"
READER = REPO_DIR / "scripts" / "system-packages.sh"


def needs() -> dict[str, tuple[list[str], list[str]]]:
    """need -> (Debian packages, dnf packages), as the file lists them."""
    found = {}
    for line in LIST.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, packages = line.partition(":")
        debian, _, dnf = packages.partition("|")
        found[name.strip()] = (debian.split(), [p for p in dnf.split() if p != "-"])
    return found


def readme_line(command: str) -> list[str]:
    """The packages of the README's one line that starts with ``command``."""
    lines = [line for line in (REPO_DIR / "README.md").read_text().splitlines() if line.startswith(command)]
    assert len(lines) == 1, f"README has {len(lines)} lines starting with {command!r}"
    return lines[0].removeprefix(command).split()


def test_the_list_is_well_formed():
    found = needs()
    assert found, "no need listed"
    for name, (debian, _dnf) in found.items():
        assert re.fullmatch(r"[a-z0-9-]+", name), name
        assert debian, f"{name}: no Debian package"


def test_readme_apt_get_line_names_exactly_the_listed_packages():
    listed = [p for debian, _ in needs().values() for p in debian]
    named = readme_line("sudo apt-get install ")
    assert sorted(named) == sorted(set(listed)), set(named) ^ set(listed)
    assert len(named) == len(set(named)), "a package named twice"


def test_readme_dnf_line_names_exactly_the_listed_packages():
    listed = {p for _, dnf in needs().values() for p in dnf}
    assert set(readme_line("sudo dnf install ")) == listed


def test_every_script_installs_from_the_list_and_every_need_is_used():
    """Each ``system-packages.sh NAME`` a script calls names a listed need, and each need
    is installed by some script (a need nothing installs is a stale README line)."""
    scripts = "\n".join(p.read_text() for p in (REPO_DIR / "scripts").glob("*.sh") if p != READER)
    used = set(re.findall(r'system-packages\.sh"? ([a-z0-9][a-z0-9-]*)', scripts))
    assert used == set(needs()), used ^ set(needs())


@pytest.mark.parametrize("name", ["caffe-build", "java"])
def test_the_reader_prints_a_needs_debian_packages(name):
    out = subprocess.run(["bash", str(READER), name], capture_output=True, text=True, check=True)
    assert out.stdout.split() == needs()[name][0]


def test_the_reader_prints_every_needs_packages_with_all():
    out = subprocess.run(["bash", str(READER), "--all"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [p for debian, _ in needs().values() for p in debian]


def test_the_reader_refuses_an_unknown_need():
    out = subprocess.run(["bash", str(READER), "no-such-need"], capture_output=True, text=True)
    assert out.returncode == 1 and "no need 'no-such-need'" in out.stderr
