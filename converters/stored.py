"""Entities and searches of a stored snapshot, answered from its node index, not its graph.

An entity page shows one node, its attributes and its edges with their neighbours (at depth
2, the neighbours' edges and their other ends too); a search compares the query with each
node's id, name and searchable text. Neither needs the rest of the graph, so the store keeps
per snapshot one row per node (its record), one per node's name and searchable text, and one
per edge (its record, found by either end, with its place in the graph's order): this
converters/pages.py makes them (``build_node_index``), graph/store/index.py keeps and
searches them, and this module reads them. They are built the first time an entity or a search of the snapshot is answered from
the graph (or by the MCP server's background build). An answer then reads only the rows it
shows: the node, its edges and neighbours, or the matching rows; it builds that small part
of the graph and renders it with the same code as the whole graph, carrying the whole
graph's fingerprint, so its text and cursors are identical (tests/graph/
test_store_entities.py).
"""

from __future__ import annotations

from typing import Any

import orjson
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import EDGE_CLASSES, NODE_CLASSES, Edge, Meta, Node, wrap_trusted
from wp_mcp.graph.store import Store

from . import render_view
from .index import carry_fingerprint
from .render import Page
from .search import COUNT_CAP, clamp_limit, found_page, needle_of, rank
from .text import word

# A node's row (graph/store/index.py NodeRow) holds what a search compares, lower-cased as
# converters/search.py lower-cases it: the id, the name and the rest of the searchable text
# (:func:`~.search.haystack` is the id, the name and the rest), each framed (the id by
# ``ID_FRAME``, the name by ``NAME_FRAME``, the rest by line breaks): a query without a frame
# finds where the id or the name starts and ends, and every character of a column is inside
# one of its trigrams.
ID_FRAME, NAME_FRAME = "\x01", "\x02"
_NO_IDS: list[str] = []  # what an empty query finds (never changed)
# Needles of fewer characters have no trigram of their own: the index's are looked up
TRIGRAM = 3
# What a full-text query is not given (a search scans instead): NUL, which ends a query
# string, and the frames of the id and the name (each column its own, so that a query for
# an id's start reads no name's trigrams)
_UNQUERIED = frozenset((ID_FRAME, NAME_FRAME, "\x00"))


def entity_page(
    store: Store, snapshot_id: str, entity: Any, depth: Any, **options: Any
) -> Page | None:
    """``render_view(graph, "entity", ...)`` of the stored snapshot, read from its node
    index; None when the snapshot has none yet (the caller renders from the graph)."""
    part = entity_part(store, snapshot_id, entity, depth)
    if part is None:
        return None
    return render_view(
        part, "entity", entity=entity, depth=depth, snapshot_id=snapshot_id, **options
    )


def entity_part(store: Store, snapshot_id: str, entity: Any, depth: Any) -> Graph | None:
    """The part of the graph an entity's pages show, carrying the whole graph's fingerprint
    (so its cursors are the whole graph's); None when the snapshot has no node index."""
    fingerprint = store.index.fingerprint(snapshot_id)
    if fingerprint is None:
        return None
    part = _neighbourhood(store, snapshot_id, entity, depth)
    carry_fingerprint(part, fingerprint)
    return part


def search_page(
    store: Store, snapshot_id: str, query: str, limit: int = 20, max_tokens: int = 4000
) -> Page | None:
    """``search(graph, query, ...)`` of the stored snapshot, read from its node index (ranked
    by :func:`~.search.rank` as there); None when the snapshot has none yet, or for a query
    with a line break inside (it can match across two values of the searchable text, which
    the index keeps apart: the graph answers it)."""
    needle = needle_of(query)
    if "\n" in needle or store.index.fingerprint(snapshot_id) is None:
        return None
    limit = clamp_limit(limit)
    total, best = _found(store, snapshot_id, needle, limit)
    by_id = {node.id: node for node in _nodes(store.index.node_records(snapshot_id, best))}
    # the label a snapshot's pages carry (render.snapshot_label with a snapshot id)
    snap = word(snapshot_id, 40)
    return found_page(query, [by_id[node_id] for node_id in best], total, max_tokens, snap)


