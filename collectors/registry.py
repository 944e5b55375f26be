"""Which collectors a live snapshot runs.

``COLLECTORS`` lists one ``"module:Class"`` string per collector, in the order their results
are merged (later ones may refine attributes set by earlier ones). Each collector module adds
its own line here; nothing else needs to change for a new source to be picked up. A class
may declare ``after = ("procfs", …)`` (see ``collectors/base.py``) when it needs another
collector's nodes before it can work.

``load(spec)`` imports one entry; ``default_collectors`` builds the instances for a
collection, standing an ``UnavailableCollector`` in for one whose module cannot load.
"""

from __future__ import annotations

import importlib

from .base import Collector, Context

COLLECTORS: list[str] = [
    "wp_mcp.collectors.procfs:ProcfsCollector",
    "wp_mcp.collectors.sockets:SocketsCollector",
    "wp_mcp.collectors.containers:ContainersCollector",
    "wp_mcp.collectors.cgroups:CgroupsCollector",
    "wp_mcp.collectors.rankenv:RankEnvCollector",
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


class UnavailableCollector(Collector):
    """Stands in for a registered collector whose module cannot be imported here (a missing
    optional dependency): it is recorded as skipped with the import error as the reason."""

    def __init__(self, name: str, reason: str, tier: str = "T0") -> None:
        self.name = name  # type: ignore[misc]
        self.tier = tier  # type: ignore[misc]
        self._reason = reason

    def probe(self, ctx: Context) -> str | None:
        return self._reason


def default_collectors(ctx: Context | None = None) -> list[Collector]:
    """One fresh instance of every registered collector, in registry order."""
    found: list[Collector] = []
    for spec in COLLECTORS:
        try:
            found.append(load(spec)())
        except Exception as exc:  # an optional source must never break a snapshot
            module = spec.partition(":")[0].rsplit(".", 1)[-1]
            found.append(UnavailableCollector(module, f"cannot load {spec}: {exc}"))
    return found
