"""What the converters hand to the store: pages rendered once per stored snapshot (served
from the store ever after) and the rows of its node index (read by converters/stored.py).

A stored snapshot never changes, so every page a caller can ask for without filters is
known once it is stored: the summary, then each view followed from its first page through
every cursor, in compact text and JSON at the default budget. Whoever makes a snapshot
holds its graph then, and writes the first answers before it returns
(:func:`build_first_answers`: the summary, each view's first page, the node index), so no
first look reads the graph again; the rest of a chain is built lazily (rendering every page
costs far more than storing the graph): the first `wp-mcp show` of a later page stores that
view's pages in that format after printing its answer, and the MCP server builds them all
in the background after `wp_open` or `wp_collect`. :func:`build_pages` hands them to the store as one row per page, keyed by
the cursor that asks for it (converters/show_path.py owns the keys and reads a row for a
fresh `show`); :func:`stored_page` reads one back, so a page costs what it returns: neither
the graph, nor the model, nor the token encoder is loaded to serve it. A request for
anything else (filters, another budget, a diagram) is rendered from the graph as before.

The pages are built with the public ``render_view`` and nothing else, so what the store
serves is by construction what rendering the whole graph gives (tests/graph/
test_store_pages.py checks it page by page).
"""

from __future__ import annotations

import dataclasses
import logging
import zlib
from collections.abc import Iterator
from typing import Any

import orjson
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Node
from wp_mcp.graph.native import element_dumps
from wp_mcp.graph.safetext import error_line, excerpt
from wp_mcp.graph.store import EdgeRow, NodeRow, Store

from . import render_view
from .catalog import VIEWS
from .index import index_for
from .render import Page
from .search import name_key, searched_values
from .show_path import entity_view, page_fields, page_key
from .stored import ID_FRAME, NAME_FRAME, entity_part
from .tokens import DEFAULT_MAX_TOKENS

log = logging.getLogger(__name__)

STORED_VIEWS = tuple(view for view in VIEWS if view != "entity")  # entity needs an id
STORED_FORMATS = ("txt", "json")
STORED_BUDGET = DEFAULT_MAX_TOKENS
# Pages of a view and format stored by a first build (the first `show` of it, or the MCP
# server's first pass): the first pages are what is read; the server stores the rest after.
# At 640 hosts a chain runs to ~3,000 text and ~15,000 JSON pages, ~10 ms each to render.
EAGER_PAGES = 64
# Pages of each view and format written with the graph in hand, when a snapshot is made
# (import, collect, wp_open, wp_collect): the first look at each view is a row read
FIRST_PAGES = 1
_PAGE_BATCH = 200  # pages per write transaction while building (bounds the memory held)

# (the cursor asking for a page, '' for the first; the page)
Walk = Iterator[tuple[str, Page]]


def stored_page(store: Store, snapshot_id: str, view: str, **options: Any) -> Page | None:
    """The stored page that ``render_view`` would return for these ``options``, or None
    when none was stored (filters, another budget, not built yet): the caller then renders
    it from the graph. Reads one row; loads neither the graph nor the model."""
    options.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    options.setdefault("fmt", "txt")
    key = page_key(view, **options)
    blob = None if key is None else store.pages.read(snapshot_id, key)
    return None if blob is None else Page(**page_fields(blob))


def is_stored_chain(view: str, fmt: str, max_tokens: int) -> bool:
    """Whether the plain page of ``view`` in ``fmt`` at ``max_tokens`` belongs to a chain
    :func:`build_pages` stores (the caller has checked the request has no filters, entity
    or depth)."""
    return view in STORED_VIEWS and fmt in STORED_FORMATS and max_tokens == STORED_BUDGET


