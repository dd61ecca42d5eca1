#!/usr/bin/env bash
# Debian's Open MPI (mpirun + headers), installed only when missing. Idempotent.
set -euo pipefail
if command -v mpirun >/dev/null 2>&1 && dpkg -s libopenmpi-dev >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-mpi.sh: Open MPI is missing; run as root or: apt-get install openmpi-bin libopenmpi-dev" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null
