#!/usr/bin/env bash
# Skills (issue 6): the live diagnosis tests put two ranks in network namespaces (iproute2),
# drop packets on one rank's link with nftables (this kernel has no netem) and pin processes
# with taskset (util-linux). Idempotent: installs only what is missing.
set -euo pipefail

bash "$(dirname "$0")/../apt-install.sh" iproute2 nftables util-linux
