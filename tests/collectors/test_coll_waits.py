"""The waits collector: where each Python process's main thread sleeps over the window, on
real processes (a timed sleep, a pipe read, a busy loop) and from the kernel's own words."""

from __future__ import annotations

import subprocess
import sys

import pytest
from wp_mcp.collectors import Context
from wp_mcp.collectors.waits import WaitsCollector, wait_class
from wp_mcp.graph import Graph

pytestmark = pytest.mark.slow

PROGRAMS = {
    "sleep": "import time; print('ready', flush=True); time.sleep(60)",
    "fd_wait": "import os, sys; print('ready', flush=True); os.read(sys.stdin.fileno(), 1)",
    "running": "print('ready', flush=True)\nwhile True: pass",
}


@pytest.fixture
def sleepers():
    procs = {
        kind: subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )  # fmt: skip
        for kind, code in PROGRAMS.items()
    }
    try:
        for proc in procs.values():
            assert proc.stdout.readline().strip() == "ready"
        yield {kind: proc.pid for kind, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_each_process_is_classed_by_what_its_main_thread_waits_on(sleepers):
    collector = WaitsCollector()
    ctx = Context(window_s=0.6, pids=set(sleepers.values()))
    graph = Graph()
    try:
        collector.collect(graph, ctx)  # on its own: it opens the window itself
    finally:
        collector.close()
    for kind, pid in sleepers.items():
        waits = graph.node(f"proc:{pid}").get("main_waits")
        assert max(waits, key=waits.get) == kind, (kind, waits)
        assert graph.node(f"proc:{pid}").get("main_wait_samples") >= 5


def test_wait_classes_follow_the_state_first_then_the_wait_channel():
    assert wait_class("D", "folio_wait_bit") == "io"
    assert wait_class("T", "do_signal_stop") == "stopped"
    assert wait_class("R", "0") == "running"
    assert wait_class("S", "hrtimer_nanosleep") == "sleep"
    assert wait_class("S", "poll_schedule_timeout.constprop.0") == "fd_wait"
    assert wait_class("S", "anon_pipe_read") == "fd_wait"
    assert wait_class("S", "unix_stream_read_generic") == "fd_wait"
    assert wait_class("S", "futex_do_wait") == "futex"
    assert wait_class("S", "sk_wait_data") == "socket"
    assert wait_class("S", "0") == "other"


def test_without_a_window_the_collector_is_skipped_with_the_reason():
    assert WaitsCollector().probe(Context(window_s=0)) == "no window: waits are sampled over one"
