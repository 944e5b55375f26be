#!/usr/bin/env bash
# Pictures (issue 18): Debian's chromium for the browser tests of the HTML page (driven by
# Playwright for Python with executable_path=/usr/bin/chromium; `playwright install` is never
# run) and the page-open benchmark, and graphviz for `--format svg` (dot draws the NUMA boxes
# as clusters). Playwright itself is in the test extras of pyproject.toml. Idempotent.
set -euo pipefail

packages=(chromium graphviz fonts-dejavu-core)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
