"""The eBPF tier (T2): bcc programs on tracepoints that measure activity as it happens.

Socket bytes per process and flow, TCP retransmissions per flow, run-queue latency and
off-CPU time per thread, block I/O latency per process. Optional and bounded: without it
the same edges come from polling, and ``graph.meta.capabilities["ebpf"]`` says why it did
not run. See docs/ebpf.md.
"""

from .collector import PROGRAMS, EbpfCollector
from .probe import probe_details, probe_ebpf

__all__ = ["PROGRAMS", "EbpfCollector", "probe_details", "probe_ebpf"]
