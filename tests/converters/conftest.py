"""Fixtures for the converter tests: the witty capture, synthetic clusters, hostile graphs."""

from __future__ import annotations

import pytest
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.synthetic import cluster_graph
from wp_mcp.graph.witty import load_witty


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds and pages through a ≥1M-edge graph (minutes)")


@pytest.fixture(scope="session")
def witty(witty_path) -> Graph:
    return load_witty(witty_path)


@pytest.fixture(scope="session")
def cluster() -> Graph:
    """Eight hosts of the benchmark generator: every kind of node, ~13K edges."""
    return cluster_graph(8)


def pages(graph: Graph, view: str, **options) -> list:
    """Every page of a view, following the cursors."""
    from wp_mcp.converters import render_view

    out = [render_view(graph, view, **options)]
    while out[-1].next_cursor:
        out.append(render_view(graph, view, cursor=out[-1].next_cursor, **options))
        assert len(out) < 100_000, "paging does not end"
    return out
