#!/usr/bin/env bash
# Pinned MCP clients for tests/server: the TypeScript SDK (clients/ts_client.mjs) and the MCP
# Inspector CLI 0.15.0, both installed from clients/package-lock.json with `npm ci`.
# Idempotent: skipped when node_modules already matches the lockfile.
set -euo pipefail
cd "$(dirname "$0")/../../clients"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    # The project's machines ship Node 20; Debian's own nodejs (18) is enough for both clients.
    apt-get update
    apt-get install -y nodejs npm
fi

stamp=node_modules/.wp-mcp-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x node_modules/.bin/mcp-inspector ]; then
    echo "mcp clients already installed"
    exit 0
fi
npm ci --no-audit --no-fund
echo "$want" > "$stamp"
