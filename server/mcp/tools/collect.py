"""wp_collect: a snapshot of the host the server runs on, collected in a worker thread with
progress per collector, cancellable; an identical call joins the running one."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult
from pydantic import Field
from wp_mcp.graph.errors import UserError

from ..state import ServerState
from . import WRITES_STORE, one_line, tool
from .snapshots import stored_overview

if TYPE_CHECKING:
    from wp_mcp.graph.graph import Graph

log = logging.getLogger(__name__)

CANCEL_GRACE_S = 30.0  # how long a cancelled collection may take to close its collectors


@tool(
    name="wp_collect",
    title="Collect a snapshot of this host",
    annotations=WRITES_STORE,
    description=(
        "Collect a topology snapshot of the host the server runs on (processes, threads, "
        "sockets/IPC, NUMA, devices, metrics over window_s seconds, eBPF when usable) and "
        "store it. Reports progress per collector; cancellable. One collection runs at a "
        "time: a call with the same arguments as the running one joins it (same snapshot "
        "id), others wait for it. Returns the snapshot id, collector coverage and a short "
        "overview."
    ),
)
async def wp_collect(
    state: ServerState,
    ctx: Context,
    window_s: Annotated[float, Field(ge=0, le=60, description="metrics window")] = 3.0,
    ebpf: Literal["auto", "on", "off"] = "auto",
    pids: Annotated[
        list[int] | None, Field(description="only these processes and their families")
    ] = None,
    label: Annotated[str | None, Field(max_length=200)] = None,
    cluster: Annotated[
        str | None,
        Field(max_length=300, description="ray[:ADDRESS]: every node of a Ray cluster"),
    ] = None,
) -> CallToolResult:
    arguments = (window_s, ebpf, tuple(sorted(set(pids))) if pids else None, label, cluster)
    key = (id(state), arguments)  # the state lives as long as this call: its id is unique
    running = _COLLECTIONS_IN_FLIGHT
    if key in running:
        return await _join(running[key], ctx)
    shared = running[key] = _SharedCollection(time.time())
    try:
        shared.result = await _collect(state, ctx, window_s, ebpf, pids, label, cluster)
        return shared.result
    except BaseException as exc:
        shared.error = exc
        raise
    finally:
        del running[key]
        shared.finished.set()


@dataclass
class _SharedCollection:
    """A running wp_collect that identical calls join instead of collecting again."""

    started_at: float  # wall clock, shown to the callers that join or wait
    finished: anyio.Event = field(default_factory=anyio.Event)
    result: CallToolResult | None = None
    error: BaseException | None = None


# Collections running now, by server state and arguments (an identical call joins one).
_COLLECTIONS_IN_FLIGHT: dict[tuple, _SharedCollection] = {}
JOIN_REPORT_S = 2.0  # how often a joined call tells its client it is still waiting


async def _join(shared: _SharedCollection, ctx: Context) -> CallToolResult:
    """Wait for an identical running collection and answer with its snapshot.

    Cancelling this call stops only the wait: the collection belongs to the call that
    started it.
    """
    started = time.strftime("%H:%M:%S", time.localtime(shared.started_at))
    for step in itertools.count(1):
        message = f"joined the identical collection started at {started}; waiting for it"
        try:
            await ctx.report_progress(step, None, message)
        except Exception:  # a gone client must not fail the wait
            log.debug("progress not delivered: %s", message)
        with anyio.move_on_after(JOIN_REPORT_S):
            await shared.finished.wait()
        if shared.finished.is_set():
            break
    if shared.result is not None:
        return shared.result
    if isinstance(shared.error, UserError | ToolError):
        raise shared.error  # the same answer as the call it joined (e.g. eBPF unusable)
    raise ToolError(
        f"the identical collection started at {started} that this call joined was cancelled "
        "or failed; nothing stored: call wp_collect again"
    )


async def _collect(
    state: ServerState,
    ctx: Context,
    window_s: float,
    ebpf: Literal["auto", "on", "off"],
    pids: list[int] | None,
    label: str | None,
    cluster: str | None = None,
) -> CallToolResult:
    """Collect in a worker thread; forward progress; on cancellation stop the collectors.

    The event loop stays free, so other calls are answered during the window. When the
    client cancels, ``cancel`` is set and we wait (shielded) until the orchestrator has
    closed every collector, so no thread or BPF program outlives the request.
    """
    from wp_mcp.collectors import collect_snapshot
    from wp_mcp.collectors.base import Context as CollectContext
    from wp_mcp.collectors.ebpf.compiled import keep_compiled

    keep_compiled()  # a server collects again: its eBPF programs are compiled once
    collect: Callable[[CollectContext], Graph] = collect_snapshot
    if cluster:  # every node of a cluster, merged (docs/clusters.md)
        from wp_mcp.collectors.cluster.on_ray import cluster_collector

        if pids:
            raise UserError("pids select processes of one host: leave them out with cluster")
        collect = cluster_collector(cluster)
    missing = sorted(pid for pid in pids or () if not os.path.exists(f"/proc/{pid}"))
    if missing:
        raise UserError(
            f"no such process: {', '.join(map(str, missing))}; leave pids out to collect "
            "every process, or find pids with wp_search in a recent snapshot"
        )
    done = threading.Event()
    events = iter(range(1, 1_000_000))
    # Collector threads report concurrently; progress values must reach the client in order.
    in_order = threading.Lock()

    def progress(collector: str, phase: str, detail: str) -> None:
        message = f"{one_line(collector)}: {phase}" + (f" ({one_line(detail)})" if detail else "")
        with in_order:
            try:
                anyio.from_thread.run(ctx.report_progress, next(events), None, message)
            except Exception:  # a gone client must not fail the collection
                log.debug("progress not delivered: %s", message)

    cctx = CollectContext(
        window_s=window_s, ebpf=ebpf, pids=set(pids) if pids else None, progress=progress
    )

    def work() -> tuple[str, Any]:
        try:
            graph = collect(cctx)
            if cctx.cancel.is_set() or getattr(graph.meta, "cancelled", False):
                return "", graph
            return state.put(graph, label), graph
        finally:
            done.set()

    try:
        snapshot_id, graph = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cctx.cancel.set()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(done.wait, CANCEL_GRACE_S)
        raise
    if not snapshot_id:
        raise ToolError("collection cancelled; nothing stored")
    return stored_overview(state, snapshot_id, graph, "collected")
