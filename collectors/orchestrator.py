"""Runs a collection: probe, open the window, collect, merge, record what happened.

``collect_snapshot`` is the one entry point (the CLI's ``collect`` and the MCP server's
``wp_collect`` both call it). The steps, for the collectors given or those of the registry:

1. probe each collector; unusable ones are recorded ``skipped`` with the probe's reason
   (``ebpf="on"`` turns a skipped eBPF collector into an error, ``"off"`` leaves it out);
2. ``begin`` on every usable one, then wait ``ctx.window_s`` seconds (cancellable);
3. collectors without ``after`` run concurrently, each into its own ``Graph`` with its own
   timeout; the rest then run one by one, in dependency order, on the merged graph;
4. edges whose ends no collector produced are dropped and their collector marked
   ``partial``; with a pid filter, sockets/pipes/shm nobody in scope holds are dropped at
   the end;
5. ``close`` always runs on every collector that was set up.

Each collector's status (ok / partial / skipped / failed / cancelled, reason, duration,
details) lands in ``graph.meta.collectors``, capabilities in ``graph.meta.capabilities``.
Cancellation (``ctx.cancel``) stops waiting at once, asks the running collectors to stop,
marks what did not finish ``cancelled`` and returns the partial graph with
``meta.cancelled = True``. Progress goes to ``ctx.progress(collector, phase, detail)``.

One collection at a time per process: bcc (LLVM, libbcc's module objects) and some kernel
interfaces the collectors drive are not reentrant, and parallel collections crashed the
MCP server in libbcc. A second ``collect_snapshot`` waits for the running one (reporting
``collection: waiting for the collection started at … to finish`` every few seconds) and
stops waiting when its own ``ctx.cancel`` is set, without touching the running one. The
lock is released only after every collector of the running collection was closed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from wp_mcp.graph import CollectorStatus, Graph, Node, UserError, ids
from wp_mcp.graph.gcpause import cyclic_gc_paused

from wp_mcp import __version__

from .base import Cancelled, Collector, Context, Outcome
from .registry import default_collectors
from .taskstat import read_small, read_text

log = logging.getLogger(__name__)

SHARED_KINDS = ("socket", "pipe", "shm", "mqueue")
_STOP_GRACE_S = 1.0  # how long a timed-out or cancelled collector gets to notice
_WAIT_REPORT_S = 2.0  # how often a waiting collection says it is still waiting
_WAIT_SLICE_S = 0.05  # how soon a waiting collection notices it was cancelled

_collection_lock = threading.Lock()  # one collection at a time in this process
_running_since: float | None = None  # wall-clock start of the collection holding the lock


@dataclass
class _Run:
    """One collector's part in a collection."""

    collector: Collector
    ctx: Context
    status: CollectorStatus | None = None
    graph: Graph | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.collector.name

    @property
    def collected(self) -> Graph:
        """The collector's graph: only runs that have one are merged."""
        assert self.graph is not None
        return self.graph

    def finish(self, status: str, reason: str | None = None, details: dict | None = None) -> None:
        self.status = CollectorStatus(
            name=self.name,
            status=status,
            reason=reason,
            duration_s=round(time.monotonic() - self.started, 4),
            **(details or {}),
        )


def collect_snapshot(
    ctx: Context | None = None, collectors: list[Collector] | None = None
) -> Graph:
    """Collect a snapshot of this host (see the module docstring)."""
    ctx = ctx or Context()
    try:
        with _one_collection_at_a_time(ctx):
            return _collect_snapshot(ctx, collectors)
    except Cancelled:  # cancelled while waiting for another collection: nothing collected
        graph = Graph()
        graph.meta.cancelled = True  # type: ignore[attr-defined]
        return graph


@contextmanager
def _one_collection_at_a_time(ctx: Context) -> Iterator[None]:
    """Hold the process-wide collection lock; wait (cancellably, reporting) while it is held."""
    global _running_since
    next_report = time.monotonic()
    while not _collection_lock.acquire(timeout=_WAIT_SLICE_S):
        ctx.check_cancelled()
        if time.monotonic() >= next_report:
            next_report = time.monotonic() + _WAIT_REPORT_S
            since = _running_since
            started = time.strftime("%H:%M:%S", time.localtime(since)) if since else "?"
            ctx.report("collection", f"waiting for the collection started at {started} to finish")
    try:
        _running_since = time.time()
        yield
    finally:
        _running_since = None
        _collection_lock.release()


