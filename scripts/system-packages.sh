#!/usr/bin/env bash
# Print the Debian packages of each named need, one per line, from scripts/system-packages.txt
# (the one list of the system packages dlscale installs; the README's apt-get line is checked
# against it). Usage: scripts/system-packages.sh NAME... (or --all: every need's); exit 1
# naming an unknown NAME.
set -euo pipefail
list="$(dirname "${BASH_SOURCE[0]}")/system-packages.txt"
if [[ ${1:-} == --all ]]; then
  mapfile -t names < <(sed -n 's/^\([a-z0-9][a-z0-9-]*\):.*/\1/p' "$list")
  set -- "${names[@]}"
fi
for name in "$@"; do
  line=$(grep -E "^$name:" "$list") || { echo "system-packages.sh: no need '$name' in $list" >&2; exit 1; }
  line=${line#*:}
  for package in ${line%%|*}; do echo "$package"; done
done
