"""As an unprivileged user the windowed and device collectors still produce their nodes, and
say which processes they could not read (root test: it drops privileges in a forked child)."""

from __future__ import annotations

from pathlib import Path

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.disk import DiskCollector
from wp_mcp.collectors.metrics import MetricsCollector
from wp_mcp.collectors.nic import NicCollector
from wp_mcp.collectors.numa import NumaCollector
from wp_mcp.collectors.pci import PciCollector
from wp_mcp.graph import Graph
from wp_nobody import as_nobody

pytestmark = pytest.mark.root  # drops privileges in a forked child

COLLECTORS = (MetricsCollector, NumaCollector, NicCollector, DiskCollector, PciCollector)


def run_as_nobody() -> dict:
    def collect() -> dict:
        report = {}
        ctx = Context(window_s=0.2)
        for cls in COLLECTORS:
            graph = Graph()
            outcome = cls().collect(graph, ctx)
            report[cls.name] = {"status": outcome.status, "reason": outcome.reason,
                                "kinds": graph.kinds()}  # fmt: skip
        return report

    return as_nobody(collect)


def test_collectors_degrade_to_partial_with_a_reason():
    report = run_as_nobody()
    assert "error" not in report, report.get("error")
    assert report["metrics"]["status"] == "partial"
    assert "I/O counters unreadable" in report["metrics"]["reason"]
    assert report["metrics"]["kinds"]["thread"] > 0 and report["metrics"]["kinds"]["host"] == 1
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    if len(nodes) == 1:  # every page is on the one node: statm answers, for any user
        assert report["numa"]["status"] == "ok"
    else:
        assert "numa_maps unreadable" in report["numa"]["reason"]
    assert report["numa"]["kinds"]["numa_node"] >= 1
    assert report["nic"]["status"] == "ok" and report["nic"]["kinds"]["nic"] >= 1
    assert report["disk"]["status"] == "ok"
    assert report["pci"]["status"] == "ok"
