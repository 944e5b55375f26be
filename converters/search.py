"""``search``: find entities by id, name, cmdline or address, best matches first."""

from __future__ import annotations

from functools import partial

from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Node
from wp_mcp.graph.safetext import escape

from .facts import attr
from .index import index_for
from .items import Item, node_item
from .lines import named, parts
from .render import Page, clamp_budget, snapshot_label
from .text import quote
from .tokens import DEFAULT_MAX_TOKENS, count_tokens

SEARCHED = ("name", "cmdline", "local_addr", "remote_addr", "path", "hostname", "pci_bus_id")
MAX_LIMIT = 200


def _haystacks(graph: Graph) -> list[tuple[Node, str]]:
    """Lower-cased searchable text per node, built once per graph."""
    index = index_for(graph)
    cached = index.search_haystacks
    if cached is None:
        cached = []
        for node in graph.nodes.values():
            text = [node.id]
            for name in SEARCHED:
                value = attr(node, name)
                if isinstance(value, str):
                    text.append(value[:4096])
            port = attr(node, "local_port")
            if port is not None:
                text.append(f":{port}")
            cached.append((node, "\n".join(text).lower()))
        index.search_haystacks = cached
    return cached


def _rank(node: Node, query: str, haystack: str) -> int | None:
    node_id = node.id.lower()
    name = str(attr(node, "name") or "").lower()
    if node_id == query:
        return 0
    if node_id.endswith(query) or node_id.startswith(query):
        return 1
    if name == query:
        return 2
    if query in name:
        return 3
    if query in haystack:
        return 4
    return None


def search(
    graph: Graph,
    query: str,
    limit: int = 20,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    snapshot_id: str | None = None,  # printed as snap= so it can be passed back
) -> Page:
    """Entities matching ``query`` (case-insensitive substring of id, name, cmdline, address)."""
    budget, _note = clamp_budget(max_tokens)
    needle = str(query).strip().lower()[:200]
    limit = max(1, min(int(limit), MAX_LIMIT))
    index = index_for(graph)
    found: list[tuple[int, str, Node]] = []
    if needle:
        for node, haystack in _haystacks(graph):
            rank = _rank(node, needle, haystack)
            if rank is not None:
                found.append((rank, node.id, node))
    found.sort(key=lambda t: (t[0], t[1]))
    snap = snapshot_label(index, snapshot_id)
    header = f"#wp search {quote(query, 60)} snap={snap} matches {len(found)}"
    legend = '#legend id "name" kind detail; open one with the entity view (entity=<id>)'
    lines = [header, legend]
    used = count_tokens(header) + count_tokens(legend) + 40
    shown = 0
    for _rank_value, _id, node in found[:limit]:
        item = _item(node)
        if used + item.tokens > budget:
            break
        lines.append(item.line)
        used += item.tokens
        shown += 1
    if shown < len(found):
        lines.append(f"#more {len(found) - shown} matches not shown: make the query more specific")
    else:
        lines.append("#end" if found else "#end no match; try part of a name, a pid or an address")
    text = "\n".join(lines)
    return Page(
        text=text,
        tokens=count_tokens(text),
        next_cursor=None,
        page=1,
        pages=1,
        total_items=len(found),
        view="search",
        fmt="txt",
        item_count=shown,
        ids=tuple(node.id for _r, _i, node in found[:shown]),
        max_tokens=budget,
    )


def _item(node: Node) -> Item:
    return node_item(node, partial(_line, node))


def _line(node: Node) -> str:
    cmdline = attr(node, "cmdline")
    return parts(
        named(node),
        escape(node.kind, 24),
        f"cmd={quote(cmdline, 60)}" if cmdline and cmdline != attr(node, "name") else None,
    )
