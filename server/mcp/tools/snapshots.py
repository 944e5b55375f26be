"""The store's snapshots: import a file (wp_open), list them (wp_snapshots), and the short
overview that answers a new snapshot (wp_open, wp_collect)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Annotated, Any

from mcp.types import CallToolResult
from pydantic import Field

from ..state import ServerState
from ..text import page_text
from . import DEFAULT_MAX_TOKENS, READ_ONLY, WRITES_STORE, Cursor, one_line, result, tool

OVERVIEW_TOKENS = 600  # the summary that follows wp_collect / wp_open
# Up to this many nodes and edges the summary is rendered for wp_open/wp_collect's answer
# (tens of milliseconds); above it, building it (every layer's items) takes seconds, so the
# answer says where to read it once the background build has stored it.
OVERVIEW_RENDER_ELEMENTS = 5_000


@tool(
    name="wp_open",
    title="Import a graph file or a job's traces",
    annotations=WRITES_STORE,
    description=(
        "Import a wp-graph (.json/.json.gz) or witty-profiler graph file, or PyTorch profiler "
        "traces: one rank's file, a folder of rank traces, or several (`paths`), as one job; "
        "`to` joins them to that snapshot (its processes, or the ranks it already holds). "
        "Only files below the allowed roots (working directory, the store, --allow-dir) "
        "and below the size limit. Returns the snapshot id and a short overview."
    ),
)
def wp_open(
    state: ServerState,
    path: Annotated[
        str,
        Field(description="file path, or a folder of rank traces; absolute or relative to the cwd"),
    ],
    label: Annotated[str | None, Field(max_length=200)] = None,
    to: Annotated[
        str | None, Field(max_length=64, description="snapshot id the traces join")
    ] = None,
    force_pid: Annotated[
        bool, Field(description="`to`: join by pid even if name or start time differ")
    ] = False,
    paths: Annotated[
        list[Annotated[str, Field(max_length=4096)]] | None,
        Field(max_length=1024, description="more rank traces (or folders) of the same job"),
    ] = None,
) -> CallToolResult:
    from wp_mcp.graph import trace
    from wp_mcp.graph.formats import load_any

    given = [path, *(paths or [])]
    real = state.check_import_path(path, folder=True)
    if to or paths or real.is_dir():
        ranks = trace.read_ranks(state.check_import_paths(given), state.max_file_bytes)
        if to:
            graph = trace.join_copy(state.store.get(to), ranks, force_pid)
        else:
            graph = trace.to_graph(ranks)
    else:
        graph = load_any(real, max_bytes=state.max_file_bytes)
    snapshot_id = state.put(graph, label or real.name)
    return stored_overview(state, snapshot_id, graph, "imported")


@tool(
    name="wp_snapshots",
    title="List stored snapshots",
    annotations=READ_ONLY,
    description="List stored snapshots, newest first: id, time, label, origin, size.",
)
def wp_snapshots(
    state: ServerState, limit: Annotated[int, Field(ge=1, le=200)] = 20, cursor: Cursor = None
) -> CallToolResult:
    listing, counts = snapshot_listing(state, limit)
    # labels and origins are free text: the listing is paged like any long answer
    page = page_text(listing, max_tokens=DEFAULT_MAX_TOKENS, cursor=cursor, again="wp_snapshots")
    return result(page.text, **counts, next_cursor=page.next_cursor)


def snapshot_listing(state: ServerState, limit: int) -> tuple[str, dict[str, Any]]:
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
            f"{info.id} · {created} · {one_line(info.label)} · {one_line(info.origin)} · "
            f"{one_line(hosts)} · {info.nodes}/{info.edges}"
        )
    if len(infos) > limit:
        lines.append(f"({len(infos) - limit} older; call wp_snapshots with a larger limit)")
    return "\n".join(lines), {"total": len(infos), "latest": infos[0].id}


def _coverage(graph: Any) -> tuple[str, dict[str, int]]:
    statuses = graph.meta.collectors
    counts = Counter(s.status for s in statuses)
    not_ok = [
        f"{one_line(s.name)} {s.status}: {one_line(s.reason)}"
        for s in statuses
        if s.status != "ok" and s.reason
    ]
    line = "coverage: " + (", ".join(f"{n} {st}" for st, n in sorted(counts.items())) or "n/a")
    if not_ok:
        line += "\n" + "\n".join(f"  {item}" for item in not_ok[:12])
    return line, dict(counts)


def stored_overview(state: ServerState, snapshot_id: str, graph: Any, verb: str) -> CallToolResult:
    coverage, counts = _coverage(graph)
    text = (
        f"{verb} snapshot {snapshot_id} ({len(graph.nodes)} nodes, {graph.edge_count} edges)\n"
        f"{coverage}\n{_overview_summary(state, snapshot_id, graph)}\n"
        f"next: wp_layer view=<layer> snapshot={snapshot_id}, or wp_run_skill skill=all"
    )
    return result(
        text,
        snapshot_id=snapshot_id,
        nodes=len(graph.nodes),
        edges=graph.edge_count,
        collectors=counts or None,
    )


def _overview_summary(state: ServerState, snapshot_id: str, graph: Any) -> str:
    """The snapshot's summary, stored or cheap to render; else where to read it soon."""
    from wp_mcp.converters.pages import stored_page

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
