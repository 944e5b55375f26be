"""Process↔process communication, derived from what the other collectors found (tier T0).

Reads the merged graph (it runs after procfs, sockets and the device collectors):

- a ``peer`` edge between two sockets (a TCP/UDP connection with both ends on this host, a
  UNIX connection or socketpair) joins the processes owning each end (``socket_owners``:
  those that moved its bytes by eBPF, else the holders that did not inherit it from a
  holding parent — a DataLoader worker holding its rank's socket is not a peer);
- a pipe or FIFO joins the processes holding its write end to those holding its read end;
- a shared-memory segment (``/dev/shm``, memfd, SysV) or a POSIX message queue joins every
  pair of processes that hold or map it (no direction: ``directed: false``).

Each becomes one ``talks_to`` edge per process pair and transport (``key`` = transport),
with ``flows`` (how many connections or objects it sums). TCP links carry the bytes each
way from ``tcp_info`` and, over the window, ``bytes_per_s``; the other transports have no
byte counters a poll can read, so their links say ``measured: false`` and carry no bytes
(the eBPF collector fills them where it runs) — numbers are never guessed.

It also turns device files held open (``/dev/nvidia3``, ``/dev/davinci0``,
``/dev/infiniband/uverbs1``) into ``uses_device`` edges to devices the graph knows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids
from wp_mcp.graph.query import socket_owners

from .base import Collector, Context, Outcome
from .taskstat import read_text

if TYPE_CHECKING:
    from wp_mcp.graph import Edge, Graph, Node

NAME = "ipc"
# An object shared by more processes than this is infrastructure (a CI log pipe, a runtime
# arena) rather than a producer/consumer link: pairing it up would flood the graph.
MAX_PARTIES = 32


@dataclass
class Link:
    """The running sum for one (src, dst, transport)."""

    flows: int = 0
    measured: bool = False
    directed: bool = True
    bytes_fwd: int = 0
    bytes_back: int = 0
    window_fwd: int = 0
    window_back: int = 0
    window_s: float | None = None
    retrans_total: int = 0
    window_retrans: int = 0
    rtt_ms: float | None = None

    def attrs(self, transport: str) -> dict[str, Any]:
        out: dict[str, Any] = {"transport": transport, "flows": self.flows, "key": transport}
        if not self.measured:
            out["measured"] = False
            if not self.directed:
                out["directed"] = False
            return out
        out.update(
            measured=True,
            bytes=self.bytes_fwd + self.bytes_back,
            bytes_src_to_dst=self.bytes_fwd,
            bytes_dst_to_src=self.bytes_back,
            retrans_total=self.retrans_total,
        )
        if self.rtt_ms is not None:
            out["rtt_ms"] = self.rtt_ms
        if self.window_s:
            out.update(
                window_s=self.window_s,
                bytes_per_s=round((self.window_fwd + self.window_back) / self.window_s, 1),
                src_to_dst_bytes_per_s=round(self.window_fwd / self.window_s, 1),
                dst_to_src_bytes_per_s=round(self.window_back / self.window_s, 1),
                retrans_per_s=round(self.window_retrans / self.window_s, 3),
            )
        return out


class IpcCollector(Collector):
    """talks_to and uses_device edges from sockets, pipes, shared memory and device files."""

    name = NAME
    tier = "T0"
    timeout_s = 10.0
    after = ("procfs", "sockets", "gpu", "npu", "rdma")

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        links = socket_links(graph, list(graph.edges("peer")))
        crowded = 0
        ctx.check_cancelled()
        for pipe in graph.of_kind("pipe"):
            crowded += _add_pipe(links, graph, pipe)
        for kind in ("shm", "mqueue"):
            for shared in graph.of_kind(kind):
                crowded += _add_shared(links, graph, shared)
        for (src, dst, transport), link in links.items():
            graph.link("talks_to", src, dst, source=NAME, **link.attrs(transport))
        devices = link_devices(graph, ctx)
        details = {"talks_to": len(links), "uses_device": devices}
        if crowded:
            details["objects_shared_too_widely"] = crowded
        return Outcome("ok", None, details)


def socket_links(graph: Graph, peers: Iterable[Edge]) -> dict[tuple[str, str, str], Link]:
    """One ``Link`` per (process, process, transport) over these socket ``peer`` edges (the
    cluster merge derives its cross-host ``talks_to`` edges here too)."""
    links: dict[tuple[str, str, str], Link] = {}
    for edge in peers:
        a, b = graph.node(edge.src), graph.node(edge.dst)
        if a is not None and b is not None and a.kind == b.kind == "socket":
            _add_socket_pair(links, graph, a, b)
    return links


def _owners(graph: Graph, node_id: str, modes: Iterable[str] | None = None) -> list[str]:
    wanted = set(modes) if modes else None
    return sorted(
        {
            e.src
            for e in graph.in_edges(node_id, "holds")
            if wanted is None or getattr(e, "mode", "rw") in wanted
        }
    )


def _add_socket_pair(links: dict, graph: Graph, client: Node, server: Node) -> None:
    transport = client.get("proto") or "socket"
    measured = transport == "tcp" and client.get("bytes_sent") is not None
    # the processes using each end, not every child that inherited the descriptor
    for src in socket_owners(graph, client.id):
        for dst in socket_owners(graph, server.id):
            if src == dst:
                continue
            link = links.setdefault((src, dst, transport), Link())
            link.flows += 1
            if measured:
                _add_tcp_counters(link, client, server)


def _add_tcp_counters(link: Link, client: Node, server: Node) -> None:
    link.measured = True
    link.bytes_fwd += client.get("bytes_sent", 0)
    link.bytes_back += client.get("bytes_received", 0)
    link.retrans_total += client.get("retrans_total", 0) + server.get("retrans_total", 0)
    rtt = client.get("rtt_ms")
    if rtt is not None:
        link.rtt_ms = max(link.rtt_ms or 0.0, rtt)
    window = client.get("window_s")
    if window:
        link.window_s = window
        link.window_fwd += client.get("window_bytes_sent", 0)
        link.window_back += client.get("window_bytes_received", 0)
        link.window_retrans += client.get("window_retrans", 0) + server.get("window_retrans", 0)


def _add_pipe(links: dict, graph: Graph, pipe: Node) -> int:
    writers = _owners(graph, pipe.id, ("w", "rw"))
    readers = _owners(graph, pipe.id, ("r", "rw"))
    if len(writers) > MAX_PARTIES or len(readers) > MAX_PARTIES:
        return 1
    for src in writers:
        for dst in readers:
            if src != dst:
                links.setdefault((src, dst, "pipe"), Link()).flows += 1
    return 0


def _add_shared(links: dict, graph: Graph, shared: Node) -> int:
    transport = "shm" if shared.kind == "shm" else "mqueue"
    holders = sorted(_owners(graph, shared.id), key=lambda pid: _started(graph, pid))
    if len(holders) > MAX_PARTIES:
        return 1
    for i, src in enumerate(holders):
        for dst in holders[i + 1 :]:
            link = links.setdefault((src, dst, transport), Link())
            link.flows += 1
            link.directed = False
    return 0


def _started(graph: Graph, proc_id: str) -> tuple[float, str]:
    """Order sharers by start time: the creator of a segment usually started first."""
    node = graph.node(proc_id)
    return (node.get("start_time", 0.0) if node else 0.0, proc_id)


# --------------------------------------------------------------------------- devices

_NVIDIA = re.compile(r"^/dev/nvidia(\d+)$")
_DAVINCI = re.compile(r"^/dev/davinci(\d+)$")
_UVERBS = re.compile(r"^/dev/infiniband/uverbs(\d+)$")


def link_devices(graph: Graph, ctx: Context) -> int:
    """uses_device edges from the device files each process holds open."""
    gpus = _index_by(graph, "gpu", "minor_number")
    npus = _index_by(graph, "npu", "phy_id")
    linked = 0
    for proc in graph.of_kind("process"):
        for path in proc.get("devices", []):
            target = _device_for(path, gpus, npus, ctx)
            if target and target in graph:
                graph.link("uses_device", proc.id, target, source=NAME, via=path)
                linked += 1
    return linked


def _index_by(graph: Graph, kind: str, attr: str) -> dict[int, str]:
    """Device number in /dev → node id, by an attribute the device collector set, else by
    the node's index."""
    found: dict[int, str] = {}
    for node in graph.of_kind(kind):
        number = node.get(attr)
        if number is None:
            number = node.get("index")
        if number is not None:
            found[int(number)] = node.id
    return found


def _device_for(path: str, gpus: dict[int, str], npus: dict[int, str], ctx: Context) -> str | None:
    if match := _NVIDIA.match(path):
        number = int(match.group(1))
        return gpus.get(number, ids.gpu(number))
    if match := _DAVINCI.match(path):
        number = int(match.group(1))
        return npus.get(number, ids.npu(number))
    if match := _UVERBS.match(path):
        ibdev = ctx.sys_root / "class" / "infiniband_verbs" / f"uverbs{match.group(1)}" / "ibdev"
        name = read_text(ibdev)
        return None if name is None else ids.rdma(name.strip())
    return None
