#!/usr/bin/env bash
# Skills (issue 6): the live diagnosis tests put two ranks in network namespaces (iproute2),
# drop packets on one rank's link with nftables (this kernel has no netem) and pin processes
# with taskset (util-linux). Idempotent: installs only what is missing.
set -euo pipefail

packages=(iproute2 nftables util-linux)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
