"""A real snapshot of this machine: a workload's busy thread and loopback flow show up in the
layers, under budget, and the summary reports the collectors' coverage."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from wp_mcp.converters import VIEWS, render_view

WORKLOAD = textwrap.dedent(
    """
    import os, socket, sys, threading, time

    def spin():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write("wp-spin")
        end = time.time() + 60
        while time.time() < end:
            pass

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    child = os.fork()
    if child == 0:
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"x" * 4_000_000)
        time.sleep(60)
        os._exit(0)
    peer, _ = server.accept()
    received = 0
    while received < 4_000_000:
        received += len(peer.recv(1 << 20))
    threading.Thread(target=spin, daemon=True).start()
    print("ready", child, flush=True)
    time.sleep(60)
    """
)


@pytest.fixture(scope="module")
def snapshot():
    from wp_mcp.collectors import collect_snapshot
    from wp_mcp.collectors.base import Context

    workload = subprocess.Popen([sys.executable, "-c", WORKLOAD], stdout=subprocess.PIPE, text=True)
    try:
        ready, child = workload.stdout.readline().split()
        assert ready == "ready"
        time.sleep(0.3)
        graph = collect_snapshot(Context(window_s=1.5, pids={workload.pid}, ebpf="off"))
        yield graph, workload.pid
    finally:
        workload.kill()
        workload.wait()
        with contextlib.suppress(ProcessLookupError, NameError):
            os.kill(int(child), signal.SIGKILL)


def test_every_view_of_a_live_snapshot_fits_its_budget(snapshot):
    graph, pid = snapshot
    for view in VIEWS:
        options = {"entity": f"proc:{pid}"} if view == "entity" else {}
        page = render_view(graph, view, max_tokens=2000, **options)
        assert page.tokens <= (300 if view == "summary" else 2000), view


def test_the_busy_thread_leads_its_process_in_compute(snapshot):
    graph, pid = snapshot
    text = render_view(graph, "compute", filters={"pid": pid}).text
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(f"proc:{pid} "))
    # The process's first thread line (threads follow their process, busiest first) is the
    # spinning one, with a CPU share (the machine may be loaded, so no absolute figure).
    first_thread = lines[start + 1]
    assert first_thread.startswith("  thr:") and '"wp-spin"' in first_thread
    assert float(re.search(r" cpu=([\d.]+)%", first_thread).group(1)) > 0


def test_the_loopback_transfer_shows_in_network(snapshot):
    graph, pid = snapshot
    text = render_view(graph, "network", filters={"pid": pid}).text
    assert re.search(r"(sent/recv|bytes)=[\d.]+M", text), text


def test_the_summary_reports_coverage(snapshot):
    graph, _pid = snapshot
    text = render_view(graph, "summary").text
    assert re.search(r"^coverage: .*ok \d+", text, re.M), text
