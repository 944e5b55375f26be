"""Pages rendered once per stored snapshot, and served from the store ever after.

A stored snapshot never changes, so every page a caller can ask for without filters is
known once it is stored: the summary, then each view followed from its first page through
every cursor, in compact text and JSON at the default budget. They are built lazily, not
when the snapshot is stored: rendering them costs far more than storing the graph (every
item of a layer is rendered and its tokens counted in both formats, and each page counted
again), so the first `wp-mcp show` of a view stores that view's pages in that format after
printing its answer, and the MCP server builds them all in the background after `wp_open`
or `wp_collect`. ``Store.build_pages`` writes
them as one row per page keyed by the cursor that asks for it; ``Store.page`` reads one row
back, so a page costs what it returns — neither the graph, nor the model, nor the token
encoder is loaded to serve it. A request for anything else (filters, another budget, an
entity, a diagram) is rendered from the graph as before.

The pages are built with the public ``render_view`` and nothing else, so what the store
serves is by construction what rendering the whole graph gives (tests/graph/
test_store_pages.py checks it page by page).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from wp_mcp.graph.graph import Graph

from . import render_view
from .catalog import VIEWS
from .render import Page
from .tokens import DEFAULT_MAX_TOKENS

STORED_VIEWS = tuple(view for view in VIEWS if view != "entity")  # entity needs an id
STORED_FORMATS = ("txt", "json")
STORED_BUDGET = DEFAULT_MAX_TOKENS

# (view, format, budget, pages stored before, the pages to store as (the cursor asking for
# each, '' for the first; its record))
Chain = tuple[str, str, int, int, Iterator[tuple[str, dict[str, Any]]]]
Progress = dict[tuple[str, str, int], tuple[int, str | None]]


def chains(
    graph: Graph,
    snapshot_id: str,
    progress: Progress,
    limit: int | None,
    views: tuple[str, ...] = STORED_VIEWS,
    formats: tuple[str, ...] = STORED_FORMATS,
) -> Iterator[Chain]:
    """The pages still to store for ``graph`` (of ``views`` in ``formats``): each chain
    resumes after its ``progress`` (pages stored, the next one's cursor; None once
    complete) and stops at ``limit``."""
    for view in (v for v in STORED_VIEWS if v in views):
        for fmt in (f for f in STORED_FORMATS if f in formats):
            stored, cursor = progress.get((view, fmt, STORED_BUDGET), (0, ""))
            room = None if limit is None else limit - stored
            if cursor is not None and (room is None or room > 0):
                pages = walk(graph, snapshot_id, view, fmt, cursor or None, room)
                yield view, fmt, STORED_BUDGET, stored, pages


def is_stored_chain(view: str, fmt: str, max_tokens: int) -> bool:
    """Whether the plain page of ``view`` in ``fmt`` at ``max_tokens`` belongs to a chain
    the store keeps (the caller has checked the request has no filters, entity or depth)."""
    return view in STORED_VIEWS and fmt in STORED_FORMATS and max_tokens == STORED_BUDGET


def walk(graph: Graph, snapshot_id: str, view: str, fmt: str, cursor: str | None,
         count: int | None, budget: int = STORED_BUDGET,
         **options: Any) -> Iterator[tuple[str, dict[str, Any]]]:  # fmt: skip
    """The pages of one view from ``cursor`` on, at most ``count``: the cursor asking for
    each ('' for the first) and its record (``options``: an entity view's entity and depth)."""
    while count is None or count > 0:
        page = render_view(
            graph, view, fmt=fmt, cursor=cursor, max_tokens=budget, snapshot_id=snapshot_id,
            **options,
        )  # fmt: skip
        yield cursor or "", page_record(page)
        if not page.next_cursor:
            return
        cursor = page.next_cursor
        count = None if count is None else count - 1


def page_record(page: Page) -> dict[str, Any]:
    """A page's fields as plain values (what the store keeps and ``StoredPage`` takes)."""
    return {field.name: getattr(page, field.name) for field in dataclasses.fields(page)}