def build_pages(
    store: Store,
    snapshot_id: str,
    graph: Graph,
    limit: int | None = EAGER_PAGES,
    only: tuple[str, str] | None = None,
) -> None:
    """Render and store the pages served without the graph: up to ``limit`` pages of each
    stored view and format (None: all of them), or of the one (view, format) in ``only``.
    Pages are written in batches, each with how far its chain got, so a later build with a
    higher limit, or one after a build cut short, resumes where the last one stopped; a
    snapshot deleted meanwhile ends it quietly."""
    if store.read_only:
        return
    done = store.pages.progress(snapshot_id)
    views, formats = ((only[0],), (only[1],)) if only else (STORED_VIEWS, STORED_FORMATS)
    for view in (v for v in STORED_VIEWS if v in views):
        for fmt in (f for f in STORED_FORMATS if f in formats):
            stored, cursor = done.get((view, fmt, STORED_BUDGET), (0, ""))
            room = None if limit is None else limit - stored
            if cursor is None or (room is not None and room <= 0):
                continue  # complete, or as far as asked already
            pages = walk(graph, snapshot_id, view, fmt, cursor or None, room)
            if not keep_pages(store, snapshot_id, (view, fmt, STORED_BUDGET), pages, stored):
                return


def build_first_answers(store: Store, snapshot_id: str, graph: Graph) -> None:
    """Write what a first look at a snapshot asks for while the caller holds its graph
    (``import``, ``collect``, ``wp_open``, ``wp_collect``): the summary and the first page
    of every view in both formats, then the node index (entities, searches). The first
    ``show``, ``wp_summary``, ``wp_layer``, ``wp_entity`` or ``wp_search`` after it, in this
    process or another, reads a row and never the graph; the rest of a chain is stored by
    the first ``show`` of it, or the MCP server's background build. A failure is logged:
    the snapshot is stored, and an answer not written is rendered from the graph."""
    build_pages_quietly(store, snapshot_id, graph, limit=FIRST_PAGES)
    build_node_index_quietly(store, snapshot_id, graph)


def build_pages_quietly(
    store: Store,
    snapshot_id: str,
    graph: Graph,
    limit: int | None = EAGER_PAGES,
    only: tuple[str, str] | None = None,
) -> None:
    """:func:`build_pages` for a caller whose work is done once the snapshot is stored:
    pages are a copy of what rendering gives, so a page that cannot be built or stored
    (a full disk) is logged and left to be rendered when asked for."""
    try:
        build_pages(store, snapshot_id, graph, limit, only)
    except Exception as exc:  # noqa: BLE001 - the snapshot is stored; this is a cache
        log.warning("pages of snapshot %s not stored: %s", snapshot_id, error_line(exc))


def keep_pages(
    store: Store, snapshot_id: str, chain: tuple[str, str, int], pages: Walk, stored: int = 0
) -> bool:
    """Store ``pages`` of one chain (view or entity key, format, budget) after the
    ``stored`` ones, in batches; False once the snapshot is gone."""
    batch: list[tuple[str, bytes]] = []
    next_cursor: str | None = None
    for cursor, page in pages:
        batch.append((cursor, encoded(page)))
        stored, next_cursor = stored + 1, page.next_cursor
        if len(batch) >= _PAGE_BATCH:
            if not store.pages.write(snapshot_id, chain, batch, (stored, next_cursor)):
                return False
            batch = []
    return not batch or store.pages.write(snapshot_id, chain, batch, (stored, next_cursor))


def walk(graph: Graph, snapshot_id: str, view: str, fmt: str, cursor: str | None,
         count: int | None, budget: int = STORED_BUDGET, **options: Any) -> Walk:  # fmt: skip
    """The pages of one view from ``cursor`` on, at most ``count``, each with the cursor
    asking for it ('' for the first); ``options``: an entity view's entity and depth."""
    while count is None or count > 0:
        page = render_view(
            graph, view, fmt=fmt, cursor=cursor, max_tokens=budget, snapshot_id=snapshot_id,
            **options,
        )  # fmt: skip
        yield cursor or "", page
        if not page.next_cursor:
            return
        cursor = page.next_cursor
        count = None if count is None else count - 1


