"""The orchestrator's contract, with small collectors written for the test: statuses,
ordering, timeouts, failures, cancellation, dangling edges, and close() always running."""

from __future__ import annotations

import threading
import time

import pytest
from wp_mcp.collectors import Collector, Context, Outcome, collect_snapshot, default_collectors
from wp_mcp.collectors.registry import COLLECTORS
from wp_mcp.graph import UserError


class Recorder(Collector):
    """Adds one process node; remembers what the orchestrator called."""

    def __init__(self, name: str, pid: int, after: tuple[str, ...] = (), tier: str = "T0"):
        self.name, self.after, self.tier = name, after, tier  # type: ignore[misc]
        self.pid = pid
        self.calls: list[str] = []
        self.saw: set[str] = set()

    def begin(self, ctx):
        self.calls.append("begin")

    def collect(self, graph, ctx):
        self.calls.append("collect")
        self.saw = set(graph.nodes)
        graph.add("process", f"proc:{self.pid}", pid=self.pid)
        return Outcome("ok", None, {"added": 1})

    def close(self):
        self.calls.append("close")


class Skipping(Recorder):
    def probe(self, ctx):
        return "no such source here"


class Failing(Recorder):
    def collect(self, graph, ctx):
        raise RuntimeError("parser broke")


class Slow(Recorder):
    timeout_s = 0.3

    def collect(self, graph, ctx):
        while not ctx.cancel.is_set():
            time.sleep(0.01)
        ctx.check_cancelled()


class Dangling(Recorder):
    def collect(self, graph, ctx):
        graph.add("process", "proc:1", pid=1)
        graph.add("process", "proc:2", pid=2)
        graph.link("parent_of", "proc:1", "proc:2")
        graph.add_edge({"src": "proc:1", "dst": "thr:999", "kind": "has_thread"}, strict=False)
        return Outcome()


def statuses(graph):
    return {s.name: s for s in graph.meta.collectors}


def test_each_collector_gets_a_status_with_duration_and_details():
    a, b = Recorder("a", 10), Skipping("b", 11)
    graph = collect_snapshot(Context(window_s=0), [a, b])
    st = statuses(graph)
    assert st["a"].status == "ok" and st["a"].duration_s >= 0 and st["a"].added == 1
    assert st["b"].status == "skipped" and st["b"].reason == "no such source here"
    assert "proc:10" in graph and "proc:11" not in graph
    assert a.calls == ["begin", "collect", "close"] and b.calls == ["close"]
    assert graph.meta.capabilities["root"] in (True, False) and graph.meta.origin == "live"
    assert graph.node("host").hostname


def test_a_collector_with_after_runs_later_and_reads_the_merged_graph():
    late = Recorder("late", 3, after=("a", "b", "not-in-this-run"))
    graph = collect_snapshot(Context(window_s=0), [late, Recorder("a", 1), Recorder("b", 2)])
    assert {"proc:1", "proc:2"} <= late.saw
    assert "proc:3" in graph


def test_failure_and_timeout_stay_local_to_their_collector():
    ok, bad, slow = Recorder("ok", 1), Failing("bad", 2), Slow("slow", 3)
    graph = collect_snapshot(Context(window_s=0), [ok, bad, slow])
    st = statuses(graph)
    assert st["ok"].status == "ok"
    assert st["bad"].status == "failed" and "parser broke" in st["bad"].reason
    assert st["slow"].status == "failed" and "timed out" in st["slow"].reason
    assert "close" in bad.calls and "close" in slow.calls


def test_edges_to_missing_nodes_are_dropped_and_reported_partial():
    graph = collect_snapshot(Context(window_s=0), [Dangling("d", 0)])
    assert statuses(graph)["d"].status == "partial"
    assert "1 edges dropped" in statuses(graph)["d"].reason
    assert graph.edge_kinds() == {"parent_of": 1}


def test_cancellation_during_the_window_marks_everything_cancelled():
    ctx = Context(window_s=30)
    a = Recorder("a", 1)
    threading.Timer(0.2, ctx.cancel.set).start()
    started = time.monotonic()
    graph = collect_snapshot(ctx, [a])
    assert time.monotonic() - started < 5
    assert graph.meta.cancelled is True
    assert statuses(graph)["a"].status == "cancelled"
    assert a.calls == ["begin", "close"]


def test_ebpf_off_leaves_t2_out_and_on_requires_it():
    t2 = Skipping("ebpf", 5, tier="T2")
    graph = collect_snapshot(Context(window_s=0, ebpf="off"), [Recorder("a", 1), t2])
    assert "ebpf" not in statuses(graph)
    with pytest.raises(UserError, match="no such source here"):
        collect_snapshot(Context(window_s=0, ebpf="on"), [Skipping("ebpf", 5, tier="T2")])


