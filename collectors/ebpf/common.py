"""Small helpers the eBPF programs share: process/thread nodes, names, addresses."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING

from wp_mcp.graph import ids

from ..taskstat import parse_int, read_small
from .program import SOURCE

if TYPE_CHECKING:
    from wp_mcp.graph import Edge, Graph

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10


def comm_of(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def ensure_process(graph: Graph, pid: int, comm: str = "", proc_root: Path = Path("/proc")) -> str:
    """Id of the process node, adding a minimal one when polling did not see the process
    (it exited during the window, or polling did not run)."""
    node_id = ids.process(pid)
    if node_id not in graph:
        name = _read_comm(proc_root, pid) or comm or None
        graph.add("process", node_id, source=SOURCE, pid=pid, name=name)
    return node_id


def ensure_thread(graph: Graph, tid: int, pid: int | None, comm: str = "") -> str:
    node_id = ids.thread(tid)
    if node_id not in graph:
        graph.add("thread", node_id, source=SOURCE, tid=tid, pid=pid, name=comm or None)
    if pid is not None:
        proc_id = ensure_process(graph, pid)
        if not graph.in_edges(node_id, "has_thread"):
            graph.link("has_thread", proc_id, node_id, source=SOURCE)
    return node_id


def tgid_of(tid: int, proc_root: Path = Path("/proc")) -> int | None:
    """The process a thread belongs to (``/proc/<tid>`` resolves any thread id)."""
    for line in (read_small(proc_root / str(tid) / "status") or "").splitlines():
        if line.startswith("Tgid:"):
            return parse_int(line[5:])
    return None


def _read_comm(proc_root: Path, pid: int) -> str | None:
    text = read_small(proc_root / str(pid) / "comm")
    return None if text is None else text.strip()


def format_addr(family: int, raw: bytes) -> str | None:
    """Text form of an IPv4/IPv6 address as the kernel stores it (network byte order)."""
    if family == AF_INET:
        return str(ipaddress.IPv4Address(bytes(raw[:4])))
    if family == AF_INET6:
        address = ipaddress.IPv6Address(bytes(raw[:16]))
        # v4-mapped addresses are how dual-stack sockets see IPv4 peers
        return str(address.ipv4_mapped or address)
    return None


def set_missing(graph: Graph, node_id: str, **attrs: object) -> None:
    """Set attributes a polling collector has not already set (identity fields such as
    addresses: both sources agree, and the polling value keeps its provenance)."""
    node = graph.nodes[node_id]
    for name, value in attrs.items():
        if value is not None and getattr(node, name, None) is None:
            node.set(name, value, SOURCE)


def add_counter(graph: Graph, node_id: str, name: str, value: float) -> None:
    """Add to an ebpf_* counter (several sockets or flows sum into one process)."""
    node = graph.nodes[node_id]
    node.set(name, (getattr(node, name, None) or 0) + value, SOURCE)


def link_flow(
    graph: Graph, src: str, dst: str, transport: str, sent: int, flows: int, window_s: float
) -> None:
    """Add one direction's bytes to the pair's ``talks_to`` edge (one edge per process pair
    and transport, ``key`` = transport, as the polling ipc collector makes them)."""
    edge = find_edge(graph, src, dst, transport)
    forward = edge is not None
    if edge is None:
        edge = find_edge(graph, dst, src, transport)
    if edge is None:
        edge = graph.link("talks_to", src, dst, source=SOURCE, key=transport, transport=transport)
        forward = True
    name = "ebpf_bytes_src_to_dst" if forward else "ebpf_bytes_dst_to_src"
    edge.set(name, (edge.get(name) or 0) + sent, SOURCE)
    total = (edge.get("ebpf_bytes_src_to_dst") or 0) + (edge.get("ebpf_bytes_dst_to_src") or 0)
    edge.set("ebpf_bytes", total, SOURCE)
    edge.set("ebpf_bytes_per_s", round(total / window_s, 1), SOURCE)
    edge.set("ebpf_flows", (edge.get("ebpf_flows") or 0) + flows, SOURCE)
    edge.set("ebpf_window_s", round(window_s, 3), SOURCE)


def find_edge(graph: Graph, src: str, dst: str, transport: str) -> Edge | None:
    for edge in graph.out_edges(src, "talks_to"):
        if edge.dst == dst and edge.key == transport:
            return edge
    return None
