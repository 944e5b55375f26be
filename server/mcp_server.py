"""The MCP server: thin glue from MCP tools, resources and prompts to the shared functions.

Every tool calls the same functions the CLI uses (store, formats, converters, skills,
collectors) and returns compact text in ``content`` plus a small ``structuredContent``
(ids, counts, cursor; never a whole layer, since some clients show the model only that).
Anything a caller can fix comes back as an error result whose text says what to call
instead. Heavy modules are imported inside the tools, so the server answers its first
``tools/list`` quickly.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Completion, TextContent, ToolAnnotations
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic import Field, ValidationError
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import error_line, escape, excerpt
from wp_mcp.skills import SKILL_NAMES as SKILLS  # the registry only: no engine is loaded

from wp_mcp import __version__

from .mcp_app import PICTURE_APP_META, register_picture_app
from .mcp_state import ServerState
from .mcp_text import DIAGNOSE_PROMPT, INSTRUCTIONS, SKILL_PROMPT, page_text
from .mcp_watch import register_monitoring

if TYPE_CHECKING:
    from wp_mcp.graph.graph import Graph

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 4000  # mirror the converters' budgets (a test checks they agree)
HARD_MAX_TOKENS = 8000
MIN_MAX_TOKENS = 300
OVERVIEW_TOKENS = 600  # the summary that follows wp_collect / wp_open
DIFF_MAX_TOKENS = 2000  # findings first; the raw attribute changes page behind the cursor
CANCEL_GRACE_S = 30.0  # how long a cancelled collection may take to close its collectors


READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
WRITES_STORE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

Snapshot = Annotated[
    str, Field(description="snapshot id, unique id prefix, or 'latest' (see wp_snapshots)")
]
MaxTokens = Annotated[
    int, Field(ge=MIN_MAX_TOKENS, le=HARD_MAX_TOKENS, description="token budget of the answer")
]
Cursor = Annotated[
    str | None, Field(description="next_cursor of the previous answer, for the next page")
]


class WpServer(MCPServer):
    """MCPServer that rejects unknown tool arguments instead of silently ignoring them.

    A model that misspells ``max_tokens`` should learn it, not get a default-sized answer.
    """

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            valid = sorted(tool.parameters.get("properties", {}))
            unknown = sorted(set(arguments) - set(valid))
            if unknown:
                shown = ", ".join(excerpt(arg, 40) for arg in unknown[:10])
                raise ToolError(
                    f"{name}: unknown argument(s) {shown}; valid arguments: "
                    f"{', '.join(valid) or '(none)'}"
                )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_argument_error(name, exc.__cause__)) from None
            raise

    async def get_prompt(self, name: str, arguments: Any = None, context: Any = None) -> Any:
        if not self._prompt_manager.get_prompt(name):
            known = ", ".join(p.name for p in self._prompt_manager.list_prompts())
            raise MCPError(INVALID_PARAMS, f"unknown prompt {excerpt(name, 40)}; prompts: {known}")
        return await super().get_prompt(name, arguments, context)


def _argument_error(tool: str, exc: ValidationError) -> str:
    """Pydantic's report as one line per argument: which, what was wrong, what was given."""
    parts = []
    for error in exc.errors()[:4]:
        where = ".".join(str(part) for part in error.get("loc", ())) or "arguments"
        value = error.get("input")
        given = f"{type(value).__name__} {excerpt(str(value), 30)}"
        parts.append(f"{where}: {error.get('msg', 'invalid').lower()} (got {given})")
    return f"{tool}: bad argument {'; '.join(parts)}; tools/list gives each argument's schema"


def _result(text: str, **structured: Any) -> CallToolResult:
    small = {k: v for k, v in structured.items() if v is not None}
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=small or None
    )