def test_default_collectors_follow_the_registry():
    names = [c.name for c in default_collectors()]
    assert len(names) == len(COLLECTORS)
    assert {"procfs", "sockets", "ipc", "containers"} <= set(names)


def test_the_cyclic_gc_is_paused_only_while_collecting():
    import gc

    class SeesGc(Recorder):
        def collect(self, graph, ctx):
            self.saw_gc = gc.isenabled()
            return super().collect(graph, ctx)

    probe = SeesGc("g", 1)
    assert gc.isenabled()
    collect_snapshot(Context(window_s=0), [probe])
    assert probe.saw_gc is False and gc.isenabled()
    gc.disable()  # a caller's own choice is left alone
    try:
        collect_snapshot(Context(window_s=0), [SeesGc("g", 1)])
        assert not gc.isenabled()
    finally:
        gc.enable()


class Gate(Recorder):
    """Collects only once ``release`` is set; ``entered`` says it got that far."""

    def __init__(self, name: str, pid: int) -> None:
        super().__init__(name, pid)
        self.entered, self.release = threading.Event(), threading.Event()

    def collect(self, graph, ctx):
        self.entered.set()
        self.release.wait(30)
        return super().collect(graph, ctx)


def test_one_collection_at_a_time_and_a_cancelled_waiter_leaves_the_running_one_alone():
    running = Gate("running", 10)
    first: dict = {}
    worker = threading.Thread(
        target=lambda: first.update(graph=collect_snapshot(Context(window_s=0), [running]))
    )
    worker.start()
    assert running.entered.wait(30)
    waited = threading.Event()
    waiting_ctx = Context(window_s=0)
    waiting_ctx.progress = lambda name, phase, detail: waited.set() if "waiting" in phase else 0
    waiter = Recorder("waiter", 20)
    second: dict = {}
    other = threading.Thread(
        target=lambda: second.update(graph=collect_snapshot(waiting_ctx, [waiter]))
    )
    other.start()
    assert waited.wait(30)  # "waiting for the collection started at … to finish"
    waiting_ctx.cancel.set()
    other.join(30)
    assert second["graph"].meta.cancelled and waiter.calls == []  # never started
    running.release.set()
    worker.join(30)
    assert running.calls == ["begin", "collect", "close"]
    assert not getattr(first["graph"].meta, "cancelled", False)
    assert "proc:10" in first["graph"]
    assert "proc:30" in collect_snapshot(Context(window_s=0), [Recorder("next", 30)])


class WaitsForAnother(Recorder):
    """Begins only once ``ready`` is set (by another collector's begin), or its own cancel."""

    def __init__(self, name: str, pid: int, ready: threading.Event):
        super().__init__(name, pid)
        self.ready = ready

    def begin(self, ctx):
        while not self.ready.wait(0.01):
            ctx.check_cancelled()
        self.calls.append("begin")


class Signals(Recorder):
    def __init__(self, name: str, pid: int, ready: threading.Event, delay_s: float = 0.0):
        super().__init__(name, pid)
        self.ready, self.delay_s = ready, delay_s

    def begin(self, ctx):
        time.sleep(self.delay_s)
        self.ready.set()
        self.calls.append("begin")


def test_collectors_begin_at_once_and_the_window_says_what_it_waits_for():
    """A collector's long begin (the eBPF tier compiling) runs beside the others' (the
    polling collectors' first readings): the first here can only begin once the second has."""
    ready = threading.Event()
    slow, fast = WaitsForAnother("slow", 11, ready), Signals("fast", 12, ready, delay_s=0.8)
    said: list[tuple[str, str, str]] = []
    ctx = Context(window_s=0.0, progress=lambda *message: said.append(message))
    graph = collect_snapshot(ctx, [slow, fast])
    assert slow.calls == fast.calls == ["begin", "collect", "close"]
    assert {"proc:11", "proc:12"} <= set(graph.nodes)
    waiting = [m for m in said if m[:2] == ("window", "waiting")]
    assert waiting and "slow" in waiting[0][2]  # (and "fast" while it still begins)
    assert said.index(waiting[0]) < said.index(("window", "start", "0s"))


def test_a_cancel_while_collectors_begin_stops_at_once_and_says_nothing_more():
    never = threading.Event()
    stuck = WaitsForAnother("stuck", 13, never)
    said: list[tuple[str, str]] = []
    ctx = Context(window_s=600.0, progress=lambda name, phase, _detail: said.append((name, phase)))
    threading.Timer(1.0, ctx.cancel.set).start()  # while "stuck" begins
    graph = collect_snapshot(ctx, [stuck])
    assert graph.meta.cancelled is True
    assert stuck.calls == ["close"]  # it never began, and was closed
    assert ("window", "waiting") in said  # it said what it waited for
    assert ("window", "start") not in said  # the window never opened
    assert ("snapshot", "done") not in said  # and nothing was said after the cancel
