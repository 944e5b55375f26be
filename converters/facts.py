"""Per-graph lookups the views share (thread → process, process → devices, holders, …).

Built once per graph on first use (the view index caches one ``Facts`` per graph), so a view
never rescans the whole edge list to answer a neighbour question.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from wp_mcp.graph import ids, query
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Edge, Element, Node
from wp_mcp.graph.query import device_numa_node

PROCESS = "process"
PATH_ENDS = ("gpu", "npu", "nic", "rdma_device", "pci_bridge")


def attr(element: Element, name: str) -> Any:
    """An attribute of a node or edge, extras included, ``None`` when unset (what
    ``element.get(name)`` answers, without the method call: views read a handful of
    attributes of every node of a million-edge graph)."""
    return element.__dict__.get(name)


class Facts:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    @cached_property
    def thread_owner(self) -> dict[str, str]:
        """thread id → process id (from has_thread edges, else the thread's pid)."""
        return query.thread_owner(self.graph)

    @cached_property
    def threads_of(self) -> dict[str, list[Node]]:
        return query.threads_by_process(self.graph, self.thread_owner)

    @cached_property
    def talks_to(self) -> list[Edge]:
        """Every talks_to edge, found from the processes (Graph.edges(kind) scans all edges)."""
        return [
            edge
            for process in self.graph.of_kind(PROCESS)
            for edge in self.graph.out_edges(process.id, "talks_to")
        ]

    @cached_property
    def paths(self) -> list[Edge]:
        """Every path edge (device↔device/nic), found from the devices."""
        return [
            edge
            for kind in PATH_ENDS
            for node in self.graph.of_kind(kind)
            for edge in self.graph.out_edges(node.id, "path")
        ]

    def devices_of(self, process_id: str) -> list[str]:
        return [e.dst for e in self.graph.out_edges(process_id, "uses_device")]

    def users_of(self, device_id: str) -> list[str]:
        return [e.src for e in self.graph.in_edges(device_id, "uses_device")]

    def holders(self, object_id: str) -> list[str]:
        """Processes holding a socket, pipe, shm or queue."""
        return sorted({e.src for e in self.graph.in_edges(object_id, "holds")})

    def device_numa(self, device_id: str) -> int | None:
        node = self.graph.nodes.get(device_id)
        return device_numa_node(self.graph, node)[0] if node is not None else None

    def container_of(self, process_id: str) -> str | None:
        edges = self.graph.out_edges(process_id, "in_container")
        return edges[0].dst if edges else None

    def parent_of(self, process_id: str) -> str | None:
        edges = self.graph.in_edges(process_id, "parent_of")
        return edges[0].src if edges else None

    def children_of(self, process_id: str) -> list[str]:
        return [e.dst for e in self.graph.out_edges(process_id, "parent_of")]

    def name_of(self, node_id: str) -> str | None:
        node = self.graph.nodes.get(node_id)
        return attr(node, "name") if node is not None else None

    @cached_property
    def cpu_hosts(self) -> dict[str, int]:
        """Host prefix → CPU count, to tell a restricted affinity from "all CPUs"."""
        counts: dict[str, int] = {}
        for host in self.graph.of_kind("host"):
            if attr(host, "cpus"):
                counts[ids.split_host(host.id)[0]] = int(attr(host, "cpus"))
        return counts
