#!/usr/bin/env bash
# Cluster collection on Ray (issue 19): the `ray` extra (pip install 'wp-mcp[ray]') for the
# real Ray cluster test (tests/collectors/test_cluster_ray.py, a head and a worker node in
# two network namespaces). The wheel is ~80 MB (~240 MB installed) with no system packages
# beyond iproute2 and nftables (20-collectors.sh). Pinned to the version tested. Idempotent.
set -euo pipefail

venv="${VENV:-$PWD/.venv}"
if ! "$venv/bin/python" -c 'import ray, sys; sys.exit(ray.__version__ != "2.60.0")' 2>/dev/null; then
    "$venv/bin/pip" install ray==2.60.0
fi
