"""Following a view's cursors to the end (a module of its own: `from conftest import …`
resolves to whichever conftest.py was imported first when several test folders run)."""

from __future__ import annotations

from wp_mcp.graph.graph import Graph


def pages(graph: Graph, view: str, **options) -> list:
    """Every page of a view, following the cursors."""
    from wp_mcp.converters import render_view

    out = [render_view(graph, view, **options)]
    while out[-1].next_cursor:
        out.append(render_view(graph, view, cursor=out[-1].next_cursor, **options))
        assert len(out) < 100_000, "paging does not end"
    return out
