"""TCP retransmissions per flow, from ``tcp:tcp_retransmit_skb``.

The tracepoint fires for every retransmitted segment with the flow's addresses, usually
from a timer or softirq (so the current task says nothing about the owner): the owner is
found through the socket's inode, the ``sock:<inode>`` node polling and ``sockbytes``
link to their processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids
from wp_mcp.graph.query import socket_owners

from .common import add_counter, format_addr, set_missing
from .program import SOURCE, Program, Scope

if TYPE_CHECKING:
    from wp_mcp.graph import Edge, Graph

C_TEXT = r"""
struct retrans_val_t {
    u64 segments;
    u64 ino;
    u16 family;
    u16 sport;
    u16 dport;
    u16 pad;
    u8 saddr[16];
    u8 daddr[16];
};
BPF_HASH(retrans, u64, struct retrans_val_t, RETRANS_MAX_ENTRIES);

TRACEPOINT_PROBE(tcp, tcp_retransmit_skb)
{
    u64 sk = (u64)args->skaddr;
    struct retrans_val_t *val = retrans.lookup(&sk);
    if (!val) {
        struct retrans_val_t fresh = {.family = args->family, .sport = args->sport,
                                      .dport = args->dport};
        fresh.ino = sock_inode(args->skaddr);
        if (args->family == AF_INET) {
            __builtin_memcpy(fresh.saddr, args->saddr, 4);
            __builtin_memcpy(fresh.daddr, args->daddr, 4);
        } else {
            __builtin_memcpy(fresh.saddr, args->saddr_v6, 16);
            __builtin_memcpy(fresh.daddr, args->daddr_v6, 16);
        }
        if (retrans.update(&sk, &fresh) < 0) {
            count_lost(PROGRAM_RETRANS);
            return 0;
        }
        val = retrans.lookup(&sk);
        if (!val)
            return 0;
    }
    __sync_fetch_and_add(&val->segments, 1);
    return 0;
}
"""


@dataclass
class RetransRecord:
    ino: int
    segments: int
    local_addr: str | None
    local_port: int
    remote_addr: str | None
    remote_port: int


def read(bpf: Any) -> list[RetransRecord]:
    out = []
    for _sk, val in bpf[b"retrans"].items():
        family = val.family
        out.append(
            RetransRecord(
                ino=val.ino,
                segments=val.segments,
                local_addr=format_addr(family, bytes(val.saddr)),
                local_port=val.sport,
                remote_addr=format_addr(family, bytes(val.daddr)),
                remote_port=val.dport,
            )
        )
    return out


def merge(graph: Graph, records: list[RetransRecord], scope: Scope) -> None:
    for record in records:
        if not record.ino:
            continue  # a socket already orphaned from its file: no node to put it on
        sock_id = ids.socket_inode(record.ino)
        # the processes using it, not the children that inherited it (sockbytes merged first)
        owners = socket_owners(graph, sock_id) if sock_id in graph else []
        if scope.pids is not None and not owners:
            continue  # out of the filtered processes' view
        if sock_id not in graph:
            graph.add("socket", sock_id, source=SOURCE, inode=record.ino)
        set_missing(
            graph,
            sock_id,
            proto="tcp",
            local_addr=record.local_addr,
            local_port=record.local_port,
            remote_addr=record.remote_addr,
            remote_port=record.remote_port,
        )
        graph.nodes[sock_id].set("ebpf_retrans", record.segments, SOURCE)
        for owner in owners:
            add_counter(graph, owner, "ebpf_retrans", record.segments)
            for edge, peer in _tcp_links(graph, owner):
                if _flow_matches(graph, peer, record):
                    total = (edge.get("ebpf_retrans") or 0) + record.segments
                    edge.set("ebpf_retrans", total, SOURCE)


def _tcp_links(graph: Graph, proc_id: str) -> list[tuple[Edge, str]]:
    """The process's TCP talks_to edges, either orientation, with the other process."""
    out = [(e, e.dst) for e in graph.out_edges(proc_id, "talks_to")]
    out += [(e, e.src) for e in graph.in_edges(proc_id, "talks_to")]
    return [(edge, peer) for edge, peer in out if edge.get("transport") == "tcp"]


def _flow_matches(graph: Graph, peer_proc: str, record: RetransRecord) -> bool:
    """Whether the peer process holds the socket at the far end of the flow."""
    for edge in graph.out_edges(peer_proc, "holds"):
        sock = graph.nodes.get(edge.dst)
        if (
            sock is not None
            and sock.get("local_port") == record.remote_port
            and sock.get("remote_port") == record.local_port
        ):
            return True
    return False


PROGRAM = Program(
    name="retrans",
    index=1,
    tracepoints=(("tcp", "tcp_retransmit_skb"),),
    c_text=C_TEXT,
    read=read,
    merge=merge,
    limits={"RETRANS_MAX_ENTRIES": 8192},
)
