#!/usr/bin/env bash
# Host collectors (issue 3): iproute2 (ip netns, veth; ss for the benchmark's baseline),
# nftables (packet loss in the retransmission test: this kernel has no netem), procps (ps for
# the benchmark's baseline), and torch==2.13.0 (CPU build, from a file on disk with plain
# pip) for the real torch.distributed gloo test. Idempotent: safe to run again.
set -euo pipefail

bash "$(dirname "$0")/../apt-install.sh" iproute2 nftables procps

venv="${VENV:-$PWD/.venv}"
if ! "$venv/bin/python" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
    # a bare `torch` would pull the multi-GB CUDA build; the pinned CPU build is what we test
    "$venv/bin/pip" install torch==2.13.0
fi
