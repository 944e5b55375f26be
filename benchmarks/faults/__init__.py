"""Fault-scenario suite: a real torch DDP job, one injected fault at a time, ``wp-mcp
diagnose --live`` run during it (eBPF off and on), and a scorecard of what it found.

    .venv/bin/python -m benchmarks.faults [--only NAME,…] [--window S] [--ebpf off,on]

See docs/faults.md.
"""
