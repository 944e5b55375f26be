"""Layer costs and top signals for the summary of a large graph, without building the layers.

Building all seven layers of a million-edge graph takes seconds; the summary must stay cheap.
One scan per layer finds its top entity (with the layer's own ranking and line) and counts its
entities; tokens are estimated from typical tokens per line, measured on the benchmark graph.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from wp_mcp.graph.model import Edge, Node

from . import layers as L
from .facts import Facts, attr

# Typical tokens per line of each layer (benchmarks/bench_views.py, synthetic cluster).
TOKENS_PER_ITEM = {
    "compute": 24,
    "memory": 17,
    "interconnect": 37,
    "network": 50,
    "storage": 25,
    "control": 20,
    "data": 32,
}
PAGE_BODY = 3800
PAGE_OVERHEAD = 110
LAYER_KINDS = {
    "compute": ("host", "gpu", "npu", "process", "thread"),
    "memory": ("host", "numa_node", "process"),
    "interconnect": ("numa_node", "gpu", "npu", "nic", "rdma_device", "pci_bridge", "process"),
    "network": ("nic", "rdma_device"),
    "storage": ("disk",),
    "control": ("container", "process"),
    "data": ("pipe", "shm", "mqueue"),
}


def estimate_layer(facts: Facts, layer: str) -> dict[str, Any]:
    graph = facts.graph
    count = sum(len(graph.of_kind(kind)) for kind in LAYER_KINDS[layer])
    flows: list[Edge] = []
    if layer in ("network", "data"):
        network = layer == "network"
        flows = [
            e
            for e in facts.talks_to
            if (str(attr(e, "transport") or "?") in L.NETWORK_TRANSPORTS) == network
        ]
        sockets = [s for s in graph.of_kind("socket") if (attr(s, "proto") == "unix") != network]
        count += len(flows) + len(sockets)
    body = count * TOKENS_PER_ITEM[layer]
    tokens = body + max(1, math.ceil(body / PAGE_BODY)) * PAGE_OVERHEAD if count else 0
    return {"items": count, "tokens": (tokens, False), "top": _top(facts, layer, flows)}


def _top(facts: Facts, layer: str, flows: list[Edge]) -> str:
    graph = facts.graph
    processes = graph.of_kind("process")
    if layer == "compute" and processes:
        return L._compute_process_line(facts, min(processes, key=L._busy_first))
    if layer == "memory" and processes:
        return L._memory_process_line(min(processes, key=L._memory_rank))
    if layer == "interconnect" and processes:
        return L._placement_line(facts, min(processes, key=partial(L._placement_rank, facts)))
    if layer in ("network", "data") and flows:
        return L._flow_line(facts, max(flows, key=_flow_size))
    if layer == "storage":
        disks = graph.of_kind("disk")
        return (
            L._disk_line(min(disks, key=lambda d: (L.sort_desc(attr(d, "util_pct")), d.id)))
            if disks
            else ""
        )
    if layer == "control" and processes:
        return L._control_process_line(facts, min(processes, key=L._contention_rank), ())
    if layer == "data":
        objects: list[Node] = [n for kind in L.IPC_KINDS for n in graph.of_kind(kind)]
        if objects:
            return L._ipc_line(
                facts, max(objects, key=lambda n: (attr(n, "size_bytes") or 0, n.id))
            )
    return ""


def _flow_size(edge: Edge) -> tuple:
    return (attr(edge, "bytes") or 0, attr(edge, "bytes_per_s") or 0, edge.src, edge.dst)
