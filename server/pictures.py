"""The picture of a snapshot with every skill's findings marked: one function for the CLI's
``picture`` command, the served ``/picture`` page and the MCP App."""

from __future__ import annotations

from wp_mcp.converters.picture import Picture, build_picture
from wp_mcp.graph.graph import Graph
from wp_mcp.skills import diagnose


def picture_of(graph: Graph) -> Picture:
    """The picture of a graph with every skill's findings marked."""
    return build_picture(graph, diagnose(graph).findings)
