"""What the eBPF tier costs a busy workload: loopback TCP throughput with and without it.

    sudo .venv/bin/python benchmarks/bench_ebpf.py [--seconds 1.5] [--rounds 12] [--chunk 131072]
        [--programs sockbytes,retrans,runqlat,blockio,pipes]

A sender and a receiver process stream over one loopback TCP connection for --seconds;
the receiver's byte count gives the throughput. Each round runs "without" (no BPF loaded)
and "with" (the eBPF collector attached: socket bytes on every send/recv, the scheduler
programs on every context switch, retransmits, block I/O, pipe syscalls), in ABBA order
so drifting background load hits both alike; each round's collector also reads its maps,
so the run proves it counted the traffic. Prints per-round figures, the medians, the loss
(target ≤ 3 %) and the median of the per-round losses, and the pair's CPU time per GB
moved with and without (less sensitive to background load, which on a shared 2-CPU
machine swings wall-clock throughput by more than the effect measured).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import statistics
import time

from wp_mcp.collectors.base import Context
from wp_mcp.collectors.ebpf import PROGRAMS, EbpfCollector, probe_ebpf
from wp_mcp.graph import Graph


def receive(server: socket.socket, chunk: int, result: multiprocessing.Queue) -> None:
    conn, _ = server.accept()
    total = 0
    started = time.monotonic()
    with conn:
        while data := conn.recv(chunk):
            total += len(data)
    result.put((total, time.monotonic() - started))


def send(port: int, chunk: int, seconds: float) -> None:
    payload = b"b" * chunk
    with socket.create_connection(("127.0.0.1", port)) as conn:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            conn.sendall(payload)


def stream(seconds: float, chunk: int) -> tuple[float, float, int]:
    """One sender→receiver run: (bytes per second, CPU seconds per GB, receiver pid).

    The CPU time is the pair's own (user + system, from the children's rusage): eBPF
    programs run in the context of the task that hits the tracepoint, so their cost is
    charged there — a figure background load on a shared machine does not distort the way
    it distorts wall-clock throughput."""
    before = _children_cpu_s()
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    result: multiprocessing.Queue = multiprocessing.Queue()
    receiver = multiprocessing.Process(target=receive, args=(server, chunk, result))
    receiver.start()
    server.close()  # the receiver has its own copy
    sender = multiprocessing.Process(target=send, args=(port, chunk, seconds))
    sender.start()
    total, elapsed = result.get(timeout=seconds + 30)
    sender.join()
    receiver.join()
    return total / elapsed, (_children_cpu_s() - before) / (total / 1e9), receiver.pid


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def with_collector(programs: tuple, seconds: float, chunk: int) -> tuple[float, float, int]:
    """One run with the collector attached (compiled and attached before the timed part)."""
    collector = EbpfCollector(programs)
    ctx = Context(window_s=seconds)
    collector.begin(ctx)
    try:
        rate, cpu, receiver_pid = stream(seconds, chunk)
        graph = Graph()
        collector.collect(graph, ctx)
    finally:
        collector.close()
    seen = graph.nodes[f"proc:{receiver_pid}"].get("ebpf_bytes_received", 0)
    return rate, cpu, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--chunk", type=int, default=128 * 1024)
    parser.add_argument(
        "--programs",
        default=",".join(p.name for p in PROGRAMS),
        help="comma-separated subset of the eBPF programs to attach (to see what each costs)",
    )
    args = parser.parse_args()
    reason = probe_ebpf()
    if reason is not None:
        raise SystemExit(f"eBPF cannot run here: {reason}")
    chosen = set(args.programs.split(","))
    programs = tuple(p for p in PROGRAMS if p.name in chosen)
    rows = []  # (rate without, rate with, cpu without, cpu with)
    stream(1.0, args.chunk)  # warm up: page cache, socket buffers, CPU frequency
    for round_no in range(1, args.rounds + 1):
        # ABBA order: a load that drifts during a round hits both variants alike
        if round_no % 2:
            base, base_cpu, _ = stream(args.seconds, args.chunk)
            rate, cpu, seen = with_collector(programs, args.seconds, args.chunk)
        else:
            rate, cpu, seen = with_collector(programs, args.seconds, args.chunk)
            base, base_cpu, _ = stream(args.seconds, args.chunk)
        rows.append((base, rate, base_cpu, cpu))
        print(
            f"round {round_no}: without {base / 1e9:.3f} GB/s ({base_cpu:.3f} CPU-s/GB), "
            f"with eBPF {rate / 1e9:.3f} GB/s ({cpu:.3f} CPU-s/GB; "
            f"eBPF counted {seen / 1e9:.2f} GB received)"
        )
    base = statistics.median(r[0] for r in rows)
    loaded = statistics.median(r[1] for r in rows)
    paired = statistics.median(100 * (r[0] - r[1]) / r[0] for r in rows)
    cpu_base = statistics.median(r[2] for r in rows)
    cpu_loaded = statistics.median(r[3] for r in rows)
    print(f"loopback TCP, {args.chunk} B sends, {args.seconds:g} s x {args.rounds} rounds each")
    print(f"eBPF programs: {', '.join(p.name for p in programs)}")
    print(f"median without eBPF: {base / 1e9:.3f} GB/s")
    print(f"median with eBPF:    {loaded / 1e9:.3f} GB/s")
    print(f"throughput loss:     {100 * (base - loaded) / base:.2f} % (target <= 3 %)")
    print(f"median of per-round losses: {paired:.2f} %")
    print(f"median CPU per GB without eBPF: {cpu_base:.3f} s")
    print(f"median CPU per GB with eBPF:    {cpu_loaded:.3f} s")
    print(f"CPU overhead per byte moved:    {100 * (cpu_loaded - cpu_base) / cpu_base:.2f} %")
    print(f"load average during the run:    {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
