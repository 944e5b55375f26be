"""render_view: one page of one view, in one format, under a token budget, with a cursor.

The budget holds by construction: the frame (header, legend, closing line with the longest
possible cursor) is reserved first, then items are added while the sum of their cached token
counts fits with a margin; the assembled page is counted once more and trimmed if merging
at line ends ever costs more than the parts (it practically never does).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wp_mcp.graph.blake import blake2b
from wp_mcp.graph.gcpause import cyclic_gc_paused
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.safetext import escape

from . import cursor as cursors
from . import filters as filtering
from .catalog import SPECIAL
from .cursor import CursorState, ViewError
from .entity import entity_items
from .formats import DIAGRAM_VIEWS, FORMAT_CLASSES, FORMATS, Form, Frame, dumps
from .index import ViewIndex, index_for
from .items import Item
from .text import word
from .tokens import (
    DEFAULT_MAX_TOKENS,
    HARD_MAX_TOKENS,
    MIN_MAX_TOKENS,
    count_tokens,
    tokens_at_most,
)
from .views import View, names, view_named

# Up to this many items, every page boundary is computed so the header's "page k/n" is
# exact; above it n is estimated from the current page (and marked "~").
EXACT_LAYOUT_LIMIT = 3000
MARGIN_SHARE = 0.02


class _CountedOnFirstRead:
    """A page's ``tokens``: its text's, counted when first read, not when it is laid out.
    A page the CLI prints is never counted, nor one laid out within the byte bound
    (``_within_bound``): no encoder is loaded for it. (A descriptor-typed dataclass field:
    its default, -1, means "not counted yet"; ``dataclasses.fields`` still lists it.)"""

    def __get__(self, page: Page | None, owner: type | None = None) -> int:
        if page is None:
            return -1
        counted: int = page.__dict__.get("_tokens", -1)
        if counted < 0:
            counted = page.__dict__["_tokens"] = count_tokens(page.text)
        return counted

    def __set__(self, page: Page, tokens: int) -> None:
        page.__dict__["_tokens"] = tokens


@dataclass
class Page:
    text: str
    next_cursor: str | None
    page: int
    pages: int
    total_items: int
    view: str
    fmt: str
    pages_exact: bool = True
    first_item: int = 0  # 0-based offset of the first item on this page
    item_count: int = 0
    ids: tuple[str, ...] = field(default=())  # entities the items of this page stand for
    max_tokens: int = DEFAULT_MAX_TOKENS
    tokens: _CountedOnFirstRead = _CountedOnFirstRead()


def clamp_budget(max_tokens: Any) -> tuple[int, str | None]:
    """The budget to use and, when the request was out of range, a note saying so."""
    try:
        asked = int(max_tokens)
    except (TypeError, ValueError):
        raise ViewError(
            f"max_tokens must be a number between {MIN_MAX_TOKENS} and {HARD_MAX_TOKENS}"
        ) from None
    if asked > HARD_MAX_TOKENS:
        return HARD_MAX_TOKENS, f"max_tokens capped at {HARD_MAX_TOKENS}"
    if asked < MIN_MAX_TOKENS:
        return MIN_MAX_TOKENS, f"max_tokens raised to the minimum {MIN_MAX_TOKENS}"
    return asked, None


def check_request(view: str, fmt: str) -> None:
    if view not in SPECIAL and view_named(view) is None:
        raise ViewError(
            f"unknown view {escape(str(view), 40)}; views: {', '.join(names())} (start with summary)"
        )
    if fmt not in FORMATS:
        raise ViewError(f"unknown format {escape(str(fmt), 20)}; formats: {', '.join(FORMATS)}")
    if fmt in ("mermaid", "dot") and view not in DIAGRAM_VIEWS:
        raise ViewError(
            f"{fmt} renders only the {' and '.join(DIAGRAM_VIEWS)} views; use format txt or "
            f"json for {view}"
        )


def snapshot_label(index: ViewIndex, snapshot_id: str | None) -> str:
    return word(snapshot_id, 40) if snapshot_id else f"fp:{index.fingerprint}"


def view_items(
    graph: Graph,
    view: str,
    filters: Mapping[str, Any] | None = None,
    entity: str | None = None,
    depth: int = 1,
) -> list[Item]:
    """The items of a view after filters, in page order (what paging walks through)."""
    index = index_for(graph)
    items = _all_items(index, view, entity, depth)
    parsed = filtering.parse(filters)
    return index.filtered((view, entity, depth, parsed.items), items, _keep(parsed, graph, view))


def _keep(parsed: filtering.Filters, graph: Graph, view: str) -> Callable[[Item], bool] | None:
    """What the filters keep; an entity's own lines always (its filters narrow the
    neighbours)."""
    narrow = parsed.predicate(graph)
    if view != "entity" or narrow is None:
        return narrow
    return lambda item: item.indent == 0 or item.kind == "attribute" or narrow(item)


def _all_items(index: ViewIndex, view: str, entity: str | None, depth: int) -> list[Item]:
    if view == "entity":
        return index.items(f"entity\0{entity}\0{depth}", lambda f: entity_items(f, entity, depth))
    return index.items(view, _registered(view).build)


def _registered(name: str) -> View:
    """The view ``name``, which ``check_request`` found (its module alone imported)."""
    found = view_named(name)
    if found is None:
        raise ViewError(f"unknown view {escape(str(name), 40)}")
    return found


def paged(graph: Graph, view: str, **options: Any) -> Page:
    """One page (see :func:`_paged`), without cyclic-GC passes over a huge heap meanwhile."""
    with cyclic_gc_paused():
        return _paged(graph, view, **options)


@dataclass
class _Request:
    """One page asked for: the view's items after filters, where the page starts, and what
    its frame says."""

    view: str
    fmt: str
    form: Form
    items: list[Item]
    offset: int  # the page's first item
    page_no: int
    scope: str  # the filters' (and an entity's) digest, which cursors carry
    scope_text: str  # the filters (and an entity) as the header shows them
    filters: dict[str, Any]
    fingerprint: str
    snap: str
    legend: str
    budget: int
    budget_note: str | None
    layout_key: tuple[Any, ...]  # the page layout's, cached on the view index


def _paged(
    graph: Graph,
    view: str,
    *,
    fmt: str,
    cursor: str | None,
    budget: int,
    budget_note: str | None,
    filters: Mapping[str, Any] | None,
    entity: str | None,
    depth: int,
    snapshot_id: str | None,
    legend: str | None = None,
) -> Page:
    index = index_for(graph)
    request = _request(
        index, graph, view, fmt, cursor, budget, budget_note, filters, entity, depth,
        snapshot_id, legend,
    )  # fmt: skip
    whole = _whole_by_bound(request)
    return whole if whole is not None else _laid_out(index, request)


def _request(
    index: ViewIndex,
    graph: Graph,
    view: str,
    fmt: str,
    cursor: str | None,
    budget: int,
    budget_note: str | None,
    filters: Mapping[str, Any] | None,
    entity: str | None,
    depth: int,
    snapshot_id: str | None,
    legend: str | None,
) -> _Request:
    parsed = filtering.parse(filters)
    all_items = _all_items(index, view, entity, depth)
    items = index.filtered(
        (view, entity, depth, parsed.items), all_items, _keep(parsed, graph, view)
    )
    scope, scope_text = parsed.digest, parsed.describe()
    if view == "entity":  # the entity id can be long: the cursor keeps only a digest
        scope = blake2b(f"{scope}\0{entity}\0{depth}".encode(), digest_size=6).hexdigest()
        scope_text = f"entity={word(entity, 60)} depth={depth} {scope_text}".strip()
    offset, page_no = 0, 1
    if cursor:
        state = cursors.decode(cursor)
        cursors.check(state, view, fmt, scope, index.fingerprint)
        if state.offset > len(items):
            raise ViewError("cursor points past the end of this view; call it without a cursor")
        offset, page_no = state.offset, state.page
    return _Request(
        view=view,
        fmt=fmt,
        form=FORMAT_CLASSES[fmt](),
        items=items,
        offset=offset,
        page_no=page_no,
        scope=scope,
        scope_text=scope_text,
        filters=dict(parsed.items),
        fingerprint=index.fingerprint,
        snap=snapshot_label(index, snapshot_id),
        legend=legend or _registered(view).legend,
        budget=budget,
        budget_note=budget_note,
        layout_key=(view, entity, depth, parsed.items, fmt, budget),
    )


def _whole_by_bound(request: _Request) -> Page | None:
    """The whole view on one page when the byte bound of every part fits: it is what exact
    counting lays out then (each count is at most its bound, each room at least its
    bound's), and no token is counted, no encoder loaded. None otherwise."""
    items = request.items
    if request.offset or len(items) > EXACT_LAYOUT_LIMIT:
        return None
    room = _room(request, tokens_at_most)
    if not _within_bound(items, room, _bound_cost(request.form)):
        return None
    text, _none = _assemble(request, len(items), room, 1, True, _bound_cost(request.form))
    if tokens_at_most(text) > request.budget:
        return None
    return _page(request, text, None, len(items), 1, True)


def _laid_out(index: ViewIndex, request: _Request) -> Page:
    """The page laid out by exact token counts, its tokens counted."""
    cost = _exact_cost(request.form)
    room = _room(request, count_tokens)
    end = _fill(request.items, request.offset, room, cost)
    pages_total, exact = _page_count(index, request, end, room, cost)
    text, next_cursor = _assemble(request, end, room, pages_total, exact, cost)
    tokens = count_tokens(text)
    while tokens > request.budget:
        # Joined lines cost more than their parts (rare, odd Unicode): move the last item to
        # the next page, or cut the only one shorter.
        if end > request.offset + 1:
            end -= 1
            exact = False
        else:
            room = max(1, room - (tokens - request.budget) - 8)
        text, next_cursor = _assemble(request, end, room, pages_total, exact, cost)
        tokens = count_tokens(text)
    page = _page(request, text, next_cursor, end, pages_total, exact)
    page.tokens = tokens  # counted already: kept
    return page


def _exact_cost(form: Form) -> Callable[[Item], int]:
    return lambda item: form.piece(item)[1]


def _bound_cost(form: Form) -> Callable[[Item], int]:
    return lambda item: tokens_at_most(form.text(item)) + 1


def _frame(request: _Request, first: int, count: int, pages: str, closing: str) -> Frame:
    """The page's header, legend, closing line and JSON facts (``pages``: "n" or "~n")."""
    total = len(request.items)
    shown = f"{first + 1}-{first + count}" if count else "0"
    filters_part = f" {request.scope_text}" if request.scope_text else ""
    note = f" ({request.budget_note})" if request.budget_note else ""
    header = (
        f"#wp {request.view} snap={request.snap} page {request.page_no}/{pages} items {shown} "
        f"of {total}{filters_part} budget={request.budget}{note}"
    )
    info = {
        "format": "wp-graph",
        "version": 1,
        "view": request.view,
        "snapshot": request.snap,
        "page": request.page_no,
        "pages": int(pages.lstrip("~")),
        "pages_exact": not pages.startswith("~"),
        "total_items": total,
        "first_item": first + 1 if count else 0,
        "items_on_page": count,
        "filters": request.filters,
        "budget": request.budget,
    }
    return Frame(header, f"#legend {request.legend}", closing, info)


def _room(request: _Request, count: Callable[[str], int]) -> int:
    """Tokens left for items once the frame is reserved at its worst (widest numbers, the
    longest cursor); ``count``: exact, or a bound."""
    worst_cursor = cursors.encode(
        CursorState(request.view, request.fmt, request.scope, request.fingerprint, 10**9, 10**6)
    )
    closing = _closing(request.view, 10**9, 10**6, worst_cursor, request.scope_text, 10**9)
    worst = _frame(request, 10**9, 10**6, f"~{10**6}", closing)
    reserve = count(worst.header) + count(worst.legend) + count(worst.closing)
    reserve += request.form.envelope_cost()
    if request.fmt == "json":
        reserve += count(dumps(worst.info))
    return max(1, int((request.budget - reserve) * (1 - MARGIN_SHARE)) - 4)


def _assemble(
    request: _Request, stop: int, room: int, pages_total: int, exact: bool,
    cost: Callable[[Item], int],
) -> tuple[str, str | None]:  # fmt: skip
    """The text of the page holding items ``offset`` to ``stop``, and the next cursor."""
    items, offset = request.items, request.offset
    remaining = len(items) - stop
    next_cursor = None
    if remaining:
        next_cursor = cursors.encode(
            CursorState(
                request.view, request.fmt, request.scope, request.fingerprint, stop,
                request.page_no + 1,
            )
        )  # fmt: skip
    closing = _closing(
        request.view, remaining, max(0, pages_total - request.page_no), next_cursor,
        request.scope_text, len(items),
    )  # fmt: skip
    pages_text = f"{pages_total}" if exact else f"~{pages_total}"
    frame = _frame(request, offset, stop - offset, pages_text, closing)
    pieces = [_fit(request.form, item, room, cost) for item in items[offset:stop]]
    return request.form.assemble(frame, pieces), next_cursor


def _page(
    request: _Request, text: str, next_cursor: str | None, end: int, pages: int, exact: bool
) -> Page:
    items, offset = request.items, request.offset
    return Page(
        text=text,
        next_cursor=next_cursor,
        page=request.page_no,
        pages=pages,
        total_items=len(items),
        view=request.view,
        fmt=request.fmt,
        pages_exact=exact,
        first_item=offset,
        item_count=end - offset,
        ids=tuple(i for item in items[offset:end] for i in item.ids),
        max_tokens=request.budget,
    )


def _within_bound(items: list[Item], room: int, bound: Callable[[Item], int]) -> bool:
    """Whether the bounds of all items sum to at most ``room`` (stops at the first that
    does not fit: a long view is never rendered whole for this)."""
    used = 0
    for item in items:
        used += bound(item)
        if used > room:
            return False
    return True


def _fill(items: list[Item], offset: int, available: int, cost: Callable[[Item], int]) -> int:
    """Index after the last item that fits from ``offset`` (always at least one item)."""
    used = 0
    end = offset
    while end < len(items):
        used += cost(items[end])
        if used > available and end > offset:
            break
        end += 1
    return end


def _fit(form: Form, item: Item, available: int, cost: Callable[[Item], int]) -> str:
    """A single piece larger than a whole page (only possible with tiny budgets) is cut."""
    if cost(item) <= available:
        return form.text(item)
    piece = form.text(item)
    note = "too large for max_tokens; raise it or open the entity view"
    if form.name == "json":
        first = item.ids[0][:80] if item.ids else None
        return dumps({"cut_entities": len(item.ids), "first_id": first, "note": note})
    if form.name in ("mermaid", "dot"):
        return f"  {'%%' if form.name == 'mermaid' else '//'} one item cut: {note}"
    # Every token is at least one character, so this many characters always fit.
    keep = max(1, available - 8)
    return piece[:keep] + " …(cut: raise max_tokens or open it with the entity view)"


def _page_count(
    index: ViewIndex, request: _Request, end: int, available: int, cost: Callable[[Item], int]
) -> tuple[int, bool]:
    """How many pages the view has, and whether that is exact: every page boundary is
    computed (once per layout) up to ``EXACT_LAYOUT_LIMIT`` items, else estimated from this
    page's items."""
    items, offset = request.items, request.offset
    if not items:
        return 1, True
    if len(items) <= EXACT_LAYOUT_LIMIT:
        starts = index.layouts.get(request.layout_key)
        if starts is None:
            starts = [0]
            while (stop := _fill(items, starts[-1], available, cost)) < len(items):
                starts.append(stop)
            index.remember_layout(request.layout_key, starts)
        if offset in starts:
            return len(starts), True
    remaining = len(items) - end
    shown = max(1, end - offset)
    per_item = sum(cost(i) for i in items[offset:end]) / shown
    per_page = max(1, int(available / max(per_item, 1)))
    return request.page_no + math.ceil(remaining / per_page), False


def _closing(
    view: str, remaining: int, pages_left: int, next_cursor: str | None, scope: str, total: int
) -> str:
    if not total:
        why = "no item matches the filters" if scope else "nothing collected for this view"
        return f"#end (empty: {why}; the summary shows coverage)"
    if not remaining:
        return "#end"
    hint = ENTITY_NARROW if view == "entity" else _registered(view).narrow
    return (
        f"#more {remaining} items (~{max(pages_left, 1)} pages) not shown: pass cursor="
        f"{next_cursor} for the next page, or narrow with filters {hint}"
    )


ENTITY_NARROW = "kind=… (neighbour kind)"