def _user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Errors as tool results the model can act on.

    A UserError from the shared functions becomes its message as one bounded line (messages
    quote only excerpts of arguments; this is the guard for any that does not); anything else is a
    bug, reported briefly (details go to the log on stderr) so the model knows the server
    is still up.
    """

    def translate(exc: Exception) -> ToolError:
        if isinstance(exc, UserError):
            return ToolError(error_line(exc))
        log.exception("%s failed", fn.__name__)
        return ToolError(
            f"internal error in {fn.__name__} ({type(exc).__name__}); the server is still up: "
            "other calls work, and the server log on stderr has the details"
        )

    if inspect.iscoroutinefunction(fn):

        @wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except ToolError:
                raise
            except Exception as exc:
                raise translate(exc) from None

        return async_wrapper

    @wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ToolError:
            raise
        except Exception as exc:
            raise translate(exc) from None

    return sync_wrapper


def _page_result(page: Any, snapshot_id: str, hint: str) -> CallToolResult:
    """A converters Page as a tool result; an empty page says what to try instead."""
    text = page.text
    if page.total_items == 0 and hint:
        text = f"{text}\n(hint: {hint})"
    return _result(
        text,
        snapshot_id=snapshot_id,
        view=page.view,
        page=page.page,
        pages=page.pages,
        total_items=page.total_items,
        tokens=page.tokens,
        next_cursor=page.next_cursor,
    )


def build_server(state: ServerState | None = None) -> WpServer:
    """The wp-mcp MCP server over ``state`` (a fresh default state when None)."""
    state = state or ServerState()
    server = WpServer(
        name="wp-mcp",
        title="wp-mcp: host topology diagnosis",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    _register_tools(server, state)
    _register_resources(server, state)
    _register_prompts(server)
    _register_completions(server, state)
    register_monitoring(server, state)  # subscriptions, wp://findings, wp_events (mcp_watch)
    register_picture_app(server, state, _resource_errors)  # the ui:// page (mcp_app)
    return server


# --------------------------------------------------------------------------- shared logic


def _render(state: ServerState, ref: str, view: str, **kwargs: Any) -> tuple[Any, str]:
    """One page of a view of a stored snapshot: stored, or rendered and cached."""
    return state.render(ref, view, **kwargs)


def _coverage(graph: Any) -> tuple[str, dict[str, int]]:
    statuses = graph.meta.collectors
    counts = Counter(s.status for s in statuses)
    not_ok = [
        f"{_one_line(s.name)} {s.status}: {_one_line(s.reason)}"
        for s in statuses
        if s.status != "ok" and s.reason
    ]
    line = "coverage: " + (", ".join(f"{n} {st}" for st, n in sorted(counts.items())) or "n/a")
    if not_ok:
        line += "\n" + "\n".join(f"  {item}" for item in not_ok[:12])
    return line, dict(counts)


def _stored_overview(state: ServerState, snapshot_id: str, graph: Any, verb: str) -> CallToolResult:
    coverage, counts = _coverage(graph)
    text = (
        f"{verb} snapshot {snapshot_id} ({len(graph.nodes)} nodes, {graph.edge_count} edges)\n"
        f"{coverage}\n{_overview_summary(state, snapshot_id, graph)}\n"
        f"next: wp_layer view=<layer> snapshot={snapshot_id}, or wp_run_skill skill=all"
    )
    return _result(
        text,
        snapshot_id=snapshot_id,
        nodes=len(graph.nodes),
        edges=graph.edge_count,
        collectors=counts or None,
    )


# Up to this many nodes and edges the summary is rendered for wp_open/wp_collect's answer
# (tens of milliseconds); above it, building it (every layer's items) takes seconds, so the
# answer says where to read it once the background build has stored it.
OVERVIEW_RENDER_ELEMENTS = 5_000


def _overview_summary(state: ServerState, snapshot_id: str, graph: Any) -> str:
    """The snapshot's summary, stored or cheap to render; else where to read it soon."""
    from wp_mcp.converters.pages import stored_page
    from wp_mcp.converters.tokens import DEFAULT_MAX_TOKENS

    # the summary is one page of at most 300 tokens: the stored one is the one asked for
    stored = stored_page(state.store, snapshot_id, "summary", max_tokens=DEFAULT_MAX_TOKENS)
    if stored is not None:
        return stored.text
    if len(graph.nodes) + graph.edge_count <= OVERVIEW_RENDER_ELEMENTS:
        from wp_mcp.converters import render_view

        page = render_view(graph, "summary", max_tokens=OVERVIEW_TOKENS, snapshot_id=snapshot_id)
        return page.text
    return (
        f"summary: being built in the background (a graph this size takes seconds); read it "
        f"with wp_summary snapshot={snapshot_id}"
    )


# --------------------------------------------------------------------------- tool registry


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    annotations: ToolAnnotations
    handler: Callable[..., Any]  # handler(state, **arguments), sync or async
    meta: dict[str, Any] | None = None


