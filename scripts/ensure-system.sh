#!/usr/bin/env bash
# Install the Debian packages dlscale needs, only where they are missing.
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
# git, python3 and its venv module: when one is missing, the `base` packages of
# system-packages.txt (apt-install.sh installs only those dpkg does not have).
if ! command -v git >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  base=$(bash "$here/system-packages.sh" base)
  # shellcheck disable=SC2086  # one package per word
  bash "$here/apt-install.sh" $base
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
    DLSCALE_APT_WHO="dlscale (the escaping test's browser)" \
      bash "$here/apt-install.sh" "$(bash "$here/system-packages.sh" browser)" >/dev/null ||
      echo "dlscale: chromium could not be installed; the browser escaping test will be skipped" >&2
  fi
fi