def _collect_snapshot(ctx: Context, collectors: list[Collector] | None) -> Graph:
    if collectors is None:
        collectors = default_collectors(ctx)
    if ctx.ebpf == "off":
        collectors = [c for c in collectors if c.tier != "T2"]
    graph = Graph()
    graph.meta.started_at = time.time()
    graph.meta.tool_version = __version__
    graph.meta.origin = "live"
    # the collecting process: findings about the job leave it out (converters.facts.profiler)
    graph.meta.profiler_pid = os.getpid()  # type: ignore[attr-defined]
    ctx.capabilities.update(probe_capabilities(ctx))
    runs = [_Run(c, _own_context(ctx)) for c in collectors]
    try:
        usable = _probe(runs, ctx)
        _begin(usable, ctx)
        window_started = time.monotonic()
        ctx.report("window", "start", f"{ctx.window_s:g}s")
        if ctx.window_s > 0 and ctx.cancel.wait(ctx.window_s):
            raise Cancelled()
        graph.meta.window_s = round(time.monotonic() - window_started, 3) if ctx.window_s > 0 else 0
        with cyclic_gc_paused():
            graph = _collect(usable, ctx, graph)
    except Cancelled:
        graph.meta.cancelled = True  # type: ignore[attr-defined]
        for run in runs:
            if run.status is None:
                run.finish("cancelled", "collection was cancelled")
    finally:
        for run in runs:
            _close(run)
    _add_host(graph, ctx)
    graph.meta.collectors = [run.status for run in runs if run.status is not None]
    graph.meta.capabilities.update(ctx.capabilities)
    if not getattr(graph.meta, "cancelled", False):  # after a cancel, nothing more is said
        ctx.report("snapshot", "done", f"{len(graph.nodes)} nodes, {graph.edge_count} edges")
    return graph


# --------------------------------------------------------------------------- steps


def _own_context(ctx: Context) -> Context:
    """A collector's view of the context: its own cancel flag (set on timeout or when the
    whole collection is cancelled), everything else shared."""
    return dataclasses.replace(ctx, cancel=threading.Event())


def _probe(runs: list[_Run], ctx: Context) -> list[_Run]:
    usable = []
    for run in runs:
        ctx.check_cancelled()
        run.started = time.monotonic()
        try:
            reason = run.collector.probe(run.ctx)
        except Exception as exc:  # a probe that breaks means the source is unusable
            reason = f"probe failed: {exc}"
        if reason is None:
            usable.append(run)
            continue
        if run.collector.tier == "T2" and ctx.ebpf == "on":
            raise UserError(f"eBPF was required (--ebpf on) but is not usable: {reason}")
        run.finish("skipped", reason)
        ctx.report(run.name, "skipped", reason)
    return usable


def _begin(usable: list[_Run], ctx: Context) -> None:
    """Every usable collector begins at once, each in a thread of its own (the eBPF tier
    compiles for seconds while the polling collectors take their first readings); the window
    opens when all have. A cancel stops the wait at once: each collector is asked to stop
    (the eBPF tier then attaches nothing) and gets a moment to notice before it is closed."""
    errors: dict[str, BaseException] = {}
    threads = {}
    for run in usable:
        run.started = time.monotonic()
        threads[run.name] = threading.Thread(target=_begin_one, args=(run, errors),
                                             name=f"wp-mcp-begin-{run.name}", daemon=True)  # fmt: skip
        threads[run.name].start()
    said: set[str] = set()
    while any(thread.is_alive() for thread in threads.values()):
        if ctx.cancel.wait(_WAIT_SLICE_S):
            for run in usable:
                run.ctx.cancel.set()
            for thread in threads.values():
                thread.join(_STOP_GRACE_S)
            raise Cancelled()
        _say_what_is_awaited(usable, threads, said, ctx)
    for run in list(usable):
        exc = errors.get(run.name)
        if exc is None:
            continue
        if isinstance(exc, Cancelled):
            raise exc
        if run.collector.tier == "T2" and ctx.ebpf == "on":
            # required eBPF that cannot start is an error, not a degraded snapshot
            raise UserError(f"eBPF was required (--ebpf on) but failed to start: {exc}") from None
        log.warning("collector %s failed to begin", run.name, exc_info=exc)
        run.finish("failed", f"begin failed: {exc}")
        usable.remove(run)


def _begin_one(run: _Run, errors: dict[str, BaseException]) -> None:
    try:
        run.collector.begin(run.ctx)
    except Exception as exc:  # handed to the collection's thread, which decides
        errors[run.name] = exc


def _say_what_is_awaited(
    usable: list[_Run], threads: dict[str, threading.Thread], said: set[str], ctx: Context
) -> None:
    """Once the collectors have been beginning for a moment, say (once each) which ones the
    window waits for (their own progress says what they do: the eBPF tier compiles)."""
    waiting = [run.name for run in usable if threads[run.name].is_alive()]
    if not waiting or said.issuperset(waiting):
        return
    if time.monotonic() - min(run.started for run in usable) >= _WAIT_REPORT_S / 4:
        said.update(waiting)
        ctx.report("window", "waiting", f"for {', '.join(waiting)} to begin")


