#!/usr/bin/env bash
# Install SLURM (controller, node daemon, clients), munge and PMIx from Debian, only where
# missing. Used by the test cluster (tests/helpers/slurm_cluster.py); a real cluster has its own.
# The packages' own services are not started: the tests run private daemons.
set -euo pipefail
packages=$(bash "$(dirname "${BASH_SOURCE[0]}")/system-packages.sh" slurm-test)
need=()
for pkg in $packages; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "dlscale: SLURM test cluster needs Debian packages: ${need[*]} (install them as root)" >&2
  exit 1
fi
echo "dlscale: installing ${need[*]}"
# policy-rc.d stops the packages' post-install scripts from starting system daemons.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created_policy=1
fi
trap '[[ $created_policy == 1 ]] && rm -f "$policy"' EXIT
DLSCALE_APT_WHO="dlscale (SLURM test cluster)" timeout 1800 bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" "${need[@]}"
