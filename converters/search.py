"""``search``: find entities by id, name, cmdline or address, best matches first."""

from __future__ import annotations

from functools import partial
from typing import Any

from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Node
from wp_mcp.graph.safetext import escape

from .facts import attr
from .index import index_for
from .items import Item, node_item
from .lines import named, parts
from .render import Page, clamp_budget, snapshot_label
from .text import quote
from .tokens import DEFAULT_MAX_TOKENS, count_tokens, tokens_at_most

SEARCHED = ("name", "cmdline", "local_addr", "remote_addr", "path", "hostname", "pci_bus_id")
MAX_LIMIT = 200
# Matches are counted up to this many; beyond, a page says "more than" it. An exact count of a
# needle that common tells the reader nothing the cap does not (make the query more specific),
# and the store's index would have to check every match to give it (50 ms for 100k matches
# at 640 hosts, against a few for the cap).
COUNT_CAP = 10_000


def haystack(node: Node) -> str:
    """A node's lower-cased searchable text: its id, names, command line, addresses."""
    name, others = searched_values(node)
    return "\n".join([node.id, *([] if name is None else [name]), *others]).lower()


def searched_values(node: Node) -> tuple[str | None, list[str]]:
    """What :func:`haystack` holds besides the id, as written: the name (None when it is not
    a string) and the other values, each cut to 4096 characters."""
    values = []
    for name in SEARCHED:
        value = attr(node, name)
        if isinstance(value, str):
            values.append(value[:4096])
    port = attr(node, "local_port")
    if port is not None:
        values.append(f":{port}")
    if isinstance(attr(node, "name"), str):
        return values[0], values[1:]
    return None, values


def name_key(node: Node) -> str:
    """What a query is compared with as the node's name."""
    return str(attr(node, "name") or "").lower()


def _haystacks(graph: Graph) -> list[tuple[Node, str]]:
    """Lower-cased searchable text per node, built once per graph."""
    index = index_for(graph)
    cached = index.search_haystacks
    if cached is None:
        cached = [(node, haystack(node)) for node in graph.nodes.values()]
        index.search_haystacks = cached
    return cached


def needle_of(query: str) -> str:
    """The needle a query searches for (empty: nothing matches)."""
    return str(query).strip().lower()[:200]


def rank(node_id: str, name: str, query: str, haystack: str) -> int | None:
    """How well a node matches ``query`` (0 best), from its id, :func:`name_key` and
    :func:`haystack`; None when it does not match. A match is in the haystack or the name.
    The node index ranks the same way (converters/stored.py; graph/store/index.py scans)."""
    node_id = node_id.lower()
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
    limit = clamp_limit(limit)
    needle = needle_of(query)
    found: list[tuple[int, str]] = []
    nodes = graph.nodes
    if needle:
        for node, text in _haystacks(graph):
            place = rank(node.id, name_key(node), needle, text)
            if place is not None:
                found.append((place, node.id))
    found.sort()
    snap = snapshot_label(index_for(graph), snapshot_id)
    best = [node_id for _rank, node_id in found[:limit]]
    counted = min(len(found), COUNT_CAP + 1)  # as the store counts
    return found_page(query, [nodes[i] for i in best], counted, max_tokens, snap)


def clamp_limit(limit: Any) -> int:
    """The number of matches a search lists at most."""
    return max(1, min(int(limit), MAX_LIMIT))


def found_page(query: str, best: list[Node], total: int, max_tokens: int, snap: str) -> Page:
    """The page of a search's ``total`` matches (counted up to ``COUNT_CAP + 1``: more than
    ``COUNT_CAP``): of the ``best`` (best first, at most the limit), as many as fit."""
    budget, _note = clamp_budget(max_tokens)
    over = total > COUNT_CAP
    header = f"#wp search {quote(query, 60)} snap={snap} matches " + (
        f"over {COUNT_CAP}" if over else str(total)
    )
    legend = '#legend id "name" kind detail; open one with the entity view (entity=<id>)'
    items = [_item(node) for node in best]
    shown = _fitting(header, legend, items, budget)
    lines = [header, legend, *(item.line for item in items[:shown])]
    if shown < total:
        hidden = f"over {COUNT_CAP - shown}" if over else str(total - shown)
        lines.append(f"#more {hidden} matches not shown: make the query more specific")
    else:
        lines.append("#end" if total else "#end no match; try part of a name, a pid or an address")
    return Page(
        text="\n".join(lines),
        next_cursor=None,
        page=1,
        pages=1,
        total_items=total,
        view="search",
        fmt="txt",
        item_count=shown,
        ids=tuple(node.id for node in best[:shown]),
        max_tokens=budget,
    )


def _fitting(header: str, legend: str, items: list[Item], budget: int) -> int:
    """How many of ``items`` fit the page's budget after its header and legend. Counted by
    the UTF-8 bound first (``tokens_at_most``, never less than the tokens): when all fit by
    it, all fit, and no encoder is loaded; else by the tokens themselves."""
    bound = tokens_at_most(header) + tokens_at_most(legend) + 40
    bound += sum(tokens_at_most(item.line) + 1 for item in items)
    if bound <= budget:
        return len(items)
    used = count_tokens(header) + count_tokens(legend) + 40
    shown = 0
    for item in items:
        if used + item.tokens > budget:
            break
        used += item.tokens
        shown += 1
    return shown


def _item(node: Node) -> Item:
    return node_item(node, partial(_line, node))


def _line(node: Node) -> str:
    cmdline = attr(node, "cmdline")
    return parts(
        named(node),
        escape(node.kind, 24),
        f"cmd={quote(cmdline, 60)}" if cmdline and cmdline != attr(node, "name") else None,
    )
