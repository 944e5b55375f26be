"""wp_mcp.graph: the graph model, its formats (native, witty-profiler) and the snapshot store."""

from .errors import FormatError, UserError
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

__all__ = [
    "FORMAT_NAME", "FORMAT_VERSION", "CollectorStatus", "Edge", "Graph", "GraphError", "Meta",
    "Node", "make_edge", "make_node", "FormatError", "UserError",
]  # fmt: skip
