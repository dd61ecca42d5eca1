"""Caffe's BLAS at run time (dlscale/runners/caffe/blas.py): the directory a run's launcher
prepares, the variables its ranks get, and how a rank's measurement reaches the record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlscale.analysis.tables import run_versions
from dlscale.launch import records
from dlscale.runners.caffe import blas


def fake_debian(root: Path, name: str) -> Path:
    path = root / "usr" / "lib" / blas.multiarch() / blas.DEBIAN[name][0] / blas.SONAME
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x7fELF")
    return path


def test_the_directory_links_the_generic_soname_to_the_chosen_implementation(tmp_path):
    openblas, blis = fake_debian(tmp_path, "openblas"), fake_debian(tmp_path, "blis")
    assert blas.library("blis", {}, root=tmp_path) == blis
    directory = blas.prepare_dir(tmp_path / "run" / "blas", blas.library("openblas", {}, root=tmp_path))
    link = directory / "libblas.so.3"
    assert link.is_symlink() and link.resolve() == openblas.resolve()
    # Prepared again (a retried run): replaced in place, nothing else left in the directory.
    blas.prepare_dir(directory, blis)
    assert link.resolve() == blis.resolve() and os.listdir(directory) == ["libblas.so.3"]


def test_mkl_is_the_runtime_library_of_the_locked_wheels_in_the_cache(tmp_path):
    env = {"DLSCALE_CACHE": str(tmp_path)}
    with pytest.raises(blas.BlasNotInstalled, match="scripts/caffe_blas.sh mkl"):
        blas.library("mkl", env)
    lib = blas.mkl_root(env) / "lib" / "libmkl_rt.so.3"
    lib.parent.mkdir(parents=True)
    lib.touch()
    assert blas.library("mkl", env) == lib
    assert blas.mkl_root(env).name.startswith("mkl-") and blas.mkl_root(env).parent == tmp_path
    with pytest.raises(blas.BlasNotInstalled, match="unknown Caffe BLAS 'atlas'"):
        blas.library("atlas", env)


def test_the_ranks_get_the_directory_first_on_the_search_path_and_their_threads(tmp_path):
    got = blas.blas_env("blis", tmp_path, {"LD_LIBRARY_PATH": "/opt/x:/opt/y"}, 2)
    assert got["LD_LIBRARY_PATH"].split(os.pathsep) == [str(tmp_path), "/opt/x", "/opt/y"]
    assert got["BLIS_NUM_THREADS"] == "2"
    assert blas.blas_env("openblas", tmp_path, {}, 1) == {
        "LD_LIBRARY_PATH": str(tmp_path),
        "OPENBLAS_NUM_THREADS": "1",
    }
    rt = tmp_path / "mkl" / "lib" / "libmkl_rt.so.3"
    rt.parent.mkdir(parents=True)
    rt.touch()
    mkl = blas.blas_env("mkl", blas.prepare_dir(tmp_path / "run", rt), {}, 1)
    assert mkl["MKL_NUM_THREADS"] == "1" and mkl["MKL_THREADING_LAYER"] == "SEQUENTIAL"
    assert blas.blas_env("mkl", tmp_path / "run", {}, 2)["MKL_THREADING_LAYER"] == "INTEL"
    chosen = {"MKL_THREADING_LAYER": "GNU"}  # the launcher's own environment may choose
    assert blas.blas_env("mkl", tmp_path / "run", chosen, 1)["MKL_THREADING_LAYER"] == "GNU"
    # MKL's own folder next: libmkl_rt finds its core and kernels there, not beside our link.
    assert mkl["LD_LIBRARY_PATH"].split(os.pathsep) == [str(tmp_path / "run"), str(rt.parent.resolve())]


def test_what_a_process_mapped_is_read_from_its_maps():
    # This test's own python: numpy's bundled OpenBLAS (numpy.libs) is not Caffe's BLAS.
    files = blas.mapped_files()
    assert all(".libs/" not in f for f in files)
    assert (
        blas.implementation_of(["/x/openblas-pthread/libblas.so.3", "/x/libopenblasp-r0.3.21.so"])
        == "openblas"
    )
    assert blas.implementation_of(["/c/mkl-1/lib/libmkl_rt.so.3", "/c/mkl-1/lib/libmkl_avx512.so.3"]) == "mkl"
    assert blas.implementation_of(["/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3"]) == "blis"
    assert blas.implementation_of([]) == "none"


def test_rank_zeros_measurement_goes_into_run_start_and_a_differing_rank_is_a_warning():
    served = {"implementation": "blis", "library": "/usr/lib/x/blis-pthread/libblas.so.3", "mapped": []}
    other = {**served, "implementation": "openblas"}
    parts = {
        0: [{"event": "rank_measured", "rank": 0, "measured": {"blas": served}}],
        1: [{"event": "rank_measured", "rank": 1, "measured": {"blas": other}}],
    }
    measured = records.measured_by_ranks(parts)
    assert measured[0] == {"blas": served}
    [warning] = records.measured_differences(measured)
    assert warning.startswith("rank 1 measured blas = ") and '"openblas"' in warning
    assert records.measured_differences({0: {"blas": served}, 1: {"blas": served}}) == []
    # The runs table carries it in the versions column.
    versions = run_versions(
        {"versions": {"caffe": "1.0.0"}, "measured": {"blas": {**served, "version": "BLIS 0.9"}}}
    )
    assert versions == {"caffe": "1.0.0", "blas_loaded": f"blis: {served['library']} (BLIS 0.9)"}
    assert run_versions({"versions": {"caffe": "1.0.0"}}) == {"caffe": "1.0.0"}