def _collect(usable: list[_Run], ctx: Context, graph: Graph) -> Graph:
    """Run every collector; returns the merged graph (carrying ``graph``'s metadata)."""
    names = {run.name for run in usable}
    first = [run for run in usable if not set(run.collector.after) & names]
    later = _dependency_order([run for run in usable if run not in first], names)
    for run in first:
        run.graph = Graph()
    _run_concurrently(first, ctx)
    graph = _merge(graph, [run for run in first if run.graph is not None], ctx)
    for run in later:
        run.graph = graph
        _run_concurrently([run], ctx)
    if ctx.pids:
        _drop_unheld_shared_objects(graph)
    return graph


def _dependency_order(runs: list[_Run], names: set[str]) -> list[_Run]:
    """Order collectors so each runs after those it names (cycles run in list order)."""
    done = names - {run.name for run in runs}
    ordered: list[_Run] = []
    pending = list(runs)
    while pending:
        ready = [r for r in pending if set(r.collector.after) & names <= done | {r.name}]
        for run in ready or pending[:1]:
            ordered.append(run)
            done.add(run.name)
            pending.remove(run)
    return ordered


def _run_concurrently(runs: list[_Run], ctx: Context) -> None:
    """Run ``collect`` of each in a thread; enforce timeouts and cancellation."""
    threads = {}
    for run in runs:
        run.started = time.monotonic()
        ctx.report(run.name, "collect", "")
        thread = threading.Thread(target=_collect_one, args=(run,), name=f"wp-mcp-{run.name}",
                                  daemon=True)  # fmt: skip
        threads[run.name] = thread
        thread.start()
    for run in runs:
        thread = threads[run.name]
        deadline = run.started + run.collector.timeout_s
        while thread.is_alive():
            if ctx.cancel.wait(0.005 if len(runs) == 1 else 0.02):
                for other in runs:
                    other.ctx.cancel.set()
                for other in runs:
                    threads[other.name].join(_STOP_GRACE_S)
                raise Cancelled()
            thread.join(0.01)
            if thread.is_alive() and time.monotonic() > deadline:
                run.ctx.cancel.set()
                thread.join(_STOP_GRACE_S)
                run.graph = None  # whatever it half-wrote into its own graph is discarded
                run.finish("failed", f"timed out after {run.collector.timeout_s:g}s")
                break


def _collect_one(run: _Run) -> None:
    assert run.graph is not None
    try:
        outcome = run.collector.collect(run.graph, run.ctx)
    except Cancelled:
        if run.status is None:
            run.finish("cancelled", "collection was cancelled")
        return
    except Exception as exc:
        log.warning("collector %s failed", run.name, exc_info=True)
        if run.status is None:
            run.graph = None
            run.finish("failed", f"{type(exc).__name__}: {exc}")
        return
    if run.status is None:  # a timed-out run already has its status
        outcome = outcome or Outcome()
        run.finish(outcome.status, outcome.reason, outcome.details)
        run.ctx.report(run.name, "done", outcome.status)


def _close(run: _Run) -> None:
    try:
        run.collector.close()
    except Exception:
        log.warning("collector %s failed to close", run.name, exc_info=True)


# --------------------------------------------------------------------------- merging


def _merge(graph: Graph, runs: list[_Run], ctx: Context) -> Graph:
    """Merge the collectors' own graphs; drop edges to nodes nobody produced.

    The biggest graph (procfs's: every process and thread) becomes the result as it is,
    when none of its edges dangles, and the others merge into it: copying ten thousand
    nodes and edges again would cost more than collecting them did. It takes over the
    metadata of ``graph``.
    """
    node_ids: set[str] = set()
    for run in runs:
        node_ids.update(run.collected.nodes)
    base = _pick_base(runs, node_ids)
    if base is not None:
        _take_meta(graph, base.collected)
        merged, rest = base.collected, [run for run in runs if run is not base]
    else:
        merged, rest = graph, runs
    _merge_nodes(merged, rest, node_ids)
    for run in rest:
        dropped = 0
        for edge in run.collected.edges():
            if edge.src in node_ids and edge.dst in node_ids:
                merged.add_edge(edge, strict=False)
            else:
                dropped += 1
        if dropped and run.status is not None and run.status.status == "ok":
            run.status.status = "partial"
            run.status.reason = f"{dropped} edges dropped: their other end was not collected"
        _take_meta_facts(merged, run.collected)
    return merged


