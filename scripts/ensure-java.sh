#!/usr/bin/env bash
# Make sure a Java runtime is there for BigDL/Spark; install openjdk-17-jre-headless with apt
# only when `java -version` fails. Idempotent: with a working Java it changes nothing.
# Java 17: Spark 3.5 (the pyspark BigDL runs on here) supports it and adds its --add-opens flags.
# Exit status 0 when Java works (afterwards), 1 with a message saying why it cannot.
set -euo pipefail
if java -version >/dev/null 2>&1; then
  exit 0
fi
if [[ -n "${JAVA_HOME:-}" ]] && "$JAVA_HOME/bin/java" -version >/dev/null 2>&1; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "dlscale: BigDL needs Java, and 'java -version' fails; install openjdk-17-jre-headless" \
    "(sudo apt-get install openjdk-17-jre-headless) or set JAVA_HOME, then rerun" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "dlscale: BigDL needs Java 17 and this system has no apt-get to install it;" \
    "install a Java 17 runtime and put it on PATH (or set JAVA_HOME)" >&2
  exit 1
fi
if ! DLSCALE_APT_WHO="dlscale (Java for BigDL/Spark)" \
  bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" openjdk-17-jre-headless; then
  echo "dlscale: could not install openjdk-17-jre-headless with apt-get (no network or no such" \
    "package here?); install a Java 17 runtime by hand" >&2
  exit 1
fi
if ! java -version >/dev/null 2>&1; then
  echo "dlscale: openjdk-17-jre-headless is installed but 'java -version' still fails" >&2
  exit 1
fi
