"""Cost of the NUMA, metrics and device collectors on this machine under load.

Starts 500 extra processes × 10 threads (sleeping), then times each collector's parts: one
sample (taken at each end of the window, so a window costs two), the emit step (rates,
numa_maps, graph nodes), and the static device walk. ``ps -eLf`` is timed on the same host as
a yardstick. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_collectors_hw.py [--processes 500] [--threads 10]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

from wp_mcp.collectors.base import Context
from wp_mcp.collectors.disk import DiskCollector
from wp_mcp.collectors.metrics import MetricsCollector
from wp_mcp.collectors.nic import NicCollector
from wp_mcp.collectors.numa import NumaCollector
from wp_mcp.collectors.pci import PciCollector
from wp_mcp.graph import Graph

WORKLOAD = """
import os, sys, threading, time
count, threads = int(sys.argv[1]), int(sys.argv[2])
read_end, write_end = os.pipe()
for _ in range(count):
    if os.fork() == 0:
        for _ in range(threads - 1):
            threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        os.write(write_end, b"x")
        time.sleep(3600)
        os._exit(0)
started = 0
while started < count:
    started += len(os.read(read_end, count))
print("ready", flush=True)
time.sleep(3600)
"""


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=500)
    parser.add_argument("--threads", type=int, default=10)
    args = parser.parse_args()
    workload = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, str(args.processes), str(args.threads)],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert workload.stdout is not None and workload.stdout.readline().strip() == "ready"
        report(args)
    finally:
        os.killpg(workload.pid, signal.SIGKILL)
        workload.wait()


def report(args: argparse.Namespace) -> None:
    ctx = Context()
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    threads = sum(
        len(os.listdir(f"/proc/{p}/task")) for p in pids if os.path.isdir(f"/proc/{p}/task")
    )
    print(f"host: {len(pids)} processes, {threads} threads "
          f"({args.processes} extra × {args.threads} threads), {os.cpu_count()} CPUs")  # fmt: skip
    ps_s, _ = timed(lambda: subprocess.run(["ps", "-eLf"], capture_output=True, check=True))
    print(f"ps -eLf                         {ps_s * 1000:8.1f} ms   (yardstick)")
    total = 0.0
    for cls in (MetricsCollector, NumaCollector, NicCollector, DiskCollector):
        collector = cls()
        collector.probe(ctx)
        sample_s, first = timed(lambda c=collector: c.sample(ctx))
        last = collector.sample(ctx)
        emit_s, _ = timed(lambda c=collector, a=first, b=last: c.emit(Graph(), ctx, a, b, 1.0), 3)
        cost = 2 * sample_s + emit_s
        total += cost
        print(f"{cls.name:<8} sample {sample_s * 1000:8.1f} ms   emit {emit_s * 1000:8.1f} ms"
              f"   window cost {cost * 1000:8.1f} ms")  # fmt: skip
    pci_s, _ = timed(lambda: PciCollector().collect(Graph(), ctx))
    total += pci_s
    print(f"pci      walk   {pci_s * 1000:8.1f} ms")
    print(f"all of the above (two samples each + emit + pci): {total * 1000:.1f} ms "
          f"= {total / ps_s:.2f}× ps -eLf")  # fmt: skip


if __name__ == "__main__":
    main()
