#!/usr/bin/env bash
# Make `snakemake --profile tianhe` and `--profile slurm` work as typed: Snakemake looks
# for a profile named without a path in $XDG_CONFIG_HOME/snakemake (default
# ~/.config/snakemake) and /etc/xdg/snakemake. This links the project's profiles there.
# An existing profile of that name that is not our link is left alone, and said so.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${XDG_CONFIG_HOME:-$HOME/.config}/snakemake
mkdir -p "$dest"
for name in slurm tianhe; do
  target=$repo/profiles/$name
  link=$dest/$name
  if [[ -L $link || ! -e $link ]]; then
    ln -sfn "$target" "$link"
    echo "profile $name -> $target"
  else
    echo "install-profiles: $link exists and is not a link to this project; left as is" \
      "(use --profile $target)" >&2
  fi
done
