#!/usr/bin/env bash
# Monitoring (issue 17): the monitor test starts a real Prometheus server (Debian's
# `prometheus` package) on a loopback port with a config in its tmp dir, scrapes
# `wp-mcp monitor --metrics` and queries the series through its HTTP API; the test starts
# and stops its own server by pid. Idempotent: installs only what is missing.
set -euo pipefail

packages=(prometheus)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