def _found(store: Store, snapshot_id: str, needle: str, limit: int) -> tuple[int, list[str]]:
    """How many nodes hold ``needle`` (no line break) in their name or searchable text, and
    the ids of the ``limit`` best, best first (as :func:`~.search.search` ranks them)."""
    if not needle or not _encodable(needle):
        # a lone surrogate (from a command line argument) matches no stored text, as in a graph
        return 0, _NO_IDS
    if not _UNQUERIED.isdisjoint(needle) or not store.index.has_search_index(snapshot_id):
        return store.index.search_scan(snapshot_id, needle, limit, COUNT_CAP + 1)  # see its doc
    tiers = _tiers(store, snapshot_id, needle)
    last = tiers[-1][1]
    total = store.index.search_count(snapshot_id, last, COUNT_CAP + 1) if last else 0
    best: list[str] = []
    for place, match in tiers if total else ():
        # each tier's candidates in id order: the first `limit` of that rank are its best
        for node_id, name in store.index.search_matches(snapshot_id, match) if match else ():
            found = rank(node_id, name, needle, "")  # "": any match at all is a rank 4 one
            if (4 if found is None else found) == place:
                best.append(node_id)
                if len(best) == limit:
                    return total, best
    return total, best


def _tiers(store: Store, snapshot_id: str, needle: str) -> list[tuple[int, str]]:
    """Per rank of :func:`~.search.rank`, a full-text query finding every node of that rank
    (and perhaps others, which the rank computed again leaves out; "": none): the framed id
    is the needle framed, starts or ends with it; so for the name; the name holds it; any
    column holds it."""
    key, name = ID_FRAME, NAME_FRAME
    texts = (f"{key}{needle}{key}", f"{key}{needle}", f"{needle}{key}",
             f"{name}{needle}{name}", needle)  # fmt: skip
    framed_id, opened, closed, framed_name, held = (
        _holding(store, snapshot_id, text) for text in texts
    )
    either = " OR ".join(f"({query})" for query in (opened, closed) if query)
    return [
        (0, framed_id and f"key : {framed_id}"),
        (1, either and f"key : ({either})"),
        (2, framed_name and f"name : {framed_name}"),
        (3, held and f"name : ({held})"),
        (4, held),  # every column the index has: no filter to check positions against
    ]


def _holding(store: Store, snapshot_id: str, text: str) -> str:
    """A full-text query finding the rows whose framed columns hold ``text``, "" when none
    do. Three characters or more are a phrase: their trigrams one after the other. Fewer
    have no trigram of their own, but each place they are at in a column is inside one (the
    frames see to it): the index's trigrams that hold them there, any of them (one after a
    leading frame is at the column's start: those start with it)."""
    if len(text) >= TRIGRAM:
        return _phrase(text)
    grams = store.index.search_trigrams(snapshot_id, text, 0 if text[0] in _UNQUERIED else 1)
    return " OR ".join(_phrase(gram) for gram in grams)


def _phrase(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'  # a query's string: only its quote is special


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _neighbourhood(store: Store, snapshot_id: str, entity: Any, depth: Any) -> Graph:
    """The part of the graph an entity page of ``depth`` shows: the node and its edges with
    their other ends; at depth 2 also every edge of those ends, with theirs."""
    if not isinstance(entity, str) or not entity:
        return _graph([], {})
    node_ids = {entity}
    ring = [entity]
    edges: dict[int, tuple[str, str, bytes]] = {}
    for _hop in range(2 if depth == 2 else 1):
        found = store.index.edge_records(snapshot_id, ring)
        edges.update(found)
        ring = []
        for src, dst, _data in found.values():
            for end in (src, dst):
                if end not in node_ids:
                    node_ids.add(end)
                    ring.append(end)
    return _graph(store.index.node_records(snapshot_id, sorted(node_ids)), edges)


def _graph(node_records: list[bytes], edges: dict[int, tuple[str, str, bytes]]) -> Graph:
    """A graph of stored records, its edges in the whole graph's order (the entity view
    sorts edges stably, so ties keep that order)."""
    records = [orjson.loads(edges[seq][2]) for seq in sorted(edges)]
    edge_list: list[Edge] = wrap_trusted(records, EDGE_CLASSES, Edge)
    graph, _duplicate, _dangling = Graph.from_validated(Meta(), _nodes(node_records), edge_list)
    return graph


def _nodes(records: list[bytes]) -> list[Node]:
    """The nodes of stored records, wrapped as they are: the index is written from a graph
    whose elements were validated (or read trusted) when it was stored, so validating them
    again would only cost time, and pydantic's import (graph/trusted.py reads a snapshot the
    same way)."""
    nodes: list[Node] = wrap_trusted([orjson.loads(r) for r in records], NODE_CLASSES, Node)
    return nodes
