"""The waits collector: where each thread's time goes over the window, on real processes (a
timed sleep, a read of an empty pipe, a write into a full pipe, a socket read, a lock, a busy
loop, a job stepping at the sampling period) and from the kernel's own words."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from wp_mcp.collectors import Context
from wp_mcp.collectors.waits import WaitsCollector, wait_class
from wp_mcp.graph import Graph

pytestmark = pytest.mark.slow

READY = "print('ready', flush=True)\n"
PROGRAMS = {
    "sleep": READY + "import time; time.sleep(60)",
    "pipe_read": READY + "import os, sys; os.read(sys.stdin.fileno(), 1)",
    # stdout is a pipe nobody reads: the write blocks once its 64 KiB are full
    "pipe_write": READY + "import os\nwhile True: os.write(1, b'x' * 65536)",
    "socket_recv": READY + "import socket; a, b = socket.socketpair(); a.recv(1)",
    "futex": READY + "import threading; threading.Lock().acquire(); "
    "l = threading.Lock(); l.acquire(); l.acquire()",
    "on_cpu": READY + "while True: pass",
}
# 10 ms of CPU per 50 ms step, the step paced by a timed sleep of the sampling period itself
STEPPING = (
    READY
    + """
import time
while True:
    end = time.perf_counter() + 0.010
    while time.perf_counter() < end:
        pass
    time.sleep(0.040)
"""
)


def _start(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip


@pytest.fixture
def workloads():
    procs = {kind: _start(code) for kind, code in PROGRAMS.items()}
    try:
        for proc in procs.values():
            assert proc.stdout.readline().strip() == "ready"
        yield {kind: proc.pid for kind, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def _collect(pids: set[int], window_s: float) -> Graph:
    collector = WaitsCollector()
    graph = Graph()
    try:
        collector.collect(graph, Context(window_s=window_s, pids=pids))  # opens its own window
    finally:
        collector.close()
    return graph


def test_each_thread_gets_its_time_shares_and_what_it_waits_on(workloads):
    graph = _collect(set(workloads.values()), 1.0)
    for kind, pid in workloads.items():
        main = graph.node(f"thr:{pid}")
        shares = dict(main.get("time_shares"))
        # a busy loop wants a CPU all the time: on one, or waiting for one on a busy host
        shares["on_cpu"] = shares.get("on_cpu", 0) + shares.pop("runnable", 0)
        assert max(shares, key=shares.get) == kind, (kind, shares)
        assert 0.9 <= sum(shares.values()) <= 1.01, shares
        assert main.get("time_samples") >= 5
        assert f"thr:{pid}" in {t.id for t in graph.successors(f"proc:{pid}", "has_thread")}
    # the full pipe is named by its inode: the same node the procfs collector makes
    inode = os.stat(f"/proc/{workloads['pipe_write']}/fd/1").st_ino
    assert f"pipe:{inode}" in graph.node(f"thr:{workloads['pipe_write']}").get("waits_on")
    # the data plane's classes of the main thread: a full pipe is not a queue wait
    waits = {kind: graph.node(f"proc:{pid}").get("main_waits") for kind, pid in workloads.items()}
    assert max(waits["pipe_write"], key=waits["pipe_write"].get) == "pipe_write"
    assert max(waits["pipe_read"], key=waits["pipe_read"].get) == "fd_wait"
    assert max(waits["socket_recv"], key=waits["socket_recv"].get) == "fd_wait"  # UNIX: local
    assert max(waits["on_cpu"], key=waits["on_cpu"].get) == "running"


def test_a_job_stepping_at_the_sampling_period_is_measured_at_its_duty_cycle():
    """On CPU comes from the kernel's accounting, not from the samples' state letter."""
    proc = _start(STEPPING)
    try:
        assert proc.stdout.readline().strip() == "ready"
        graph = _collect({proc.pid}, 2.0)
    finally:
        proc.kill()
        proc.wait()
    shares = graph.node(f"thr:{proc.pid}").get("time_shares")
    assert shares["on_cpu"] + shares.get("runnable", 0) < 0.5, shares
    assert shares["sleep"] > 0.4, shares


def test_wait_classes_follow_the_state_then_the_system_call_then_the_wait_channel():
    assert wait_class("D", "folio_wait_bit") == "disk_io"
    assert wait_class("D", "folio_wait_bit", "none") == "page_fault"  # not in a system call
    assert wait_class("T", "do_signal_stop") == "stopped"
    assert wait_class("R", "0") == "running"
    assert wait_class("S", "hrtimer_nanosleep") == "sleep"
    assert wait_class("S", "poll_schedule_timeout.constprop.0") == "poll"
    assert wait_class("S", "anon_pipe_read") == "pipe_read"
    assert wait_class("S", "anon_pipe_write") == "pipe_write"
    assert wait_class("S", "wait_woken", "write", "socket") == "socket_send"
    assert wait_class("S", "wait_woken", "read", "socket") == "socket_recv"
    assert wait_class("S", "sk_stream_wait_memory") == "socket_send"
    assert wait_class("S", "unix_stream_read_generic") == "socket_recv"
    assert wait_class("S", "futex_do_wait") == "futex"
    assert wait_class("S", "0") == "other"


def test_without_a_window_the_collector_is_skipped_with_the_reason():
    assert WaitsCollector().probe(Context(window_s=0)) == "no window: waits are sampled over one"
