#!/usr/bin/env bash
# The one way the project installs Debian packages: only those missing, one install at a
# time. Every installer of the workflow and the tests (the venv set-up, Java, the Caffe build
# and its BLAS packages, Fashion-MNIST, the SLURM test cluster, Chromium) calls this, so two
# jobs that need packages at the same second wait for each other instead of one losing
# dpkg's lock ("E: Could not get lock /var/lib/dpkg/lock-frontend").
#
# Two locks, both waited on with one bound:
#   - the project's own lock ($DLSCALE_APT_LOCK, flock) around update + install, so two of
#     the project's installers never interleave an `apt-get update` with an install;
#   - apt's own locks against anyone else (unattended-upgrades, an administrator):
#     `-o DPkg::Lock::Timeout`, which apt applies to the dpkg frontend lock and the lists lock.
# When the wait runs out, the message names what holds the lock.
#
# Usage: scripts/apt-install.sh PACKAGE...
# Env:   DLSCALE_APT_LOCK_TIMEOUT  seconds to wait for either lock (default 900)
#        DLSCALE_APT_LOCK          the project's lock file (default /run/lock/dlscale-apt.lock)
#        DLSCALE_APT_WHO           who asks, for the messages (default: the calling script)
# Exit:  0 when every package is installed afterwards; 1 with a message otherwise (not root,
#        no apt-get, a lock held past the bound, or apt failing).
set -euo pipefail
TIMEOUT=${DLSCALE_APT_LOCK_TIMEOUT:-900}
LOCK=${DLSCALE_APT_LOCK:-/run/lock/dlscale-apt.lock}
WHO=${DLSCALE_APT_WHO:-dlscale}
say() { echo "$WHO: $*" >&2; }

[[ $TIMEOUT =~ ^[0-9]+$ ]] || { say "DLSCALE_APT_LOCK_TIMEOUT must be whole seconds, got '$TIMEOUT'"; exit 1; }
(($# > 0)) || { say "apt-install.sh: no package named"; exit 1; }

missing() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"
  done
}
mapfile -t need < <(missing "$@")
((${#need[@]})) || exit 0

if [[ $(id -u) -ne 0 ]]; then
  say "missing Debian packages: ${need[*]}; installing them needs root: ask an administrator to install them"
  exit 1
fi
command -v apt-get >/dev/null || { say "missing packages ${need[*]} and no Debian package manager here"; exit 1; }

mkdir -p "$(dirname "$LOCK")"
exec 9<>"$LOCK"
if ! flock -n 9; then
  say "waiting up to ${TIMEOUT}s for another dlscale install ($(tr -d '\0' <"$LOCK" | head -c 200))"
  if ! flock -w "$TIMEOUT" 9; then
    say "gave up after ${TIMEOUT}s: the package lock $LOCK is held by $(tr -d '\0' <"$LOCK" | head -c 200)" \
      "(raise DLSCALE_APT_LOCK_TIMEOUT, or end that install)"
    exit 1
  fi
fi
# Name the holder for whoever waits next (the file is ours; its content is only a label).
printf 'pid %s (%s installing %s)' "$$" "$WHO" "${need[*]}" >"$LOCK"

# Another installer may have put them in while we waited.
mapfile -t need < <(missing "${need[@]}")
((${#need[@]})) || exit 0

say "installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -y -qq -o "DPkg::Lock::Timeout=$TIMEOUT")
# A stale package list cannot find a package: install, and on failure refresh once and retry.
if ! "${APT[@]}" install --no-install-recommends "${need[@]}" >&2; then
  "${APT[@]}" update >&2 || { say "refreshing the package lists failed (see above)"; exit 1; }
  "${APT[@]}" install --no-install-recommends "${need[@]}" >&2 ||
    { say "installing ${need[*]} failed (see above)"; exit 1; }
fi
mapfile -t need < <(missing "${need[@]}")
((${#need[@]} == 0)) || { say "still missing after installing: ${need[*]}"; exit 1; }
