"""Socket bytes per (process, socket, direction), from ``sock:sock_send_length`` and
``sock:sock_recv_length``.

Both tracepoints fire in ``sock_sendmsg``/``sock_recvmsg`` for every socket family (TCP,
UDP, UNIX…) with the byte count the call returned, in the context of the calling task, so
bytes are attributed to the process that moved them — short-lived connections and UDP
included. Sockets are named by their inode (the same ``sock:<inode>`` id polling uses);
the first event on a socket also records its addresses (or, for UNIX sockets, its peer) so
flows can be paired into process→process ``talks_to`` edges after the socket is gone.
"""

from __future__ import annotations

import socket
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .common import (
    AF_INET,
    AF_INET6,
    AF_UNIX,
    add_counter,
    comm_of,
    ensure_process,
    format_addr,
    link_flow,
    set_missing,
)
from .program import SOURCE, Program, Scope
from .timeline import Burst, timelines
from .timeline import write as write_timelines

if TYPE_CHECKING:
    from wp_mcp.graph import Edge, Graph

C_TEXT = r"""
#define MSG_PEEK_FLAG 2
#define IPPROTO_TCP_NUM 6

/* One burst of a TCP socket's traffic: calls no more than BURST_GAP_NS apart. */
struct burst_t {
    u64 ino;
    u64 sk;
    u32 tgid;
    u32 sent;        /* bytes, saturating at 4 GiB */
    u64 start;       /* ktime of the first call, ns */
    u64 end;         /* ktime of the last call */
    u64 first_send;  /* ktime of its first send, 0 when it only received */
    u64 first_recv;
    u64 received;
};
struct sock_key_t {
    u64 ino;   /* socket inode, 0 for sockets without a file */
    u64 sk;    /* struct sock address: tells sockets apart when ino is 0 or reused */
    u32 tgid;
    u32 pad;
};
struct sock_val_t {
    u64 sent;
    u64 received;
    u64 sends;
    u64 recvs;
    u32 described;  /* this (process, socket)'s info entry is complete */
    u32 tcp;        /* a TCP socket: its bursts are kept (the step timeline) */
    char comm[16];
    struct burst_t open;  /* the burst in progress (start 0: none) */
};
struct sock_id_t {
    u64 ino;
    u64 sk;
};
struct sock_info_t {
    u64 peer;       /* UNIX: the peer's struct sock */
    u16 family;
    u16 protocol;
    u16 type;
    u16 lport;      /* host order */
    u16 rport;      /* network order as stored by the kernel */
    u16 pad[3];
    u8 laddr[16];
    u8 raddr[16];
};
BPF_HASH(sock_bytes, struct sock_key_t, struct sock_val_t, SOCK_MAX_ENTRIES);
BPF_HASH(sock_info, struct sock_id_t, struct sock_info_t, SOCK_MAX_ENTRIES);
/* The step timeline's input: a ring of the newest closed bursts and how many were closed. */
BPF_ARRAY(bursts, struct burst_t, BURST_SLOTS);
BPF_ARRAY(bursts_closed, u64, 1);

/* Adds one call to the socket's open burst; a call after a longer silence first closes it
   into the ring. One thread moves a connection's bytes in the jobs this is for (gloo's pair,
   NCCL's socket thread): the burst's fields are updated without atomics. */
static __always_inline void count_burst(struct sock_val_t *val, const struct sock_key_t *key,
                                        int ret, int sending)
{
    u64 now = bpf_ktime_get_ns();
    struct burst_t *open = &val->open;
    if (open->start && now - open->end > BURST_GAP_NS) {
        int zero = 0;
        u64 *closed = bursts_closed.lookup(&zero);
        if (closed) {
            int slot = __sync_fetch_and_add(closed, 1) & (BURST_SLOTS - 1);
            struct burst_t *kept = bursts.lookup(&slot);
            if (kept)
                __builtin_memcpy(kept, open, sizeof(*kept));
        }
        open->start = 0;
    }
    if (!open->start) {
        __builtin_memset(open, 0, sizeof(*open));
        open->ino = key->ino;
        open->sk = key->sk;
        open->tgid = key->tgid;
        open->start = now;
    }
    open->end = now;
    if (sending) {
        if (!open->first_send)
            open->first_send = now;
        if (open->sent < 0xffffffff - (u32)ret)
            open->sent += ret;
    } else {
        if (!open->first_recv)
            open->first_recv = now;
        open->received += ret;
    }
}

/* Records the socket's addresses (or UNIX peer); 1 when they are complete. */
static __always_inline int describe_sock(const void *sk, u64 ino, u16 family, u16 protocol)
{
    struct sock_id_t id = {.ino = ino, .sk = (u64)sk};
    struct sock_info_t info = {.family = family, .protocol = protocol};
    bpf_probe_read_kernel(&info.type, sizeof(info.type), (char *)sk + OFF_SOCK_SK_TYPE);
    if (family == AF_INET) {
        bpf_probe_read_kernel(&info.laddr, 4, (char *)sk + OFF_SKC_RCV_SADDR);
        bpf_probe_read_kernel(&info.raddr, 4, (char *)sk + OFF_SKC_DADDR);
    } else if (family == AF_INET6) {
        bpf_probe_read_kernel(&info.laddr, 16, (char *)sk + OFF_SKC_V6_RCV_SADDR);
        bpf_probe_read_kernel(&info.raddr, 16, (char *)sk + OFF_SKC_V6_DADDR);
    }
    if (family == AF_INET || family == AF_INET6) {
        bpf_probe_read_kernel(&info.lport, 2, (char *)sk + OFF_SKC_NUM);
        bpf_probe_read_kernel(&info.rport, 2, (char *)sk + OFF_SKC_DPORT);
    } else if (family == AF_UNIX) {
        bpf_probe_read_kernel(&info.peer, sizeof(info.peer), (char *)sk + OFF_UNIX_SOCK_PEER);
    }
    if (sock_info.update(&id, &info) < 0) {
        count_lost(PROGRAM_SOCKBYTES);
        return 0;
    }
    /* an unconnected UDP socket may connect later: keep looking until the remote is known */
    return info.rport || (family != AF_INET && family != AF_INET6);
}

static __always_inline int count_bytes(const void *sk, u16 family, u16 protocol, int ret,
                                       int flags, int sending)
{
    if (ret <= 0 || (!sending && (flags & MSG_PEEK_FLAG)))
        return 0;  /* errors, EOF, and peeks (the bytes are read again later) */
    u64 ino = sock_inode(sk);
    struct sock_key_t key = {.ino = ino, .sk = (u64)sk, .tgid = bpf_get_current_pid_tgid() >> 32};
    struct sock_val_t *val = sock_bytes.lookup(&key);
    if (!val) {
        struct sock_val_t zero = {};
        bpf_get_current_comm(&zero.comm, sizeof(zero.comm));
        if (sock_bytes.update(&key, &zero) < 0) {
            count_lost(PROGRAM_SOCKBYTES);
            return 0;
        }
        val = sock_bytes.lookup(&key);
        if (!val)
            return 0;
        val->tcp = protocol == IPPROTO_TCP_NUM && (family == AF_INET || family == AF_INET6);
    }
    if (!val->described)  /* the hot path skips this once the addresses are known */
        val->described = describe_sock(sk, ino, family, protocol);
    if (sending) {
        __sync_fetch_and_add(&val->sent, ret);
        __sync_fetch_and_add(&val->sends, 1);
    } else {
        __sync_fetch_and_add(&val->received, ret);
        __sync_fetch_and_add(&val->recvs, 1);
    }
    if (val->tcp)
        count_burst(val, &key, ret, sending);
    return 0;
}

TRACEPOINT_PROBE(sock, sock_send_length)
{
    return count_bytes(args->sk, args->family, args->protocol, args->ret, args->flags, 1);
}

TRACEPOINT_PROBE(sock, sock_recv_length)
{
    return count_bytes(args->sk, args->family, args->protocol, args->ret, args->flags, 0);
}
"""

