"""wp_mcp.converters: the graph as layers and views, in compact text or JSON, under a budget.

Public names (other stages code against these; docs/views.md and docs/compact-text.md say more):

- ``VIEWS``: "summary", the seven layers "compute", "memory", "interconnect", "network",
  "storage", "control", "data", and "topology", "flows", "entity".
- ``render_view(graph, view, *, fmt="txt", cursor=None, max_tokens=4000, filters=None,
  entity=None, depth=1, snapshot_id=None) -> Page``: one page; ``fmt`` is txt, json, mermaid
  or dot (the diagrams for topology and flows only). ``Page`` has ``text``, ``tokens``,
  ``next_cursor``, ``page``, ``pages`` (``pages_exact`` False when estimated), ``total_items``,
  ``view``, ``fmt``, ``first_item``, ``item_count``, ``ids`` (entities on the page).
- ``ViewError`` (a ``UserError``): an unknown view/format/filter, a stale cursor, …; its
  message says what to call instead.
- ``count_tokens(text) -> int``: cl100k (offline) tokens.
- ``search(graph, query, limit=20) -> Page``: entities by id, name, cmdline or address.
- ``view_items(graph, view, filters=None, entity=None, depth=1) -> list[Item]``: the items a
  view pages through (each with ``ids``, ``kind``, ``line``, ``tokens``).
- ``prepare(graph, views=None)``: build the views' indexes now (e.g. in a background thread
  right after a snapshot is opened) so that the first page of each is as fast as the others.
- ``DEFAULT_MAX_TOKENS`` (4000), ``HARD_MAX_TOKENS`` (8000), ``SUMMARY_MAX_TOKENS`` (300).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .catalog import VIEWS
from .tokens import DEFAULT_MAX_TOKENS, HARD_MAX_TOKENS, count_tokens

if TYPE_CHECKING:
    from wp_mcp.graph.graph import Graph

    from .cursor import ViewError
    from .render import Page, view_items
    from .search import search
    from .summary import SUMMARY_MAX_TOKENS

# Loaded on first use (PEP 562), so that reading a stored page, which needs only the names
# of the views, loads neither the renderers nor the graph model.
_LAZY = {
    "ViewError": ".cursor",
    "Page": ".render",
    "view_items": ".render",
    "search": ".search",
    "SUMMARY_MAX_TOKENS": ".summary",
}

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "HARD_MAX_TOKENS",
    "SUMMARY_MAX_TOKENS",
    "VIEWS",
    "Page",
    "ViewError",
    "count_tokens",
    "prepare",
    "render_view",
    "search",
    "view_items",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``search`` names the function, as it did when this package imported it eagerly:
    importing the submodule ``.search`` (which sets the package's attribute to the module,
    whoever imports it first) leaves the function in its place."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "search" and isinstance(value, types.ModuleType):
            value = value.search
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def render_view(
    graph: Graph,
    view: str,
    *,
    fmt: str = "txt",
    cursor: str | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    filters: Mapping[str, Any] | None = None,
    entity: str | None = None,
    depth: int = 1,
    snapshot_id: str | None = None,
) -> Page:
    """One page of ``view`` of ``graph``; pass the returned ``next_cursor`` for the next."""
    from .cursor import ViewError
    from .render import check_request, clamp_budget, paged

    check_request(view, fmt)
    budget, note = clamp_budget(max_tokens)
    if view == "summary":
        from .summary import render_summary

        if cursor:
            raise ViewError("the summary has a single page; call it without a cursor")
        return render_summary(graph, fmt if fmt == "json" else "txt", budget, snapshot_id, filters)
    return paged(
        graph,
        view,
        fmt=fmt,
        cursor=cursor,
        budget=budget,
        budget_note=note,
        filters=filters,
        entity=entity,
        depth=depth,
        snapshot_id=snapshot_id,
        legend=_entity_legend() if view == "entity" else None,
    )


def prepare(graph: Graph, views: tuple[str, ...] | None = None) -> None:
    """Build the item lists of ``views`` (default: every paged view) for ``graph`` now."""
    from .render import view_items

    for view in views or VIEWS:
        if view not in ("summary", "entity"):
            view_items(graph, view)


def _entity_legend() -> str:
    from .entity import LEGEND

    return LEGEND
