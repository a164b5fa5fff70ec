#!/usr/bin/env bash
# Installs Debian's `prometheus` package (prometheus + promtool) for the exporter's end-to-end test
# (tests/exporter). Idempotent: does nothing when both binaries are on PATH. Exits non-zero when it
# cannot install; the test then fails in CI (SPARKOPS_REQUIRE_PROMETHEUS=1), it does not skip.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else echo "install-prometheus: need root or passwordless sudo" >&2; exit 1; fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus >/dev/null && command -v promtool >/dev/null
