#!/usr/bin/env bash
# Vendors the layout library the HTML picture embeds: elkjs (the Eclipse Layout Kernel, layered
# layout of nested boxes) at the version package-lock.json pins, copied with its licence so that
# `pip install` carries it and a page needs no network. Run after changing package.json; the
# picture tests check that the vendored file is the one the lock file names.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
cp node_modules/elkjs/lib/elk.bundled.js elk.bundled.js
cp node_modules/elkjs/LICENSE.md elk.LICENSE.md
node -e 'console.log(require("./node_modules/elkjs/package.json").version)' > elk.version
