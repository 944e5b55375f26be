#!/usr/bin/env bash
# Installs those of the named Debian packages that are missing; does nothing when all are
# there, so every set-up script that calls it stays idempotent.
# Usage: bash .ci/apt-install.sh PACKAGE...
set -euo pipefail

missing=()
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
