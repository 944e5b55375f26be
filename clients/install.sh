#!/usr/bin/env bash
# Installs the pinned MCP clients the server tests drive (the MCP Inspector CLI and the
# TypeScript SDK) into clients/node_modules from package-lock.json. Used by `make test` and
# by CI's set-up. Without Node.js and npm it says so and exits 0: the client tests then skip
# with that reason (CI installs Node first, and there a skip is a failure).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "clients/install.sh: node and npm not found; the MCP client tests will skip" >&2
    exit 0
fi
stamp=node_modules/.wp-mcp-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x node_modules/.bin/mcp-inspector ]; then
    exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
