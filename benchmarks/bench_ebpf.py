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
import ctypes
import multiprocessing
import os
import platform
import resource
import socket
import statistics
import struct
import time
from typing import NamedTuple

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


class Run(NamedTuple):
    rate: float  # bytes per second at the receiver
    cpu_s: float  # the pair's CPU time (user + system)
    gb: float  # data moved
    receiver_pid: int

    @property
    def cpu_per_gb(self) -> float:
        return self.cpu_s / self.gb


def stream(seconds: float, chunk: int) -> Run:
    """One sender→receiver run.

    The CPU time is the pair's own (from the children's rusage): eBPF programs run in the
    context of the task that hits the tracepoint, so their cost is charged there — a figure
    background load on a shared machine distorts less than wall-clock throughput."""
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
    return Run(total / elapsed, _children_cpu_s() - before, total / 1e9, receiver.pid)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# bpf(2): BPF_ENABLE_STATS turns on per-program run-time accounting while the returned fd
# is open (no global sysctl to restore). Syscall numbers per architecture.
BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}
BPF_ENABLE_STATS, BPF_STATS_RUN_TIME = 32, 0


def enable_bpf_stats() -> int | None:
    number = BPF_SYSCALL.get(platform.machine())
    if number is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = ctypes.create_string_buffer(struct.pack("<I", BPF_STATS_RUN_TIME), 128)
    fd = libc.syscall(number, BPF_ENABLE_STATS, attr, ctypes.sizeof(attr))
    return fd if fd >= 0 else None


def bpf_run_time_ns() -> int:
    """Time the kernel spent running the BPF programs this process holds (all CPUs)."""
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:bpf-prog":
                continue
            with open(f"/proc/self/fdinfo/{fd}") as info:
                for line in info:
                    if line.startswith("run_time_ns:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def with_collector(programs: tuple, seconds: float, chunk: int) -> tuple[Run, float, int]:
    """One run with the collector attached (compiled and attached before the timed part):
    the run, the BPF programs' own run time in seconds, and the bytes eBPF counted."""
    collector = EbpfCollector(programs)
    ctx = Context(window_s=seconds)
    stats_fd = enable_bpf_stats()
    collector.begin(ctx)
    try:
        started_ns = bpf_run_time_ns()
        run = stream(seconds, chunk)
        bpf_s = (bpf_run_time_ns() - started_ns) / 1e9
        graph = Graph()
        collector.collect(graph, ctx)
    finally:
        collector.close()
        if stats_fd is not None:
            os.close(stats_fd)
    seen = graph.nodes[f"proc:{run.receiver_pid}"].get("ebpf_bytes_received", 0)
    return run, bpf_s, seen


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
    rows = []  # (run without, run with, BPF seconds)
    stream(1.0, args.chunk)  # warm up: page cache, socket buffers, CPU frequency
    for round_no in range(1, args.rounds + 1):
        # ABBA order: a load that drifts during a round hits both variants alike
        if round_no % 2:
            base = stream(args.seconds, args.chunk)
            run, bpf_s, seen = with_collector(programs, args.seconds, args.chunk)
        else:
            run, bpf_s, seen = with_collector(programs, args.seconds, args.chunk)
            base = stream(args.seconds, args.chunk)
        rows.append((base, run, bpf_s))
        print(
            f"round {round_no}: without {base.rate / 1e9:.3f} GB/s "
            f"({base.cpu_per_gb:.3f} CPU-s/GB), with eBPF {run.rate / 1e9:.3f} GB/s "
            f"({run.cpu_per_gb:.3f} CPU-s/GB; BPF ran {bpf_s * 1e3:.1f} ms = "
            f"{100 * bpf_s / run.cpu_s:.2f} % of the pair's CPU; "
            f"eBPF counted {seen / 1e9:.2f} GB received)"
        )
    base_rate = statistics.median(r[0].rate for r in rows)
    loaded_rate = statistics.median(r[1].rate for r in rows)
    paired = statistics.median(100 * (r[0].rate - r[1].rate) / r[0].rate for r in rows)
    cpu_base = statistics.median(r[0].cpu_per_gb for r in rows)
    cpu_loaded = statistics.median(r[1].cpu_per_gb for r in rows)
    bpf_share = statistics.median(100 * r[2] / r[1].cpu_s for r in rows)
    print(f"loopback TCP, {args.chunk} B sends, {args.seconds:g} s x {args.rounds} rounds each")
    print(f"eBPF programs: {', '.join(p.name for p in programs)}")
    print(f"median without eBPF: {base_rate / 1e9:.3f} GB/s")
    print(f"median with eBPF:    {loaded_rate / 1e9:.3f} GB/s")
    print(
        f"throughput loss:     {100 * (base_rate - loaded_rate) / base_rate:.2f} % (target <= 3 %)"
    )
    print(f"median of per-round losses: {paired:.2f} %")
    print(f"median CPU per GB without eBPF: {cpu_base:.3f} s")
    print(f"median CPU per GB with eBPF:    {cpu_loaded:.3f} s")
    print(f"CPU overhead per byte moved:    {100 * (cpu_loaded - cpu_base) / cpu_base:.2f} %")
    print(
        f"BPF program run time (kernel-measured, events of every task on the machine; "
        f"tracepoint dispatch not included): {bpf_share:.2f} % of the pair's CPU time (median)"
    )
    print(f"load average during the run:    {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
