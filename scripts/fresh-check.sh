#!/usr/bin/env bash
# What a fresh start meets, checked as far as this machine allows (issue 45; `make fresh-check`,
# never part of `make test`: it runs a whole `make demo`, some 15-50 minutes on 2 cores, and
# wants the machine to itself).
#
# A clean clone of HEAD (committed work only) into a new folder, every cache empty:
# DLSCALE_CACHE (the Caffe build, MKL, MNIST), pip's, uv's and every other XDG cache
# (Snakemake's), the framework venvs
# (the clone's own .venvs), then `make demo` there. It reports the exit status, the wall
# time, the runs (every one ok?) and the report, and says what it could not check: what this
# machine already has and a fresh one would not (the system packages installed already,
# pip's configured wheel sources, the user), which a clone and empty caches cannot undo.
#
# Usage: scripts/fresh-check.sh [--dry] [--keep] [--workdir DIR] [--unprivileged]
#   --dry      print the plan and what would stay unchecked; run nothing
#   --keep     keep the clone, caches and logs (default: removed when the demo passed)
#   --workdir  where to make the clone and caches (default: a new folder under $TMPDIR or /tmp)
#   --unprivileged  (as root) run the demo as nobody (uid 65534, no groups, HOME in the
#              work folder): a user without root on a machine whose administrator installed
#              the system packages, as README "Without root" promises
# Exit: 0 when the demo passed with every run ok; 1 otherwise (the log's path is printed).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dry=0 keep=0 work="" unprivileged=0
while (($#)); do
  case $1 in
  --dry) dry=1 ;;
  --keep) keep=1 ;;
  --workdir) work=${2:?--workdir needs a folder}; shift ;;
  --unprivileged) unprivileged=1 ;;
  *) echo "fresh-check: unknown argument '$1' (--dry, --keep, --workdir DIR, --unprivileged)" >&2; exit 2 ;;
  esac
  shift
done
say() { echo "fresh-check: $*"; }
head=$(git -C "$repo" rev-parse --short HEAD)
[[ -n $work ]] || work="${TMPDIR:-/tmp}/dlscale-fresh-$head-$$"
# As whom the demo runs: this user, or nobody (--unprivileged) through setpriv.
as_user=()
if ((unprivileged)); then
  if [[ $(id -u) != 0 ]] || ! command -v setpriv >/dev/null; then
    echo "fresh-check: --unprivileged needs root and setpriv (to become nobody); you are $(id -un) already: run it without" >&2
    exit 2
  fi
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi

# --- what this machine has that a fresh one would not (probed; nothing is changed)
packages_list=$(bash "$repo/scripts/system-packages.sh" --all)
mapfile -t packages <<<"$packages_list"
installed=()
if command -v dpkg-query >/dev/null; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && installed+=("$p")
  done
fi
unchecked=(
  "the installs of the system packages already here (${#installed[@]} of ${#packages[@]}: ${installed[*]:-none}): the demo finds them and installs nothing; a fresh machine installs them (docs/fresh-machine.md measured that once, as root)"
  "pip's configuration on this machine ($(python3 -m pip config list 2>/dev/null | tr '\n' ' ' || echo unknown)): the CPU torch wheel's source a fresh machine may lack (the preflight names it then)"
  "the user: $( ((unprivileged)) && echo "the demo runs as nobody (uid 65534, no groups), its HOME in the work folder" || echo "this runs as $(id -un) (uid $(id -u)); --unprivileged runs it as nobody")"
  "another OS (a RHEL-family login node: README 'Without root' names its dnf packages, untried) and another CPU"
  "a quiet machine's time: the wall time below is this machine's, with whatever else runs on it"
)

plan=(
  "git clone --quiet $repo $work/clone   # HEAD $head, committed work only"
  "DLSCALE_CACHE=$work/cache XDG_CACHE_HOME=$work/xdg-cache PIP_CACHE_DIR=$work/pip-cache UV_CACHE_DIR=$work/uv-cache  # all empty"
  "cd $work/clone && ${as_user[*]:+${as_user[*]} env HOME=$work/home }make demo > $work/demo.log 2>&1   # timed"
  "check: exit 0, results/runs.csv every run ok, results/report.html written"
)
say "plan (HEAD $head, in $work):"
printf '  %s\n' "${plan[@]}"
say "cannot check here:"
printf '  - %s\n' "${unchecked[@]}"
((dry)) && { say "--dry: nothing run"; exit 0; }

[[ ! -e $work ]] || { say "$work exists: choose another --workdir" >&2; exit 2; }
mkdir -p "$work"/{cache,xdg-cache,pip-cache,uv-cache,home}
git clone --quiet --no-hardlinks "$repo" "$work/clone"
export DLSCALE_CACHE=$work/cache XDG_CACHE_HOME=$work/xdg-cache PIP_CACHE_DIR=$work/pip-cache UV_CACHE_DIR=$work/uv-cache
if ((unprivileged)); then
  # The clone is made as root (git refuses a repository another user owns) and handed over;
  # nobody must reach the work folder through its parents.
  chown -R 65534:65534 "$work"
  chmod 755 "$work"
  export HOME=$work/home
fi
started=$(date +%s)
set +e
(cd "$work/clone" && "${as_user[@]}" make demo) >"$work/demo.log" 2>&1
status=$?
set -e
took=$(($(date +%s) - started))
say "make demo exited $status after $((took / 60)) min $((took % 60)) s (log: $work/demo.log)"

verdict=0
((status == 0)) || verdict=1
runs=$work/clone/results/runs.csv
if [[ -f $runs ]]; then
  "$work/clone/.venvs/workflow/bin/python" - "$runs" <<'PY' || verdict=1
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
bad = [row["run_id"] for row in rows if row["status"] != "ok"]
print(f"fresh-check: {len(rows) - len(bad)} of {len(rows)} runs ok" + (f"; not ok: {', '.join(bad)}" if bad else ""))
sys.exit(1 if bad or not rows else 0)
PY
else
  say "no results/runs.csv"
  verdict=1
fi
[[ -f $work/clone/results/report.html ]] && say "report written" || { say "no report"; verdict=1; }
if ((verdict == 0 && !keep)); then
  rm -rf "$work"
  say "passed; $work removed"
else
  say "$( ((verdict)) && echo FAILED || echo passed); kept: $work"
fi
exit "$verdict"
