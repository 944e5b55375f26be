"""The summary's per-layer costs are what reading each layer really costs: the item count
exactly, the tokens over all its pages within ±25 % (sampled above 3,000 items)."""

from __future__ import annotations

import json

import pytest
from view_pages import pages
from wp_mcp.converters import render_view
from wp_mcp.graph.graph import Graph

LAYERS = ("compute", "memory", "interconnect", "network", "storage", "control", "data")


def costs_against_pages(graph: Graph) -> dict[str, tuple[int, int, int, int]]:
    """Per layer: (items listed, items paged, tokens listed, tokens over all pages)."""
    listed = json.loads(render_view(graph, "summary", fmt="json").text)["layers"]
    out = {}
    for layer in LAYERS:
        read = pages(graph, layer)
        out[layer] = (
            listed[layer]["items"],
            read[0].total_items,
            listed[layer]["tokens"],
            sum(page.tokens for page in read),
        )
    return out


@pytest.mark.parametrize("graph_name", ["witty", "cluster"])
def test_each_layer_costs_what_the_summary_says(graph_name, request):
    graph = request.getfixturevalue(graph_name)
    for layer, (items, paged, tokens, real) in costs_against_pages(graph).items():
        assert items == paged, layer
        if paged:  # an empty layer is one short page saying so, listed as 0
            assert 0.75 * real <= tokens <= 1.25 * real, (layer, tokens, real)
