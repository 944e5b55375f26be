"""A real ring of rank processes exchanging data over loopback TCP: every rank gets its NUMA
placement and locality, and every thread its CPU and switch rates."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.metrics import MetricsCollector
from wp_mcp.collectors.numa import NumaCollector
from wp_mcp.graph import Graph

pytestmark = pytest.mark.slow  # four real rank processes and a window

RANKS = 4
RANK = textwrap.dedent(
    """
    import socket, sys, threading, time
    rank, world, base = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    server = socket.create_server(("127.0.0.1", base + rank))
    print("listening", flush=True)
    sys.stdin.readline()  # every rank listens before anyone connects
    right = socket.create_connection(("127.0.0.1", base + (rank + 1) % world))
    left, _ = server.accept()

    def receive():
        while left.recv(65536):
            pass

    threading.Thread(target=receive, name="recv", daemon=True).start()
    block = bytes(64 * 1024)
    while True:  # one step: send a block to the right, then yield like a collective would
        right.sendall(block)
        time.sleep(0.001)
    """
)


@pytest.fixture
def ring():
    base = 20000 + os.getpid() % 20000
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(r), str(RANKS), str(base)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in range(RANKS)
    ]
    try:
        for rank in ranks:
            assert rank.stdout.readline().strip() == "listening"
        for rank in ranks:
            rank.stdin.write("go\n")
            rank.stdin.flush()
        yield ranks
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait(timeout=10)


def test_each_rank_has_placement_locality_and_thread_rates(ring):
    ctx = Context(window_s=1.0, pids={rank.pid for rank in ring})
    metrics, numa = MetricsCollector(), NumaCollector()
    assert numa.probe(ctx) is None
    metrics.begin(ctx)
    numa.begin(ctx)
    time.sleep(ctx.window_s)  # the orchestrator's wait between the two ends of the window
    graph = Graph()
    metrics.collect(graph, ctx)
    numa.collect(graph, ctx)
    for rank in ring:
        proc = graph.node(f"proc:{rank.pid}")
        assert proc.numa_cpu_share and abs(sum(proc.numa_cpu_share.values()) - 1) < 1e-3
        assert 0 < proc.numa_locality <= 1
        assert {e.dst for e in graph.out_edges(proc.id, "cpu_on")} <= {
            n.id for n in graph.of_kind("numa_node")
        }
        threads = graph.successors(proc.id, "has_thread")
        assert len(threads) == 2  # the main (sending) thread and "recv"
        for thread in threads:
            assert thread.cpu_pct is not None and thread.window_s >= ctx.window_s
            assert thread.vol_switches_per_s > 0  # both block: sleep, recv
        assert max(t.cpu_pct for t in threads) > 0