PROTOCOLS = {6: "tcp", 17: "udp", 132: "sctp", 262: "mptcp"}
UNIX_TYPES = {1: "stream", 2: "dgram", 5: "seqpacket"}
FAMILIES = {AF_UNIX: "unix", AF_INET: "inet", AF_INET6: "inet6"}


@dataclass
class SocketRecord:
    """What eBPF saw of one socket during the window."""

    ino: int
    sk: int
    family: int
    protocol: int
    sock_type: int = 0
    laddr: str | None = None
    lport: int | None = None
    raddr: str | None = None
    rport: int | None = None
    peer: int = 0
    # pid -> [sent, received, sends, recvs]; a socket shared across fork has several
    by_pid: dict[int, list[int]] = field(default_factory=dict)
    comms: dict[int, str] = field(default_factory=dict)
    # TCP only: (pid, start, end, first send, first receive, sent, received), times in s
    bursts: list[tuple[int, float, float, float | None, float | None, int, int]] = field(
        default_factory=list
    )

    @property
    def proto(self) -> str:
        if self.family == AF_UNIX:
            return "unix"
        return PROTOCOLS.get(self.protocol, f"ip{self.protocol}")

    @property
    def sent(self) -> int:
        return sum(v[0] for v in self.by_pid.values())

    @property
    def received(self) -> int:
        return sum(v[1] for v in self.by_pid.values())


