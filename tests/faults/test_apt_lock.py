"""System installs cannot collide: scripts/apt-install.sh waits for the package lock.

On a fresh machine the workflow's first `make demo` ran two Caffe BLAS jobs at the same
second, each with its own `apt-get install`; one lost dpkg's lock and the study had no Caffe
run. Every installer of the project now goes through scripts/apt-install.sh, which waits
(bounded) for the project's lock and for apt's own.

Real apt, real dpkg: two small packages this project never needs (``hello``, ``sl``) are
installed by two installers started together, and by one while another process holds dpkg's
frontend lock; they are removed again afterwards. Needs root and Debian's package sources
(skipped otherwise, with the reason).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.paths import REPO

pytestmark = pytest.mark.faults

INSTALL = REPO / "scripts" / "apt-install.sh"
#: Two tiny packages (a few hundred kB) that nothing of the project uses.
PACKAGES = ("hello", "sl")
DPKG_FRONTEND_LOCK = Path("/var/lib/dpkg/lock-frontend")
#: A hang guard, not a timing: an install of both packages from the mirror took ~10 s here.
GUARD_S = 600


def installed(package: str) -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return "ok installed" in out.stdout


def remove(*packages: str) -> None:
    present = [p for p in packages if installed(p)]
    if present:
        subprocess.run(
            ["apt-get", "-y", "-qq", "-o", "DPkg::Lock::Timeout=600", "purge", *present],
            check=True,
            capture_output=True,
            timeout=GUARD_S,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )


@pytest.fixture
def apt(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Root, apt, and the two packages absent before and after; a private project lock."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("installing packages needs root and apt-get")
    if any(installed(p) for p in PACKAGES):
        pytest.skip(f"{' or '.join(PACKAGES)} installed by someone else: not ours to remove")
    env = {**os.environ, "DLSCALE_APT_LOCK": str(tmp_path / "apt.lock")}
    try:
        yield env
    finally:
        remove(*PACKAGES)


def start(package: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(INSTALL), package],
        env={**env, "DLSCALE_APT_WHO": f"test-{package}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_two_installers_started_together_both_succeed(apt):
    first, second = (start(p, apt) for p in PACKAGES)
    outputs = [proc.communicate(timeout=GUARD_S)[0] for proc in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    assert all(installed(p) for p in PACKAGES)
    assert not any("Could not get lock" in out and "E:" in out for out in outputs), outputs


def test_an_installer_waits_for_dpkgs_own_lock(apt):
    """Someone else (an administrator, unattended-upgrades) holds dpkg's frontend lock."""
    with DPKG_FRONTEND_LOCK.open("w") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = start(PACKAGES[0], apt)
        time.sleep(3)  # long enough for apt-get to meet the held lock and start waiting
        assert proc.poll() is None, proc.communicate()[0]
    out = proc.communicate(timeout=GUARD_S)[0]
    assert proc.returncode == 0, out
    assert installed(PACKAGES[0])


def test_a_lock_held_past_the_bound_is_a_clear_error_naming_its_holder(apt, tmp_path):
    lock = Path(apt["DLSCALE_APT_LOCK"])
    holder = subprocess.Popen(
        ["flock", str(lock), "sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["flock", "-n", str(lock), "true"]).returncode == 0:
            assert time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.05)
        lock.write_text("pid 4242 (build_caffe installing libfoo)")
        proc = start(PACKAGES[0], {**apt, "DLSCALE_APT_LOCK_TIMEOUT": "1"})
        out = proc.communicate(timeout=GUARD_S)[0]
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1
    assert "gave up after 1s" in out and "pid 4242 (build_caffe installing libfoo)" in out, out
    assert "DLSCALE_APT_LOCK_TIMEOUT" in out
    assert not installed(PACKAGES[0])


def test_already_installed_packages_need_no_lock_and_no_root(tmp_path):
    """The common case on a machine set up once: nothing to do, nothing waited for."""
    if shutil.which("dpkg-query") is None:
        pytest.skip("no dpkg here")
    env = {**os.environ, "DLSCALE_APT_LOCK": str(tmp_path / "absent" / "apt.lock")}
    out = subprocess.run(["bash", str(INSTALL), "bash", "coreutils"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "absent").exists()
