"""Which collectors a live snapshot runs.

``COLLECTORS`` lists one ``"module:Class"`` string per collector, in the order their results
are merged (later ones may refine attributes set by earlier ones). Each collector module adds
its own line here; nothing else needs to change for a new source to be picked up. A class
may declare ``after = ("procfs", …)`` (see ``collectors/base.py``) when it needs another
collector's nodes before it can work.

``load(spec)`` imports one entry; ``default_collectors`` in ``wp_mcp.collectors`` builds the
instances for a collection.
"""

from __future__ import annotations

import importlib

from .base import Collector

COLLECTORS: list[str] = [
    "wp_mcp.collectors.procfs:ProcfsCollector",
    "wp_mcp.collectors.sockets:SocketsCollector",
    "wp_mcp.collectors.containers:ContainersCollector",
    "wp_mcp.collectors.ipc:IpcCollector",
    "wp_mcp.collectors.metrics:MetricsCollector",
    "wp_mcp.collectors.numa:NumaCollector",
    "wp_mcp.collectors.gpu:GpuCollector",
    "wp_mcp.collectors.npu:NpuCollector",
    "wp_mcp.collectors.nic:NicCollector",
    "wp_mcp.collectors.rdma:RdmaCollector",
    "wp_mcp.collectors.disk:DiskCollector",
    "wp_mcp.collectors.waits:WaitsCollector",
    "wp_mcp.collectors.pci:PciCollector",
    "wp_mcp.collectors.ebpf:EbpfCollector",
]


def load(spec: str) -> type[Collector]:
    """Import ``"package.module:Class"`` and return the class."""
    module_name, _, class_name = spec.partition(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name)
    if not (isinstance(cls, type) and issubclass(cls, Collector)):
        raise TypeError(f"{spec} is not a Collector subclass")
    return cls