def read(bpf: Any) -> list[SocketRecord]:
    infos = {(k.ino, k.sk): v for k, v in bpf[b"sock_info"].items()}
    records: dict[tuple[int, int], SocketRecord] = {}
    for key, val in bpf[b"sock_bytes"].items():
        ident = (key.ino, key.sk)
        record = records.get(ident)
        if record is None:
            record = records[ident] = _record(key.ino, key.sk, infos.get(ident))
        record.by_pid[key.tgid] = [val.sent, val.received, val.sends, val.recvs]
        record.comms[key.tgid] = comm_of(bytes(val.comm))
        if val.open.start:  # the burst still open when the window ended
            record.bursts.append(_burst(val.open))
    for burst in _closed_bursts(bpf):
        record = records.get((burst.ino, burst.sk))
        if record is not None:
            record.bursts.append(_burst(burst))
    return list(records.values())


def _closed_bursts(bpf: Any) -> list[Any]:
    """The ring's bursts, the newest ``BURST_SLOTS`` when it went round."""
    closed = bpf[b"bursts_closed"][0].value
    ring = bpf[b"bursts"]
    return [ring[slot] for slot in range(min(closed, len(ring)))]


def _burst(raw: Any) -> tuple[int, float, float, float | None, float | None, int, int]:
    def seconds(ns: int) -> float | None:
        return ns / 1e9 if ns else None

    start, end = raw.start / 1e9, raw.end / 1e9
    return (raw.tgid, start, end, seconds(raw.first_send), seconds(raw.first_recv),
            raw.sent, raw.received)  # fmt: skip


def _record(ino: int, sk: int, info: Any) -> SocketRecord:
    if info is None:  # the info map was full: bytes still count, the flow stays unpaired
        return SocketRecord(ino, sk, family=0, protocol=0)
    record = SocketRecord(ino, sk, info.family, info.protocol, info.type, peer=info.peer)
    if info.family in (AF_INET, AF_INET6):
        record.laddr = format_addr(info.family, bytes(info.laddr))
        record.raddr = format_addr(info.family, bytes(info.raddr))
        record.lport = info.lport
        record.rport = socket.ntohs(info.rport)  # skc_dport is kept in network order
    return record


def merge(graph: Graph, records: list[SocketRecord], scope: Scope) -> None:
    socket_ids: dict[tuple[int, int], str] = {}
    for record in records:
        pids = [pid for pid in record.by_pid if scope.includes(graph, pid)]
        if not pids:
            continue
        sock_id = _merge_socket(graph, record) if record.ino else None
        for pid in pids:
            sent, received, sends, recvs = record.by_pid[pid]
            proc_id = ensure_process(graph, pid, record.comms.get(pid, ""))
            add_counter(graph, proc_id, "ebpf_bytes_sent", sent)
            add_counter(graph, proc_id, "ebpf_bytes_received", received)
            if sock_id is not None:
                # who moved the bytes: a child that inherited the descriptor and never used
                # it is not the socket's owner (graph.query.socket_owners)
                holds = _holds(graph, proc_id, sock_id) or graph.link(
                    "holds", proc_id, sock_id, source=SOURCE
                )
                holds.set("ebpf_bytes_sent", sent, SOURCE)
                holds.set("ebpf_bytes_received", received, SOURCE)
        if sock_id is not None:
            socket_ids[(record.ino, record.sk)] = sock_id
    flows = [r for r in records if (r.ino, r.sk) in socket_ids]
    _merge_flows(graph, flows, scope.window_s)
    write_timelines(graph, timelines(_rank_bursts(flows, socket_ids)))


def _holds(graph: Graph, proc_id: str, sock_id: str) -> Edge | None:
    return next((e for e in graph.out_edges(proc_id, "holds") if e.dst == sock_id), None)


def _merge_socket(graph: Graph, record: SocketRecord) -> str:
    sock_id = ids.socket_inode(record.ino)
    if sock_id not in graph:
        graph.add("socket", sock_id, source=SOURCE, inode=record.ino)
    set_missing(
        graph,
        sock_id,
        proto=record.proto if record.family else None,
        family=FAMILIES.get(record.family),
        local_addr=record.laddr,
        local_port=record.lport,
        remote_addr=record.raddr if record.rport else None,
        remote_port=record.rport or None,
    )
    node = graph.nodes[sock_id]
    node.set("ebpf_bytes_sent", record.sent, SOURCE)
    node.set("ebpf_bytes_received", record.received, SOURCE)
    node.set("ebpf_sends", sum(v[2] for v in record.by_pid.values()), SOURCE)
    node.set("ebpf_recvs", sum(v[3] for v in record.by_pid.values()), SOURCE)
    if record.family == AF_UNIX and record.sock_type in UNIX_TYPES:
        set_missing(graph, sock_id, unix_type=UNIX_TYPES[record.sock_type])
    return sock_id