def page_record(page: Page) -> dict[str, Any]:
    """A page's fields as plain values (what a stored row holds)."""
    return {field.name: getattr(page, field.name) for field in dataclasses.fields(page)}


def encoded(page: Page) -> bytes:
    """The row of a page (converters/show_path.py :func:`~.show_path.page_fields` reads it)."""
    return zlib.compress(orjson.dumps(page_record(page)), 1)


# ---------------------------------------------------------------------- node index


def build_node_index(store: Store, snapshot_id: str, graph: Graph) -> None:
    """Store the rows an entity or a search of this snapshot reads instead of the graph
    (unless the current format's are stored already)."""
    if store.read_only or store.index.fingerprint(snapshot_id) is not None:
        return
    store.index.write(snapshot_id, *index_rows(graph))


def build_node_index_quietly(store: Store, snapshot_id: str, graph: Graph) -> None:
    """:func:`build_node_index` for a caller that has its answer already: an index that
    cannot be built (a full disk, a host string SQLite cannot hold) is logged, and entities
    and searches of the snapshot are answered from the graph."""
    try:
        build_node_index(store, snapshot_id, graph)
    except Exception as exc:  # noqa: BLE001 - the snapshot is stored; this is a cache
        log.warning("node index of snapshot %s not stored: %s", snapshot_id, error_line(exc))


def index_rows(graph: Graph) -> tuple[str, Iterator[NodeRow], Iterator[EdgeRow]]:
    """The whole graph's fingerprint and the rows of its node index, made as the store
    reads them (the nodes in id order): none is held longer than its write."""
    by_id = map(graph.nodes.__getitem__, sorted(graph.nodes))
    nodes = (_indexed(node, element_dumps(node)) for node in by_id)
    edges = (
        (seq, edge.src, edge.dst, element_dumps(edge)) for seq, edge in enumerate(graph.edges())
    )
    return index_for(graph).fingerprint, nodes, edges


def _indexed(node: Node, record: bytes) -> NodeRow:
    name, others = searched_values(node)
    lower_name = name_key(node)
    other = "\n".join(others).lower()
    cut = None if name is None else name.lower()  # the name as the haystack holds it
    if cut is not None and not lower_name.startswith(cut):  # cut where lower() reads ahead
        other = f"{cut}\n{other}"
    return NodeRow(
        node.id,
        f"{ID_FRAME}{node.id.lower()}{ID_FRAME}",
        f"{NAME_FRAME}{lower_name}{NAME_FRAME}",
        f"\n{other}\n",
        record,
    )


def store_entity_pages(
    store: Store,
    snapshot_id: str,
    entity: str,
    depth: int,
    fmt: str,
    budget: int,
    count: int,
    cursor: str | None = None,
) -> None:
    """Store ``count`` pages of an entity's view from ``cursor`` on, rendered from its node
    index's part once: the next call of any of them reads its row as a view's stored page
    is read (converters/show_path.py), without the index's rows or the token encoder."""
    part = entity_part(store, snapshot_id, entity, depth)
    if part is None or store.read_only:
        return
    options = {"entity": entity, "depth": depth}
    pages = walk(part, snapshot_id, "entity", fmt, cursor, count, budget, **options)
    keep_pages(store, snapshot_id, (entity_view(entity, depth), fmt, budget), pages)


def store_entity_pages_quietly(
    store: Store,
    snapshot_id: str,
    entity: str,
    depth: int,
    fmt: str,
    budget: int,
    count: int,
    cursor: str | None = None,
) -> None:
    """:func:`store_entity_pages` after the answer is out: a failure is logged."""
    try:
        store_entity_pages(store, snapshot_id, entity, depth, fmt, budget, count, cursor)
    except Exception as exc:  # noqa: BLE001 - the answer is out; this is a cache
        log.warning("pages of entity %s not stored: %s", excerpt(entity), error_line(exc))
