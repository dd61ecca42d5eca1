#!/usr/bin/env bash
# Make Debian's Fashion-MNIST (package dataset-fashion-mnist) present, installing it only when
# missing. It puts the four canonical idx .gz files under /usr/share/datasets/fashion-mnist/;
# dlscale.data.fashion_mnist verifies them byte for byte, so the package is only a carrier.
# Idempotent: a second call (or a machine that has the files) does nothing.
set -euo pipefail
dir=/usr/share/datasets/fashion-mnist
files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
missing=0
for name in "${files[@]}"; do
  [[ -f "$dir/$name" ]] || missing=1
done
if ((missing == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "dlscale: $dir is missing and installing dataset-fashion-mnist needs root;" \
    "ask an administrator to install it (scripts/apt-install.sh dataset-fashion-mnist, which waits" \
    "for the package lock; README: Without root), or set data.fashion_mnist.source" \
    "to a directory holding the four idx files" >&2
  exit 1
fi
package=$(bash "$(dirname "${BASH_SOURCE[0]}")/system-packages.sh" fashion-mnist)
bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" "$package" >/dev/null
for name in "${files[@]}"; do
  [[ -f "$dir/$name" ]] || { echo "dlscale: $dir/$name still missing after installing $package" >&2; exit 1; }
done
