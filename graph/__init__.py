"""wp_mcp.graph: the graph model, its formats (native, witty-profiler) and the snapshot store.

The names below load on first use (PEP 562): importing a light module of this package (the
store, safetext, errors) must not load the model and pydantic with it — a page read from the
store needs neither (docs/architecture.md, the store).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import FormatError, UserError

if TYPE_CHECKING:
    from .graph import Graph, GraphError
    from .model import (
        FORMAT_NAME,
        FORMAT_VERSION,
        CollectorStatus,
        Edge,
        Meta,
        Node,
        make_edge,
        make_node,
    )

_LAZY = {
    **dict.fromkeys(("Graph", "GraphError"), ".graph"),
    **dict.fromkeys(
        ("FORMAT_NAME", "FORMAT_VERSION", "CollectorStatus", "Edge", "Meta", "Node",
         "make_edge", "make_node"),
        ".model",
    ),
}  # fmt: skip

__all__ = [
    "FORMAT_NAME", "FORMAT_VERSION", "CollectorStatus", "Edge", "Graph", "GraphError", "Meta",
    "Node", "make_edge", "make_node", "FormatError", "UserError",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