def _pick_base(runs: list[_Run], node_ids: set[str]) -> _Run | None:
    """The biggest graph, unless one of its edges dangles (then nothing is kept as is)."""
    if not runs:
        return None
    biggest = max(runs, key=lambda run: len(run.collected.nodes))
    if all(e.src in node_ids and e.dst in node_ids for e in biggest.collected.edges()):
        return biggest
    return None


def _take_meta(meta_from: Graph, target: Graph) -> None:
    """``target`` keeps its own hosts and capabilities, and takes ``meta_from``'s metadata."""
    own = Graph()
    own.meta = target.meta
    target.meta = meta_from.meta
    _take_meta_facts(target, own)


def _take_meta_facts(target: Graph, source: Graph) -> None:
    for host in source.meta.hosts:
        if host not in target.meta.hosts:
            target.meta.hosts.append(host)
    for name, value in source.meta.capabilities.items():
        target.meta.capabilities.setdefault(name, value)


def _merge_nodes(graph: Graph, runs: list[_Run], node_ids: set[str]) -> None:
    """Add every node; where several collectors describe one node, the richest description
    goes in first and the others merge into it (per attribute, the last merged wins).

    Merging copies attribute by attribute, so merging a 3-attribute socket stub from procfs
    into sockets' 20-attribute node is cheap, and the other way round is not (thousands of
    sockets on a busy host).
    """
    instances: dict[str, list[Node]] = {}
    for run in runs:
        for node_id, node in run.collected.nodes.items():
            if node_id in node_ids:
                instances.setdefault(node_id, []).append(node)
    poorer: list[Node] = []
    for nodes in instances.values():
        richest = nodes[0] if len(nodes) == 1 else max(nodes, key=_richness)
        graph.add_node(richest)
        poorer.extend(n for n in nodes if n is not richest)
    for node in poorer:
        graph.add_node(node)


def _richness(node: Node) -> int:
    return len(node.__dict__)


def _drop_unheld_shared_objects(graph: Graph) -> None:
    """With a pid filter: sockets, pipes and shm that no process in scope holds."""
    for kind in SHARED_KINDS:
        for node in graph.of_kind(kind):
            if not graph.in_edges(node.id, "holds"):
                graph.remove_node(node.id)


# --------------------------------------------------------------------------- host facts


def probe_capabilities(ctx: Context) -> dict[str, object]:
    """What this collection may see: privileges, kernel features (meta.capabilities)."""
    caps: dict[str, object] = {
        "root": os.geteuid() == 0,
        "kernel": platform.release(),
        "btf": os.path.exists("/sys/kernel/btf/vmlinux"),
        "ebpf_mode": ctx.ebpf,
        "window_s": ctx.window_s,
        "redacted_cmdlines": ctx.redact,
    }
    effective = _effective_capabilities(ctx)
    if effective is not None:
        # CAP_SYS_ADMIN (21) enters other network namespaces; CAP_SYS_PTRACE (19) reads
        # other users' fds; CAP_BPF (39) and CAP_PERFMON (38) load eBPF programs
        caps["cap_sys_admin"] = bool(effective >> 21 & 1)
        caps["cap_sys_ptrace"] = bool(effective >> 19 & 1)
        caps["cap_bpf"] = bool(effective >> 39 & 1)
        caps["cap_perfmon"] = bool(effective >> 38 & 1)
    if ctx.pids:
        caps["pid_filter"] = sorted(ctx.pids)
    return caps


def _effective_capabilities(ctx: Context) -> int | None:
    for line in (read_small(ctx.proc_root / "self" / "status") or "").splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return None


def _hypervisor(ctx: Context) -> str | None:
    """The hypervisor's name when this host is a virtual machine (rules lower their confidence
    there: steal, vNUMA and emulated PCI topology blur what we measure), else None."""
    cpuinfo = read_text(ctx.proc_root / "cpuinfo")
    if cpuinfo is None:
        return None
    flags = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
    if " hypervisor" not in flags:
        return None
    for name in ("sys_vendor", "product_name"):
        vendor = (read_text(ctx.sys_root / "class/dmi/id" / name) or "").strip()
        if vendor:
            return vendor
    return "unknown hypervisor"


def _add_host(graph: Graph, ctx: Context) -> None:
    name = socket.gethostname()
    uname = platform.uname()
    graph.add("host", ids.host(), source="orchestrator", hostname=name, kernel=uname.release,
              arch=uname.machine, cpus=os.cpu_count())  # fmt: skip
    hypervisor = _hypervisor(ctx)
    if hypervisor is not None:
        graph.add("host", ids.host(), source="orchestrator", virtualized=hypervisor)
    if name not in graph.meta.hosts:
        graph.meta.hosts.insert(0, name)