TOOLS: list[ToolSpec] = []  # in the order tools/list gives them


def tool(
    *,
    name: str,
    title: str,
    description: str,
    annotations: ToolAnnotations,
    meta: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``handler(state, **arguments)`` as the MCP tool ``name``.

    The handler's parameters after ``state`` (and a ``ctx: Context`` one, which MCPServer
    fills in) are the tool's arguments: their annotations are its input schema.
    """

    def register(handler: Callable[..., Any]) -> Callable[..., Any]:
        TOOLS.append(ToolSpec(name, title, description, annotations, handler, meta))
        return handler

    return register


def _register_tools(server: WpServer, state: ServerState) -> None:
    for spec in TOOLS:
        server.add_tool(
            _user_errors(_bound(spec.handler, state)),
            name=spec.name,
            title=spec.title,
            description=spec.description,
            annotations=spec.annotations,
            meta=spec.meta,
        )


def _bound(handler: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    """``handler`` with ``state`` given, its signature (what MCPServer reads) without it."""
    signature = inspect.signature(handler, eval_str=True)
    arguments = list(signature.parameters.values())[1:]
    if inspect.iscoroutinefunction(handler):

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await handler(state, *args, **kwargs)

        bound: Any = call_async
    else:

        def call(*args: Any, **kwargs: Any) -> Any:
            return handler(state, *args, **kwargs)

        bound = call
    bound.__name__ = bound.__qualname__ = handler.__name__
    bound.__doc__ = handler.__doc__
    bound.__signature__ = signature.replace(parameters=arguments)
    bound.__annotations__ = {p.name: p.annotation for p in arguments}
    bound.__annotations__["return"] = signature.return_annotation
    return bound


# --------------------------------------------------------------------------- data tools


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


@tool(
    name="wp_open",
    title="Import a graph file",
    annotations=WRITES_STORE,
    description=(
        "Import a wp-graph (.json/.json.gz) or witty-profiler graph file, or one rank's "
        "PyTorch profiler trace (`to`: joined to that snapshot), into the store. "
        "Only files below the allowed roots (working directory, the store, --allow-dir) "
        "and below the size limit. Returns the snapshot id and a short overview."
    ),
)
def wp_open(
    state: ServerState,
    path: Annotated[str, Field(description="file path, absolute or relative to the cwd")],
    label: Annotated[str | None, Field(max_length=200)] = None,
    to: Annotated[str | None, Field(max_length=64, description="snapshot id a trace joins")] = None,
) -> CallToolResult:
    from wp_mcp.graph import trace
    from wp_mcp.graph.formats import load_any

    real = state.check_import_path(path)
    if to:
        ranks = trace.read_ranks([real], state.max_file_bytes)
        graph = trace.join_copy(state.store.get(to), ranks)
    else:
        graph = load_any(real, max_bytes=state.max_file_bytes)
    snapshot_id = state.put(graph, label or real.name)
    return _stored_overview(state, snapshot_id, graph, "imported")


@tool(
    name="wp_snapshots",
    title="List stored snapshots",
    annotations=READ_ONLY,
    description="List stored snapshots, newest first: id, time, label, origin, size.",
)
def wp_snapshots(
    state: ServerState, limit: Annotated[int, Field(ge=1, le=200)] = 20, cursor: Cursor = None
) -> CallToolResult:
    listing, counts = _snapshot_listing(state, limit)
    # labels and origins are free text: the listing is paged like any long answer
    page = page_text(listing, max_tokens=DEFAULT_MAX_TOKENS, cursor=cursor, again="wp_snapshots")
    return _result(page.text, **counts, next_cursor=page.next_cursor)


def _snapshot_listing(state: ServerState, limit: int) -> tuple[str, dict[str, Any]]:
    import time

    infos = sorted(state.store.list(), key=lambda s: s.created, reverse=True)
    if not infos:
        text = (
            "no snapshots stored (hint: call wp_collect to snapshot this host, or wp_open "
            "with a wp-graph or witty-profiler file)"
        )
        return text, {"total": 0}
    lines = [f"# {len(infos)} snapshots (newest first, showing {min(limit, len(infos))})"]
    lines.append("legend: id · created UTC · label · origin · hosts · nodes/edges")
    for info in infos[:limit]:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(info.created))
        hosts = ",".join(info.hosts) if info.hosts else "-"
        lines.append(
            f"{info.id} · {created} · {_one_line(info.label)} · {_one_line(info.origin)} · "
            f"{_one_line(hosts)} · {info.nodes}/{info.edges}"
        )
    if len(infos) > limit:
        lines.append(f"({len(infos) - limit} older; call wp_snapshots with a larger limit)")
    return "\n".join(lines), {"total": len(infos), "latest": infos[0].id}


def _one_line(value: Any) -> str:
    """A host-provided string on one line (labels and origins come from users and files)."""
    return "-" if value in (None, "") else escape(str(value))


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
        message = f"{_one_line(collector)}: {phase}" + (f" ({_one_line(detail)})" if detail else "")
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
    return _stored_overview(state, snapshot_id, graph, "collected")


# --------------------------------------------------------------------------- view tools


@tool(
    name="wp_summary",
    title="Snapshot summary",
    annotations=READ_ONLY,
    description=(
        "Summary of a snapshot in a few hundred tokens: host, counts, coverage, top "
        "signals and what each layer would cost; a cluster's ranks, missing nodes, skew, "
        "cross-host loss and worst hosts. Start here; host=h42 for one host of a cluster."
    ),
)
def wp_summary(
    state: ServerState,
    snapshot: Snapshot = "latest",
    fmt: Literal["txt", "json"] = "txt",
    host: Annotated[
        str | None, Field(description="one host of a cluster graph (comma list or glob)")
    ] = None,
) -> CallToolResult:
    filters = {"host": host} if host else None
    page, sid = _render(state, snapshot, "summary", fmt=fmt, filters=filters)
    return _page_result(page, sid, "")


@tool(
    name="wp_layer",
    title="One layer or view of a snapshot",
    annotations=READ_ONLY,
    meta=PICTURE_APP_META,
    description=(
        "One layer (compute, memory, interconnect, network, storage, control, data) or view "
        "(topology, flows, hosts) of a snapshot as compact text (txt), native JSON slice (json) or "
        "a mermaid/dot render, within max_tokens; pages with cursor. filters: kind, pid "
        "(the process with its ancestors and descendants; add kind to narrow), name "
        "(glob), host (one host of a cluster graph, e.g. h42), min_<metric> (e.g. "
        "min_cpu). One entity: wp_entity."
    ),
)
def wp_layer(
    state: ServerState,
    view: Annotated[str, Field(description="layer or view name")],
    snapshot: Snapshot = "latest",
    fmt: Literal["txt", "json", "mermaid", "dot"] = "txt",
    cursor: Cursor = None,
    max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
    filters: Annotated[
        dict[str, str | int | float] | None,
        Field(description='e.g. {"kind": "thread", "min_cpu": 50}'),
    ] = None,
) -> CallToolResult:
    if view.strip().lower() in ("entity", "summary"):
        raise UserError(
            f"{view.strip().lower()} is not a layer but a tool of its own: call "
            + ("wp_entity id=<id> (ids from wp_search)" if "entity" in view else "wp_summary")
        )
    page, sid = _render(
        state, snapshot, view, fmt=fmt, cursor=cursor, max_tokens=max_tokens, filters=filters
    )
    return _page_result(
        page,
        sid,
        "nothing matches; loosen filters, or call wp_summary to see which layers have data",
    )


@tool(
    name="wp_entity",
    title="One entity with its neighbours",
    annotations=READ_ONLY,
    description=(
        "One node (process, thread, socket, device, NUMA node…) by id with every attribute "
        "and its neighbours up to depth hops. Find ids with wp_search or wp_layer."
    ),
)
def wp_entity(
    state: ServerState,
    id: Annotated[str, Field(description="node id, e.g. proc:1234, npu:0, numa:6")],
    snapshot: Snapshot = "latest",
    depth: Annotated[int, Field(ge=1, le=2, description="neighbour hops")] = 1,
    fmt: Literal["txt", "json"] = "txt",
    cursor: Cursor = None,
    max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
) -> CallToolResult:
    from wp_mcp.converters import ViewError

    try:
        page, sid = _render(
            state, snapshot, "entity", entity=id, depth=depth, fmt=fmt, cursor=cursor,
            max_tokens=max_tokens,
        )  # fmt: skip
    except ViewError as exc:  # the shared message says "search"; here it is a tool
        hint = "call wp_search query=<pid, name or address>"
        raise UserError(f"{error_line(exc)}; {hint}") from None
    return _page_result(page, sid, "")


@tool(
    name="wp_search",
    title="Find entities",
    annotations=READ_ONLY,
    description="Find entities by id, name, command line or address; returns ids to pass to wp_entity.",
)
def wp_search(
    state: ServerState,
    query: Annotated[str, Field(min_length=1, max_length=200)],
    snapshot: Snapshot = "latest",
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
) -> CallToolResult:
    page, sid = state.search(snapshot, query, limit)
    return _page_result(
        page, sid, "no match; try a shorter query, a pid, a process name or an address"
    )


@tool(
    name="wp_diff",
    title="Compare two snapshots",
    annotations=READ_ONLY,
    description=(
        "Verify a change between two snapshots (before/after an optimisation): first the "
        "findings resolved, new and unchanged (every skill re-run on both), then what "
        "appeared, vanished or changed beyond noise; the rest pages with cursor."
    ),
)
def wp_diff(
    state: ServerState,
    before: Snapshot,
    after: Snapshot = "latest",
    cursor: Cursor = None,
    max_tokens: MaxTokens = DIFF_MAX_TOKENS,
) -> CallToolResult:
    from wp_mcp.converters.diff import diff_graphs, render_diff
    from wp_mcp.skills.compare import compare_findings

    old, new = state.resolve_snapshot(before), state.resolve_snapshot(after)
    if old == new:
        raise UserError(
            f"before and after are the same snapshot {old}; collect again (wp_collect) "
            "after the change, then diff the two ids from wp_snapshots"
        )
    diff = state.cached((old, new, "diff"), lambda: diff_graphs(state.graph(old), state.graph(new)))
    findings = state.cached(
        (old, new, "findings"),
        lambda: compare_findings(_diagnosis(state, old), _diagnosis(state, new)),
    )
    page = render_diff(
        diff, before_id=old, after_id=new, max_tokens=max_tokens, cursor=cursor,
        lead=findings.lines(),
    )  # fmt: skip
    return _result(
        page.text, before=old, after=new, **findings.counts(), **page.counts,
        page=page.page, pages=page.pages, tokens=page.tokens, next_cursor=page.next_cursor,
    )  # fmt: skip


def _diagnosis(state: ServerState, snapshot_id: str) -> Any:
    """Every skill on a stored snapshot (cached: stored snapshots never change)."""
    from wp_mcp.skills import diagnose

    return state.cached((snapshot_id, "diagnose"), lambda: diagnose(state.graph(snapshot_id)))


# --------------------------------------------------------------------------- skill tools


@tool(
    name="wp_run_skill",
    title="Run a diagnosis skill",
    annotations=WRITES_STORE,
    meta=PICTURE_APP_META,
    description=(
        "Run a skill on a snapshot and store its report: dataflow-topology-restore, "
        "bottleneck-identification, hotspot-thread-discovery, or all (one combined report). "
        "Returns the report id and the findings in brief; read details with wp_report."
    ),
)
def wp_run_skill(
    state: ServerState,
    skill: Annotated[str, Field(description="skill name or 'all'")],
    snapshot: Snapshot = "latest",
    options: Annotated[
        dict[str, Any] | None,
        Field(
            description='bottleneck-identification: {"layers": [1, 3]}; hotspot-thread-discovery: {"top": 5}'
        ),
    ] = None,
    max_tokens: Annotated[int, Field(ge=MIN_MAX_TOKENS, le=HARD_MAX_TOKENS)] = 1500,
) -> CallToolResult:
    from wp_mcp.converters import count_tokens
    from wp_mcp.skills import run_skill

    sid = state.resolve_snapshot(snapshot)
    if skill == "all":
        if options:
            raise UserError("options apply to one skill; run that skill alone to use them")
        report = _diagnosis(state, sid)  # the one wp_diff computes, when it did
    else:
        report = run_skill(skill, state.graph(sid), **(options or {}))
    report_id = state.store.put_report(sid, report.skill, report.to_dict(), report.to_markdown())
    by_priority = Counter(f.priority for f in report.findings)
    sections = " | ".join(report.contents())
    text = (
        f"report {report_id} ({report.skill} on snapshot {sid})\n"
        f"{report.brief(max_tokens=max_tokens - 100 - count_tokens(sections))}\n"
        f"next: wp_report report={report_id} finding=<id above> or section=<one of: "
        f"{sections}>"
    )
    return _result(
        text, report_id=report_id, snapshot_id=sid, skill=report.skill,
        findings=len(report.findings), by_priority=dict(sorted(by_priority.items())) or None,
    )  # fmt: skip


@tool(
    name="wp_report",
    title="Read a stored report",
    annotations=READ_ONLY,
    description=(
        "Read a stored report: whole (paged), one section, or one finding with its "
        "evidence and action; md or json."
    ),
)
def wp_report(
    state: ServerState,
    report: Annotated[str, Field(description="report id, prefix, or 'latest'")] = "latest",
    section: Annotated[
        str | None,
        Field(description="a heading as wp_run_skill lists it (any dash, unique start)"),
    ] = None,
    finding: Annotated[str | None, Field(description="finding id")] = None,
    fmt: Literal["md", "json"] = "md",
    cursor: Cursor = None,
    max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
) -> CallToolResult:
    report_id = state.store.get_report(report).id
    text = state.cached(
        ("report", report_id, section, finding, fmt),
        lambda: _report_text(state, report_id, section, finding, fmt),
    )
    page = page_text(
        text, max_tokens=max_tokens, cursor=cursor, again=f"wp_report report={report_id}"
    )
    return _result(
        page.text, report_id=report_id, page=page.page, pages=page.pages,
        next_cursor=page.next_cursor,
    )  # fmt: skip


@tool(
    name="wp_skill_docs",
    title="Skill documentation",
    annotations=READ_ONLY,
    description=(
        "Without arguments: list the skills. With skill: its SKILL.md (method, rules, "
        "outputs) and its references. With skill and reference: that reference file."
    ),
)
def wp_skill_docs(
    state: ServerState,
    skill: str | None = None,
    reference: Annotated[str | None, Field(description="file name under references/")] = None,
    cursor: Cursor = None,
    max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
) -> CallToolResult:
    if skill is None:
        if reference is not None:
            raise UserError(
                "reference needs skill; call wp_skill_docs without arguments to list skills"
            )
        return _result(_skill_listing(), skills=len(SKILLS))
    text = _skill_doc(skill, reference)
    page = page_text(
        text, max_tokens=max_tokens, cursor=cursor,
        again=f"wp_skill_docs skill={skill}" + (f" reference={reference}" if reference else ""),
    )  # fmt: skip
    return _result(
        page.text, skill=skill, page=page.page, pages=page.pages, next_cursor=page.next_cursor
    )


def _report_text(
    state: ServerState, report_id: str, section: str | None, finding: str | None, fmt: str
) -> str:
    from wp_mcp.skills.report import stored_report_text

    stored = state.store.get_report(report_id)
    return stored_report_text(stored.data, stored.markdown, section, finding, fmt)


def _skill_listing() -> str:
    from wp_mcp.skills import skill_meta

    lines = ["# skills (read one with wp_skill_docs skill=<name>; run it with wp_run_skill)"]
    for name in SKILLS:
        lines.append(f"{name}: {_one_line(skill_meta(name).get('description'))}")
    return "\n".join(lines)


def _skill_doc(skill: str, reference: str | None) -> str:
    from wp_mcp.skills import bundle_dir

    if skill not in SKILLS:
        raise UserError(f"unknown skill {excerpt(skill)}; skills: {', '.join(SKILLS)}")
    folder = bundle_dir(skill)
    refs_dir = folder / "references"
    refs = sorted(p.name for p in refs_dir.iterdir() if p.is_file()) if refs_dir.is_dir() else []
    if reference is None:
        listing = ", ".join(refs) or "(none)"
        return f"{(folder / 'SKILL.md').read_text(encoding='utf-8')}\n\nreferences: {listing}"
    if reference not in refs:  # names only: no path can escape the bundle
        raise UserError(
            f"unknown reference {excerpt(reference)} for {skill}; references: {', '.join(refs) or '(none)'}"
        )
    return (refs_dir / reference).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- resources


def _resource_errors(fn: Callable[..., str]) -> Callable[..., str]:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:  # an unknown id or name: the caller's, -32602
            raise ResourceNotFoundError(error_line(exc)) from None

    return wrapper


def _register_resources(server: WpServer, state: ServerState) -> None:
    @server.resource("wp://snapshots", name="snapshots", mime_type="text/plain",
                     description="Stored snapshots (as wp_snapshots)")  # fmt: skip
    @_resource_errors
    def snapshots() -> str:
        return _snapshot_listing(state, 50)[0]

    @server.resource("wp://snapshots/{id}/summary", name="snapshot-summary", mime_type="text/plain",
                     description="Summary of a snapshot (as wp_summary)")  # fmt: skip
    @_resource_errors
    def summary(id: str) -> str:
        return _render(state, id, "summary")[0].text

    @server.resource("wp://snapshots/{id}/layers/{layer}", name="snapshot-layer",
                     mime_type="text/plain",
                     description="First page of a layer or view (as wp_layer)")  # fmt: skip
    @_resource_errors
    def layer(id: str, layer: str) -> str:
        return _render(state, id, layer, max_tokens=DEFAULT_MAX_TOKENS)[0].text

    @server.resource("wp://reports/{id}", name="report", mime_type="text/markdown",
                     description="First page of a stored report (as wp_report)")  # fmt: skip
    @_resource_errors
    def report(id: str) -> str:
        report_id = state.store.get_report(id).id
        text = _report_text(state, report_id, None, None, "md")
        return page_text(text, max_tokens=DEFAULT_MAX_TOKENS, cursor=None,
                         again=f"wp_report report={report_id}").text  # fmt: skip

    @server.resource("skill://{name}/SKILL.md", name="skill", mime_type="text/markdown",
                     description="A skill's SKILL.md (as wp_skill_docs)")  # fmt: skip
    @_resource_errors
    def skill_md(name: str) -> str:
        again = f"wp_skill_docs skill={name}"
        return page_text(_skill_doc(name, None), max_tokens=DEFAULT_MAX_TOKENS, cursor=None,
                         again=again).text  # fmt: skip

    @server.resource("skill://{name}/references/{reference}", name="skill-reference",
                     mime_type="text/markdown",
                     description="A skill's reference file")  # fmt: skip
    @_resource_errors
    def skill_reference(name: str, reference: str) -> str:
        again = f"wp_skill_docs skill={name} reference={reference}"
        return page_text(_skill_doc(name, reference), max_tokens=DEFAULT_MAX_TOKENS, cursor=None,
                         again=again).text  # fmt: skip


# --------------------------------------------------------------------------- prompts


def _register_prompts(server: WpServer) -> None:
    def diagnose(snapshot: str = "latest") -> str:
        return DIAGNOSE_PROMPT.format(snapshot=snapshot)

    server.add_prompt(
        Prompt.from_function(
            diagnose,
            name="diagnose",
            title="Diagnose a host (four steps)",
            description="Collect or load, look layer by layer, run the skills, report by priority.",
        )
    )
    for skill in SKILLS:
        server.add_prompt(
            Prompt.from_function(
                _skill_prompt(skill),
                name=skill,
                title=f"Run {skill}",
                description=f"Run the {skill} skill on a snapshot and explain its findings.",
            )
        )


def _skill_prompt(skill: str) -> Callable[..., str]:
    def prompt(snapshot: str = "latest") -> str:
        return SKILL_PROMPT.format(skill=skill, snapshot=snapshot)

    return prompt


# --------------------------------------------------------------------------- completions


def _register_completions(server: WpServer, state: ServerState) -> None:
    """Argument completion for resource templates and prompts (ids, layers, skills)."""

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion:
        known = dict(getattr(context, "arguments", None) or {})
        target: str = getattr(ref, "uri", "") or getattr(ref, "name", "")
        values = await anyio.to_thread.run_sync(
            _completions, state, target, argument.name, argument.value or "", known
        )
        return Completion(values=values[:100], total=len(values), has_more=len(values) > 100)


def _completions(
    state: ServerState, target: str, name: str, prefix: str, known: dict[str, str]
) -> list[str]:
    if name == "id" and target.startswith("wp://reports/"):
        values = ["latest", *(r.id for r in state.store.list_reports())]
    elif name in ("id", "snapshot"):
        values = ["latest", *(s.id for s in state.store.list(limit=100))]
    elif name == "layer":
        from wp_mcp.converters import VIEWS

        values = [view for view in VIEWS if view not in ("summary", "entity")]
    elif name == "name":
        values = list(SKILLS)
    elif name == "reference" and known.get("name") in SKILLS:
        from wp_mcp.skills import bundle_dir

        folder = bundle_dir(known["name"]) / "references"
        values = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    else:
        values = []
    return [value for value in values if value.startswith(prefix)]
