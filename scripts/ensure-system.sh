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
# Optional: the escaping test reads the pages in a real browser (tests/unit/test_escaping.py);
# installed when we may, else that one test is skipped with its reason.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "dlscale: installing chromium (the escaping test's browser)"
    { apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; } ||
      echo "dlscale: chromium could not be installed; the browser escaping test will be skipped" >&2
  fi
fi
