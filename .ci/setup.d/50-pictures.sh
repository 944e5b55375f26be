#!/usr/bin/env bash
# Pictures (issue 18): Debian's chromium for the browser tests of the HTML page (driven by
# Playwright for Python with executable_path=/usr/bin/chromium; `playwright install` is never
# run) and the page-open benchmark, and graphviz for `--format svg` (dot draws the NUMA boxes
# as clusters). Playwright itself is in the test extras of pyproject.toml; mermaid (rendering the
# Mermaid picture in that Chromium, as mermaid-cli would) comes from converters/assets'
# package-lock.json, beside the vendored elkjs it checks. Idempotent.
set -euo pipefail
bash "$(dirname "$0")/../apt-install.sh" chromium graphviz fonts-dejavu-core
cd "$(dirname "$0")/../.."

assets=converters/assets
stamp=$assets/node_modules/.wp-mcp-lock.sha256
want=$(sha256sum "$assets/package-lock.json" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    (cd "$assets" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$stamp"
fi