def _merge_flows(graph: Graph, records: list[SocketRecord], window_s: float) -> None:
    """Pair sockets into flows and add sender→receiver ``talks_to`` edges.

    A connection's two directions land on the same edge: ``ebpf_bytes_src_to_dst`` and
    ``ebpf_bytes_dst_to_src``, summed in ``ebpf_bytes``.
    """
    by_tuple, unconnected, by_sk = _indexes(records)
    sent: dict[tuple[str, str, str], int] = defaultdict(int)
    flows: dict[tuple[str, str, str], int] = defaultdict(int)
    for record in records:
        peer = _peer(record, by_tuple, unconnected, by_sk)
        if peer is None:
            continue
        # the peer's processes that read from it (all of them when none read yet)
        readers = [pid for pid, c in peer.by_pid.items() if c[1]] or list(peer.by_pid)
        for pid, counters in record.by_pid.items():
            for reader in readers:
                key = (ids.process(pid), ids.process(reader), record.proto)
                sent[key] += counters[0] // len(readers)
                flows[key] += 1
    for (src, dst, proto), count in flows.items():
        # a direction with no bytes must not decide the edge's orientation
        if sent[(src, dst, proto)] and src in graph and dst in graph and src != dst:
            link_flow(graph, src, dst, proto, sent[(src, dst, proto)], count, window_s)


def _rank_bursts(
    records: list[SocketRecord], socket_ids: dict[tuple[int, int], str]
) -> list[Burst]:
    """The TCP bursts of every connection whose other end eBPF saw, with the process at
    that end (the one that moved most of its bytes)."""
    by_tuple, unconnected, by_sk = _indexes(records)
    out = []
    for record in records:
        peer = _peer(record, by_tuple, unconnected, by_sk) if record.bursts else None
        if peer is None or not peer.by_pid:
            continue
        other = max(peer.by_pid, key=lambda pid: sum(peer.by_pid[pid][:2]))
        sock_id = socket_ids.get((record.ino, record.sk))
        for pid, start, end, first_send, first_recv, sent, received in record.bursts:
            out.append(
                Burst(pid, other, start, end, first_send, first_recv, sent, received, sock_id)
            )
    return out


WILDCARDS = ("0.0.0.0", "::")


def _indexes(records: list[SocketRecord]) -> tuple[dict, dict, dict[int, list[SocketRecord]]]:
    """The records by their connection's 5-tuple, by their bound address (unconnected
    UDP) and by their struct sock (UNIX peers), as :func:`_peer` looks them up."""
    by_tuple = {}
    unconnected = {}
    by_sk: dict[int, list[SocketRecord]] = defaultdict(list)
    for record in records:
        local = (record.proto, record.laddr, record.lport)
        if record.rport:
            by_tuple[(*local, record.raddr, record.rport)] = record
        elif record.lport:
            unconnected[local] = record
        by_sk[record.sk].append(record)
    return by_tuple, unconnected, by_sk


def _unix_peer(record: SocketRecord, by_sk: dict[int, list[SocketRecord]]) -> SocketRecord | None:
    """The UNIX socket whose struct sock ``record`` names as its peer, and which names
    ``record`` back. A struct sock freed in the window is reused for another socket (short
    UNIX connections, as DataLoader workers open to pass file descriptors): a one-way or
    ambiguous match would join unrelated processes, so it joins none."""
    if not record.peer:
        return None
    mutual = [other for other in by_sk.get(record.peer, ()) if other.peer == record.sk]
    return mutual[0] if len(mutual) == 1 else None


def _peer(
    record: SocketRecord, by_tuple: dict, unconnected: dict, by_sk: dict
) -> SocketRecord | None:
    """The socket at the other end of ``record``'s flow, if eBPF saw it too."""
    if record.family == AF_UNIX:
        return _unix_peer(record, by_sk)
    if not record.rport:
        return None  # unconnected UDP: destinations vary per datagram
    exact = by_tuple.get((record.proto, record.raddr, record.rport, record.laddr, record.lport))
    if exact is not None:
        return exact
    # a connected sender talking to an unconnected (bound) UDP receiver
    for addr in (record.raddr, *WILDCARDS):
        bound = unconnected.get((record.proto, addr, record.rport))
        if bound is not None:
            return bound
    return None


PROGRAM = Program(
    name="sockbytes",
    index=0,
    tracepoints=(("sock", "sock_send_length"), ("sock", "sock_recv_length")),
    c_text=C_TEXT,
    read=read,
    merge=merge,
    # a burst closes after BURST_GAP_NS without a call: far below a training step (a job
    # at 1,000 steps/s still computes for longer), far above the gaps inside an exchange
    limits={"SOCK_MAX_ENTRIES": 16384, "BURST_SLOTS": 32768, "BURST_GAP_NS": 500_000},
)
