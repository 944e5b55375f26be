#!/usr/bin/env bash
# eBPF tier set-up (issue 4, shared/ENVIRONMENT.md): bcc from Debian, kernel headers for bcc's
# C front end, tracefs/debugfs mounts; nftables for the packet-drop test, bpftool to check that
# no BPF program is left loaded. Idempotent: safe to run again on a set-up machine.
set -euo pipefail

bash "$(dirname "$0")/../apt-install.sh" bpfcc-tools python3-bpfcc linux-headers-amd64 nftables bpftool iproute2

# The VM's kernel ships no headers; bcc only needs some to parse its C (tracepoint layouts
# come from tracefs), so point the running kernel's module dir at Debian's newest ones.
modules="/lib/modules/$(uname -r)"
mkdir -p "$modules"
build=$(ls -d /usr/src/linux-headers-*-amd64 | sort -V | tail -n 1)
common=$(ls -d /usr/src/linux-headers-*-common | sort -V | tail -n 1)
ln -sfn "$build" "$modules/build"
ln -sfn "$common" "$modules/source"

mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug
