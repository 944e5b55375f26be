"""Static snapshot cost on a loaded host, against `ss -tanpie` + `ps -eLf` (issue 3).

    .venv/bin/python benchmarks/bench_collect.py [--procs 500] [--threads 10] [--conns 2000]

Starts PROCS extra processes with THREADS threads each and CONNS extra loopback TCP
connections (client ends spread over those processes, accepted ends in one server), then
times, median of --repeat runs:
- the static part of a snapshot: every registered T0 collector, no window (``window_s=0``);
- ``ss -tanpie`` and ``ps -eLf`` (output discarded), the tools an engineer would use instead.
Targets: snapshot ≤ 1.5 s and ≤ 2× (ss + ps). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import statistics
import subprocess
import threading
import time

from wp_mcp.collectors import Context, collect_snapshot, default_collectors


def start_load(procs: int, threads: int, conns: int) -> tuple[list[int], socket.socket, list]:
    """Fork PROCS sleepers with THREADS threads each; each opens its share of connections."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (conns + 1024, conns + 1024))
    server = socket.create_server(("127.0.0.1", 0), backlog=4096)
    port = server.getsockname()[1]
    pids = []
    # fork every sleeper before accepting, so no child inherits the accepted sockets
    for i in range(procs):
        share = conns // procs + (1 if i < conns % procs else 0)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            server.close()
            _sleeper(threads, port, share)
        pids.append(pid)
    accepted = [server.accept()[0] for _ in range(conns)]
    return pids, server, accepted


def _sleeper(threads: int, port: int, conns: int) -> None:
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
    stop = threading.Event()
    for _ in range(threads - 1):  # the main thread is the tenth
        threading.Thread(target=stop.wait, daemon=True).start()
    signal.sigwait({signal.SIGTERM})
    del held
    os._exit(0)


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run_tool(*cmd: str) -> None:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=500)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--conns", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    static = [c for c in default_collectors() if c.tier == "T0"]
    names = ", ".join(c.name for c in static)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # children wait for it
    pids, server, accepted = start_load(args.procs, args.threads, args.conns)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        time.sleep(1.0)  # let every sleeper start its threads
        graph = collect_snapshot(Context(window_s=0, ebpf="off"), static)
        snap = median_time(lambda: collect_snapshot(
            Context(window_s=0, ebpf="off"), [type(c)() for c in static]), args.repeat)  # fmt: skip
        ss = median_time(lambda: run_tool("ss", "-tanpie"), args.repeat)
        ps = median_time(lambda: run_tool("ps", "-eLf"), args.repeat)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for pid in pids:
            os.waitpid(pid, 0)
        for sock in accepted:
            sock.close()
        server.close()
    kinds = graph.kinds()
    tcp = sum(1 for s in graph.of_kind("socket") if s.get("proto") == "tcp")
    baseline = ss + ps
    print(f"load: +{args.procs} processes x {args.threads} threads, +{args.conns} TCP connections")
    print(f"graph: {kinds.get('process', 0)} processes, {kinds.get('thread', 0)} threads, "
          f"{tcp} TCP sockets, {len(graph.nodes)} nodes, {graph.edge_count} edges")  # fmt: skip
    print(f"static collectors: {names}")
    print(f"snapshot (static, median of {args.repeat}): {snap:.3f} s   target <= 1.5 s: "
          f"{'PASS' if snap <= 1.5 else 'FAIL'}")  # fmt: skip
    print(f"ss -tanpie: {ss:.3f} s   ps -eLf: {ps:.3f} s   sum: {baseline:.3f} s")
    print(f"snapshot / (ss + ps): {snap / baseline:.2f}x   target <= 2x: "
          f"{'PASS' if snap <= 2 * baseline else 'FAIL'}")  # fmt: skip


if __name__ == "__main__":
    main()
