#!/usr/bin/env bash
# Install the Debian packages dlscale needs, only where they are missing.
set -euo pipefail
need=()
command -v git >/dev/null || need+=(git)
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "dlscale: missing system packages: ${need[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "dlscale: installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
python3 - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"dlscale needs Python >= 3.11, found {sys.version.split()[0]}")
PY
