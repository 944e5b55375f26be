"""Reading a snapshot: its summary (wp_summary), one layer or view a page at a time
(wp_layer), one entity with its neighbours (wp_entity), and a search for ids (wp_search)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.types import CallToolResult
from pydantic import Field
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import error_line

from ..app import PICTURE_APP_META
from ..state import ServerState
from . import DEFAULT_MAX_TOKENS, READ_ONLY, Cursor, MaxTokens, Snapshot, page_result, tool


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
    page, sid = state.render(snapshot, "summary", fmt=fmt, filters=filters)
    return page_result(page, sid, "")


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
    page, sid = state.render(
        snapshot, view, fmt=fmt, cursor=cursor, max_tokens=max_tokens, filters=filters
    )
    return page_result(
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
        "and its neighbours up to depth hops (filters: kind of neighbour). Find ids with "
        "wp_search or wp_layer."
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
    filters: Annotated[
        dict[str, str | int | float] | None,
        Field(description='the neighbours shown, e.g. {"kind": "thread"}'),
    ] = None,
) -> CallToolResult:
    from wp_mcp.converters import ViewError

    try:
        page, sid = state.render(
            snapshot, "entity", entity=id, depth=depth, fmt=fmt, cursor=cursor,
            max_tokens=max_tokens, filters=filters,
        )  # fmt: skip
    except ViewError as exc:  # the shared message says "search"; here it is a tool
        hint = "call wp_search query=<pid, name or address>"
        raise UserError(f"{error_line(exc)}; {hint}") from None
    return page_result(page, sid, "")


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
    return page_result(
        page, sid, "no match; try a shorter query, a pid, a process name or an address"
    )
