"""Fixtures for the converter tests: the witty capture, synthetic clusters, hostile graphs."""

from __future__ import annotations

import pytest
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.witty import load_witty
from wp_synthetic import cluster_graph


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds and pages through a ≥1M-edge graph (minutes)")


@pytest.fixture(scope="session")
def witty(witty_path) -> Graph:
    return load_witty(witty_path)


@pytest.fixture(scope="session")
def cluster() -> Graph:
    """Eight hosts of the benchmark generator: every kind of node, ~13K edges."""
    return cluster_graph(8)
