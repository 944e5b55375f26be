#!/usr/bin/env bash
# Monitoring (issue 17): the monitor test starts a real Prometheus server (Debian's
# `prometheus` package) on a loopback port with a config in its tmp dir, scrapes
# `wp-mcp monitor --metrics` and queries the series through its HTTP API; the test starts
# and stops its own server by pid. Idempotent: installs only what is missing.
set -euo pipefail

bash "$(dirname "$0")/../apt-install.sh" prometheus
