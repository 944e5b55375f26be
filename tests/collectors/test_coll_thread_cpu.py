"""CPU % over the window comes from schedstat's nanosecond run time, not 10 ms clock ticks.

A thread that wakes up 200 times a second for ~20 µs uses about half a percent of a CPU:
under one tick per window, so ``stat``'s utime + stime often do not move at all. Its
schedstat run time always does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from coll_helpers import Running
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.collectors.metrics import (
    HostSample,
    MetricsCollector,
    MetricsSample,
    ProcessSample,
    ThreadSample,
)
from wp_mcp.graph import Graph, ids

# a worker thread that wakes every 5 ms and spins ~20 µs; prints its tid, then the main
# thread waits for stdin to close
BRIEF_WAKER = textwrap.dedent(
    """
    import sys, threading, time

    def wake_often():
        while True:
            time.sleep(0.005)
            end = time.perf_counter() + 20e-6
            while time.perf_counter() < end:
                pass

    worker = threading.Thread(target=wake_often, daemon=True)
    worker.start()
    print(worker.native_id, flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def brief_waker() -> Iterator[tuple[int, int]]:
    """(pid, tid of the waking thread) of a running BRIEF_WAKER process."""
    proc = subprocess.Popen(
        [sys.executable, "-c", BRIEF_WAKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    running = Running(proc)
    try:
        yield proc.pid, int(proc.stdout.readline())
    finally:
        running.stop()


def test_thread_waking_briefly_but_often_has_nonzero_cpu_pct(brief_waker):
    pid, tid = brief_waker
    ctx = Context(window_s=0.5, pids={pid}, ebpf="off")
    graph = collect_snapshot(ctx, [MetricsCollector()])
    thread = graph.node(ids.thread(tid))
    assert thread.vol_switches_per_s > 50  # it really did wake up often in the window
    assert thread.cpu_pct is not None and 0 < thread.cpu_pct < 50
    assert graph.node(ids.process(pid)).cpu_pct > 0


# exact figures: two hand-made samples 2 s apart, emitted as the collector does


def _thread(pid: int, ticks_s: float, run_s: float | None) -> ThreadSample:
    return ThreadSample(pid, ticks_s, 0, "S", 0.0, (0, 0), run_s)


def _emit(first: dict[int, ThreadSample], last: dict[int, ThreadSample],
          process_ticks_s: tuple[float, float]) -> Graph:  # fmt: skip
    def sample(threads: dict[int, ThreadSample], ticks_s: float) -> MetricsSample:
        process = ProcessSample(1, ticks_s, 0, None, None)
        return MetricsSample(HostSample(), {100: process}, threads, {})

    graph = Graph()
    before, after = (sample(t, s) for t, s in zip((first, last), process_ticks_s, strict=True))
    MetricsCollector().emit(graph, Context(), before, after, 2.0)
    return graph


def test_thread_and_process_cpu_pct_use_schedstat_run_time():
    # ticks did not move; schedstat says 40 ms and 10 ms of run time over 2 s
    graph = _emit(
        {100: _thread(100, 1.0, 1.0), 101: _thread(100, 0.5, 0.5)},
        {100: _thread(100, 1.0, 1.04), 101: _thread(100, 0.5, 0.51)},
        (1.5, 1.5),
    )
    assert graph.node(ids.thread(100)).cpu_pct == pytest.approx(2.0)
    assert graph.node(ids.thread(101)).cpu_pct == pytest.approx(0.5)
    assert graph.node(ids.process(100)).cpu_pct == pytest.approx(2.5)


def test_ticks_are_the_fallback_without_schedstat():
    graph = _emit({100: _thread(100, 1.0, None)}, {100: _thread(100, 1.2, None)}, (1.0, 1.2))
    assert graph.node(ids.thread(100)).cpu_pct == pytest.approx(10.0)
    assert graph.node(ids.process(100)).cpu_pct == pytest.approx(10.0)


def test_process_cpu_pct_keeps_the_time_of_a_thread_that_exited_in_the_window():
    # thread 101 ran 0.4 s and exited: only the process's ticks still count it
    graph = _emit(
        {100: _thread(100, 1.0, 1.0), 101: _thread(100, 0.0, 0.0)},
        {100: _thread(100, 1.2, 1.2)},
        (1.0, 1.6),
    )
    assert graph.node(ids.process(100)).cpu_pct == pytest.approx(30.0)


def test_process_cpu_pct_keeps_threads_born_and_gone_inside_the_window():
    # the surviving thread ran 0.2 s; the process's ticks grew by 1.2 s
    graph = _emit({100: _thread(100, 1.0, 1.0)}, {100: _thread(100, 1.2, 1.2)}, (1.0, 2.2))
    assert graph.node(ids.process(100)).cpu_pct == pytest.approx(60.0)
