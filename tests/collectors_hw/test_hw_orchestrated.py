"""The NUMA, metrics and device collectors through the orchestrator: one window for all,
their graphs merged, statuses recorded, pci run after the device collectors."""

from __future__ import annotations

import os

from wp_mcp.collectors import collect_snapshot
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.disk import DiskCollector
from wp_mcp.collectors.gpu import GpuCollector
from wp_mcp.collectors.metrics import MetricsCollector
from wp_mcp.collectors.nic import NicCollector
from wp_mcp.collectors.npu import NpuCollector
from wp_mcp.collectors.numa import NumaCollector
from wp_mcp.collectors.pci import PciCollector
from wp_mcp.collectors.rdma import RdmaCollector


def test_one_snapshot_of_this_machine():
    collectors = [
        MetricsCollector(), NumaCollector(), GpuCollector(), NpuCollector(), NicCollector(),
        RdmaCollector(), DiskCollector(), PciCollector(),
    ]  # fmt: skip
    graph = collect_snapshot(Context(window_s=0.5, ebpf="off", pids={os.getpid()}), collectors)
    status = {s.name: s for s in graph.meta.collectors}
    assert set(status) == {c.name for c in collectors}
    for name in ("metrics", "numa", "nic", "disk", "pci"):
        assert status[name].status in ("ok", "partial"), status[name]
    for name in ("gpu", "npu", "rdma"):  # no such hardware here: skipped, and why
        assert status[name].status == "skipped" and status[name].reason
    me = graph.node(f"proc:{os.getpid()}")
    assert me.cpu_pct is not None and me.numa_locality == 1.0  # metrics and numa merged
    host = graph.node("host")
    assert host.cpu_busy_pct is not None and host.numa_balancing is not None
    assert graph.meta.capabilities["psi"] in (True, False)
    wired = [n for n in graph.of_kind("nic") if n.get("pci_bus_id")]
    assert all(graph.out_edges(n.id, "local_to") for n in wired)  # pci ran on the merged graph
