"""Run-queue latency per thread: contended threads wait for a CPU, an idle one does not.

The workload runs more busy threads than this machine has CPUs (hashing with the GIL
released, so they really compete) plus one thread blocked on an event for the whole run.
The snapshot is a real collection (orchestrator, procfs polling, eBPF) filtered to the
workload, so the idle thread is in the graph and its lack of eBPF figures is meaningful.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from wp_mcp.collectors import collect_snapshot
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.ebpf import EbpfCollector
from wp_mcp.collectors.procfs import ProcfsCollector

from .conftest import Peer, Window

pytestmark = [pytest.mark.usefixtures("ebpf"), pytest.mark.ebpf, pytest.mark.slow]  # 10-20 s each


def test_contended_threads_wait_and_an_idle_thread_does_not(peers):
    busy = (os.cpu_count() or 2) + 1
    workload = Peer("contend", "--busy", str(busy), stdin=True)
    peers.append(workload)
    time.sleep(0.5)  # the idle thread has settled into its wait before the window opens
    ctx = Context(window_s=2.0, pids={workload.pid}, ebpf="on")
    graph = collect_snapshot(ctx, [ProcfsCollector(), EbpfCollector()])
    workload.finish()

    statuses = {s.name: s.status for s in graph.meta.collectors}
    assert statuses["ebpf"] == "ok"
    assert statuses["procfs"] in ("ok", "partial")  # polling lists the idle thread
    tids = workload.hello
    assert len(tids["busy"]) == busy
    for tid in tids["busy"]:
        node = graph.nodes[f"thr:{tid}"]
        # each busy thread can have at most cpus/busy of a CPU: it waits much of the time
        assert node.get("ebpf_run_delay_pct") > 10, node.attrs()
        assert node.get("ebpf_runq_waits") > 0
        assert node.get("ebpf_preempted") > 0
        assert node.source["ebpf_run_delay_ms"] == "ebpf"
        assert graph.in_edges(node.id, "has_thread")[0].src == f"proc:{workload.pid}"
    idle = graph.nodes[f"thr:{tids['idle'][0]}"]  # listed by polling
    assert idle.get("ebpf_run_delay_ms") is None
    assert idle.get("ebpf_switches_in") is None


def run_delay_ns(pid: int, tid: int) -> int:
    """The kernel's own run-queue wait for a thread (schedstat, second field)."""
    return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])


def test_run_queue_latency_agrees_with_the_kernels_schedstat(peers):
    busy = (os.cpu_count() or 2) + 1
    workload = Peer("contend", "--busy", str(busy), stdin=True)
    peers.append(workload)
    tids = workload.hello["busy"]
    with Window() as window:
        before = {tid: run_delay_ns(workload.pid, tid) for tid in tids}
        time.sleep(3.0)
        after = {tid: run_delay_ns(workload.pid, tid) for tid in tids}
        graph = window.collect()
    workload.finish()
    for tid in tids:
        kernel_ms = (after[tid] - before[tid]) / 1e6
        ebpf_ms = graph.nodes[f"thr:{tid}"].get("ebpf_run_delay_ms")
        # eBPF's window starts a little before and ends a little after schedstat's
        assert kernel_ms * 0.8 <= ebpf_ms <= kernel_ms * 1.25 + 50, (tid, kernel_ms, ebpf_ms)


WAKER = """
import json, os, threading, time
ready = threading.Semaphore(0)
tids = {}

def sleeper():
    tids["sleeper"] = threading.get_native_id()
    while True:
        ready.acquire()  # a lock: woken by whoever releases it

def waker():
    tids["waker"] = threading.get_native_id()
    while True:
        time.sleep(0.02)
        ready.release()

for target in (sleeper, waker):
    threading.Thread(target=target, daemon=True).start()
time.sleep(0.2)
print(json.dumps(tids), flush=True)
os.read(0, 1)
"""


def test_a_thread_woken_by_its_sibling_names_it_as_its_waker():
    import json
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", WAKER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        tids = json.loads(proc.stdout.readline())
        ctx = Context(window_s=1.5, pids={proc.pid}, ebpf="on")
        graph = collect_snapshot(ctx, [ProcfsCollector(), EbpfCollector()])
    finally:
        proc.kill()
        proc.wait()
    woken_by = graph.nodes[f"thr:{tids['sleeper']}"].get("ebpf_woken_by")
    # it sleeps ~20 ms between wakeups, each ended by the waker: most of the window
    assert max(woken_by, key=woken_by.get) == f"thr:{tids['waker']}", woken_by
    assert woken_by[f"thr:{tids['waker']}"] > 500, woken_by
