"""Processes that start and exit while the window is open never fail a windowed collector."""

from __future__ import annotations

import subprocess

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.metrics import MetricsCollector
from wp_mcp.collectors.numa import NumaCollector
from wp_mcp.graph import Graph

pytestmark = pytest.mark.slow  # a few seconds of process churn

CHURN = "for round in 1 2 3 4; do for i in $(seq 50); do sleep 0.0$((i % 9)) & done; wait; done"


@pytest.mark.parametrize("collector_class", [MetricsCollector, NumaCollector])
def test_two_hundred_short_lived_processes(collector_class):
    churn = subprocess.Popen(["bash", "-c", CHURN])
    try:
        graph = Graph()
        collector = collector_class()
        ctx = Context(window_s=0.5)
        collector.begin(ctx)
        outcomes = [collector.collect(graph, ctx)]
        for _ in range(3):  # several windows while the churn runs
            outcomes.append(collector_class().collect(Graph(), ctx))
    finally:
        churn.wait(timeout=60)
    assert all(o.status in ("ok", "partial") for o in outcomes), outcomes
    assert graph.of_kind("process")
