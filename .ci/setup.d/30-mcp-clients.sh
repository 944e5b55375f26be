#!/usr/bin/env bash
# Pinned MCP clients for tests/server: the TypeScript SDK (clients/ts_client.mjs) and the MCP
# Inspector CLI 0.15.0, installed from clients/package-lock.json by clients/install.sh (which
# `make test` runs too). CI also installs Node when the machine lacks it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    # The project's machines ship Node 20; Debian's own nodejs (18) is enough for both clients.
    bash .ci/apt-install.sh nodejs npm
fi
bash clients/install.sh
