"""The graph's look-ups (``graph.query``) answered once per graph, for the views and the rules.

The views read a ``Facts``, and the skills' ``Analysis`` asks the same ``Facts`` before
judging, so a view never disagrees with the rule it explains. What is built from the whole
graph (thread owners, children by ppid, every talks_to and path edge, the profiler's own
processes) is built once per graph on first use (the view index caches one ``Facts`` per
graph), so a view never rescans the whole edge list to answer a neighbour question.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import cached_property
from typing import Any

from wp_mcp.graph import query
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Edge, Element, Node
from wp_mcp.graph.query import device_numa_node

PROCESS = "process"
PATH_ENDS = ("gpu", "npu", "nic", "rdma_device", "pci_bridge")
# wp-mcp's own command line (the console script, ``python -m wp_mcp…``) on snapshots that do
# not record the collecting pid
_PROFILER_CMDLINE = re.compile(r"(^|[\s/])wp-mcp(\s|$)|-m\s+wp_mcp(\.|\s|$)")


def attr(element: Element, name: str) -> Any:
    """An attribute of a node or edge, extras included, ``None`` when unset (what
    ``element.get(name)`` answers, without the method call: views read a handful of
    attributes of every node of a million-edge graph)."""
    return element.__dict__.get(name)


class Facts:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._holders: dict[str, tuple[str, ...]] = {}

    @cached_property
    def thread_owner(self) -> dict[str, str]:
        """thread id → process id (from has_thread edges, else the thread's pid)."""
        return self._threads[0]

    @cached_property
    def threads_of(self) -> dict[str, list[Node]]:
        """process id → its threads, in the graph's order."""
        return self._threads[1]

    @cached_property
    def _threads(self) -> tuple[dict[str, str], dict[str, list[Node]]]:
        return query.thread_owners(self.graph)

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
        return query.devices_of(self.graph, process_id)

    def accelerators_of(self, process_id: str) -> list[Node]:
        """The GPUs and NPUs a process uses (what ranks and placements are judged by)."""
        return query.accelerators_of(self.graph, process_id)

    def socket_owners(self, socket_id: str) -> list[str]:
        """The processes using a socket, not the children that inherited it (graph.query)."""
        return query.socket_owners(self.graph, socket_id)

    def users_of(self, device_id: str) -> list[str]:
        return query.users_of(self.graph, device_id)

    def holders(self, object_id: str) -> tuple[str, ...]:
        """Processes holding a socket, pipe, shm or queue, sorted (found once: a view asks
        for each object's several times, for its fold key, its item and its line)."""
        found = self._holders.get(object_id)
        if found is None:
            edges = self.graph.in_edges(object_id, "holds")
            found = self._holders[object_id] = tuple(sorted({e.src for e in edges}))
        return found

    def device_numa(self, device_id: str) -> int | None:
        node = self.graph.nodes.get(device_id)
        return device_numa_node(self.graph, node)[0] if node is not None else None

    def container_of(self, process_id: str) -> str | None:
        return query.container_of(self.graph, process_id)

    def parent_of(self, process_id: str) -> str | None:
        """Its ``parent_of`` edge, else the process its ``ppid`` names."""
        return query.parent_of(self.graph, process_id)

    def children_of(self, process_id: str) -> list[str]:
        kids = [e.dst for e in self.graph.out_edges(process_id, "parent_of")]
        return kids or self._children_by_ppid.get(process_id, [])

    @cached_property
    def _children_by_ppid(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for process in self.graph.of_kind(PROCESS):
            parent = self.parent_of(process.id)
            if parent:
                out[parent].append(process.id)
        return out

    def ancestors(self, process_id: str) -> set[str]:
        return query.ancestors(self.graph, process_id)

    def descendants(self, process_id: str) -> set[str]:
        found: set[str] = set()
        stack = [process_id]
        while stack:
            for child in self.children_of(stack.pop()):
                if child not in found:
                    found.add(child)
                    stack.append(child)
        return found

    @cached_property
    def profiler(self) -> frozenset[str]:
        """wp-mcp's own processes in its snapshot: every process running wp-mcp with its
        children (the tools it starts), and the process that collected (``meta.profiler_pid``:
        a script calling the collector; its children are its own workload and stay). Findings
        about the job leave them out: the profiler is not part of the workload it measures."""
        processes = self.graph.of_kind(PROCESS)
        roots = {p.id for p in processes if _PROFILER_CMDLINE.search(attr(p, "cmdline") or "")}
        found = roots | {child for root in roots for child in self.descendants(root)}
        pid = getattr(self.graph.meta, "profiler_pid", None)
        found |= {p.id for p in processes if pid is not None and attr(p, "pid") == pid}
        return frozenset(found)

    def is_profiler(self, node_id: str | None) -> bool:
        """A node of the profiler's own: one of its processes, their threads, or a socket
        only they use."""
        profiler = self.profiler
        if not profiler or node_id is None:
            return False
        if node_id in profiler or self.thread_owner.get(node_id) in profiler:
            return True
        node = self.graph.nodes.get(node_id)
        if node is None or node.kind != "socket":
            return False
        owners = self.socket_owners(node_id)
        return bool(owners) and set(owners) <= profiler

    def name_of(self, node_id: str) -> str | None:
        node = self.graph.nodes.get(node_id)
        return attr(node, "name") if node is not None else None

    @cached_property
    def cpu_hosts(self) -> dict[str, int]:
        """Host prefix → CPU count: the host's ``cpus``, else what its NUMA nodes' cpulists
        hold (to tell a restricted affinity from "all CPUs"; the rules read the same)."""
        counts: dict[str, int] = {}
        for node in self.graph.of_kind("numa_node"):
            prefix = query.host_prefix(node.id)
            counts[prefix] = counts.get(prefix, 0) + len(query.cpu_set(attr(node, "cpulist")))
        hosts = query.hosts_by_prefix(self.graph)
        counts.update({p: int(attr(h, "cpus")) for p, h in hosts.items() if attr(h, "cpus")})
        return {prefix: count for prefix, count in counts.items() if count}
