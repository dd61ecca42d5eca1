#!/usr/bin/env bash
# Make one BLAS implementation available to the one Caffe build (docs/caffe-blas.md).
#
# The Caffe build (scripts/build_caffe.sh) links the standard interface, libblas.so.3; a run
# chooses the implementation through the loader's search path (dlscale/runners/caffe/blas.py
# links libblas.so.3 to it in a directory put first on the ranks' LD_LIBRARY_PATH). This
# script only installs an implementation, once, when it is missing:
#   openblas  Debian's OpenBLAS, pthread build (libopenblas0-pthread: openblas-pthread/libblas.so.3)
#   blis      Debian's BLIS 0.9, pthread build (libblis4-pthread: blis-pthread/libblas.so.3)
#   mkl       Intel MKL's single dynamic library, libmkl_rt.so.2, from the PyPI wheels pinned
#             in envs/caffe-mkl.lock (hash-checked), installed once into the cache
# FlexiBLAS, the library made for switching BLAS at run time, is not in Debian 12's archive.
#
# Usage: scripts/caffe_blas.sh BLAS PYTHON [MARKER]
#   PYTHON   a python with pip (the caffe venv's), for the MKL wheels
#   MARKER   optional JSON file written last: {"blas": ..., "library": ..., "version": ...}
# Env: DLSCALE_CACHE (default ~/.cache/dlscale).
set -euo pipefail

BLAS=${1:?usage: caffe_blas.sh BLAS PYTHON [MARKER]}
PYTHON=${2:?usage: caffe_blas.sh BLAS PYTHON [MARKER]}
MARKER=${3:-}
MKL_LOCK="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/envs/caffe-mkl.lock"
CACHE=${DLSCALE_CACHE:-$HOME/.cache/dlscale}
ARCH=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
say() { echo "caffe_blas: $*" >&2; }

# Debian packages, installed only when missing (as root).
ensure_debs() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    say "missing Debian packages: ${missing[*]} (install them as root)"
    exit 1
  fi
  DLSCALE_APT_WHO=caffe_blas bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" "${missing[@]}"
}

case $BLAS in
openblas)
  package=$(bash "$(dirname "${BASH_SOURCE[0]}")/system-packages.sh" blas-openblas)
  ensure_debs "$package"
  library=/usr/lib/$ARCH/openblas-pthread/libblas.so.3
  version=$(dpkg-query -W -f='${Version}' "$package")
  ;;
blis)
  package=$(bash "$(dirname "${BASH_SOURCE[0]}")/system-packages.sh" blas-blis)
  ensure_debs "$package"
  library=/usr/lib/$ARCH/blis-pthread/libblas.so.3
  version=$(dpkg-query -W -f='${Version}' "$package")
  ;;
mkl)
  [[ -f $MKL_LOCK ]] || { say "BLAS=mkl needs $MKL_LOCK"; exit 1; }
  MKL_SHA=$(sha256sum "$MKL_LOCK" | cut -d' ' -f1)
  MKLROOT="$CACHE/mkl-${MKL_SHA:0:16}"
  mkdir -p "$CACHE"
  exec 8>"$MKLROOT.lock"
  flock 8
  if [[ ! -f $MKLROOT/.installed ]]; then
    say "installing MKL from $MKL_LOCK into $MKLROOT"
    rm -rf "$MKLROOT" "$MKLROOT.tmp"
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
      --prefix "$MKLROOT.tmp" -r "$MKL_LOCK" >&2
    mv "$MKLROOT.tmp" "$MKLROOT"
    touch "$MKLROOT/.installed"
  fi
  flock -u 8
  library=$(ls "$MKLROOT"/lib/libmkl_rt.so.* 2>/dev/null | head -1)
  version=$(sed -n 's/^mkl==\([^ ]*\).*/\1/p' "$MKL_LOCK")
  ;;
*)
  say "unknown BLAS '$BLAS': openblas, blis or mkl"
  exit 1
  ;;
esac

[[ -n $library && -f $library ]] || { say "no $BLAS library at '$library'"; exit 1; }
# The library must carry the CBLAS symbols Caffe calls (libblas.so.3 stands for both).
grep -q ' cblas_sgemm$' <<<"$(nm -D --defined-only "$library")" || { say "$library has no cblas_sgemm"; exit 1; }
say "$BLAS: $library ($version)"
if [[ -n $MARKER ]]; then
  mkdir -p "$(dirname "$MARKER")"
  printf '{"blas": "%s", "library": "%s", "version": "%s"}\n' "$BLAS" "$library" "$version" >"$MARKER.tmp.$$"
  mv "$MARKER.tmp.$$" "$MARKER"
fi
