"""TCP, UDP and UNIX sockets from netlink ``sock_diag`` (tier T0, rates over the window).

What it reads: one ``SOCK_DIAG_BY_FAMILY`` dump per family and protocol (TCP and UDP over
IPv4 and IPv6 with ``tcp_info``; UNIX with names, peers and queue lengths), in every network
namespace some process lives in (entering another namespace needs CAP_SYS_ADMIN; without it
those sockets are missing and the status says so).

What it adds: ``sock:<inode>`` nodes (procfs links them to their owners by the same inode)
with addresses, state, queues and, for TCP, ``bytes_sent`` (``tcpi_bytes_acked``),
``bytes_received``, RTT, min RTT, retransmits, segments sent (``segs_out``, and
``data_segs_out`` without pure ACKs), lost segments and RTO; with a window, the
send/receive/retransmit rates over it, the counters' deltas (``window_bytes_sent``,
``window_retrans``, ``window_data_segs_out`` …: a connection opened inside the window counts
from zero) and ``window_s``. ``peer`` edges join the two ends of
a connection whose both ends are on this host (loopback pairs within one namespace; other
addresses also across namespaces, as with veth pairs) and UNIX peers, from the connecting
end to the accepting one.

Why not pyroute2: its pure-Python message decoding took ~1.5 s for 4,000 TCP sockets here,
more than a whole snapshot may cost; the ``struct`` decoder below takes a few milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids
from wp_mcp.graph.model import SocketNode

from .base import Collector, Context, Outcome, add_typed_node
from .taskstat import list_dir, namespace_inode, read_link

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

NAME = "sockets"

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
INET_DIAG_INFO = 2
UNIX_DIAG_NAME, UNIX_DIAG_PEER, UNIX_DIAG_RQLEN = 0, 2, 4
UDIAG_SHOW_NAME, UDIAG_SHOW_PEER, UDIAG_SHOW_RQLEN = 0x1, 0x4, 0x10
CLONE_NEWNET = 0x40000000
ALL_STATES = 0xFFFFFFFF

TCP_STATES = {
    1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
    6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING",
    12: "NEW_SYN_RECV",
}  # fmt: skip
UNIX_TYPES = {1: "stream", 2: "dgram", 5: "seqpacket"}
LISTEN = 10

_NLMSG = struct.Struct("=IHHII")
_INET_REQ = struct.Struct("=BBBBI48s")
_INET_MSG_HEAD = struct.Struct("=BBBB")
_INET_MSG_TAIL = struct.Struct("=IIIII")
_UNIX_REQ = struct.Struct("=BBHIIIII")
_UNIX_MSG = struct.Struct("=BBBBI")
_RTA = struct.Struct("=HH")
# struct tcp_info (linux/tcp.h) up to tcpi_bytes_retrans, decoded in one call
_TCPI = struct.Struct("=8B24I4Q6I4Q2I2Q")
_TCPI_INDEX = {
    "rto": 8, "lost": 14, "retrans": 15, "rtt": 23, "total_retrans": 31, "bytes_acked": 34,
    "bytes_received": 35, "segs_out": 36, "min_rtt": 39, "data_segs_out": 41, "bytes_sent": 48,
}  # fmt: skip
# the counters turned into deltas over the window, in this order
COUNTERS = ("bytes_acked", "bytes_received", "total_retrans", "segs_out", "data_segs_out")


# --------------------------------------------------------------------------- netlink


def _dump(sock: socket.socket, payload: bytes) -> Iterator[memoryview]:
    """Send one dump request and yield each reply's body."""
    header = _NLMSG.pack(_NLMSG.size + len(payload), SOCK_DIAG_BY_FAMILY,
                         NLM_F_REQUEST | NLM_F_DUMP, 1, 0)  # fmt: skip
    sock.send(header + payload)
    while True:
        data = memoryview(sock.recv(1 << 20))
        offset = 0
        while offset + _NLMSG.size <= len(data):
            length, msg_type, _flags, _seq, _pid = _NLMSG.unpack_from(data, offset)
            if length < _NLMSG.size:
                return
            if msg_type == NLMSG_DONE:
                return
            if msg_type == NLMSG_ERROR:
                errno = -struct.unpack_from("=i", data, offset + _NLMSG.size)[0]
                raise OSError(errno, f"sock_diag: {os.strerror(errno)}")
            yield data[offset + _NLMSG.size : offset + length]
            offset += (length + 3) & ~3


def _attrs(body: memoryview, start: int) -> Iterator[tuple[int, memoryview]]:
    offset = start
    while offset + _RTA.size <= len(body):
        length, kind = _RTA.unpack_from(body, offset)
        if length < _RTA.size:
            return
        yield kind, body[offset + _RTA.size : offset + length]
        offset += (length + 3) & ~3


def _address(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    address = socket.inet_ntop(socket.AF_INET6, raw)
    # an IPv4 peer of a dual-stack socket: compare it as IPv4 so both ends pair up
    return address[7:] if address.startswith("::ffff:") and "." in address else address


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


@dataclass(slots=True)
class RawSocket:
    inode: int
    attrs: dict[str, Any]
    peer_inode: int | None = None
    counters: tuple[int, ...] | None = None  # tcp_info's COUNTERS, in that order


def _decode_tcp_info(raw: memoryview) -> dict[str, int]:
    data = raw if len(raw) >= _TCPI.size else bytes(raw).ljust(_TCPI.size, b"\0")
    values = _TCPI.unpack_from(data, 0)
    return {name: values[index] for name, index in _TCPI_INDEX.items()}


def dump_inet(sock: socket.socket, family: int, proto: int, netns: int | None) -> list[RawSocket]:
    """Every TCP or UDP socket of one address family in the namespace of ``sock``."""
    ext = 1 << (INET_DIAG_INFO - 1) if proto == socket.IPPROTO_TCP else 0
    request = _INET_REQ.pack(family, proto, ext, 0, ALL_STATES, b"\0" * 48)
    proto_name = "tcp" if proto == socket.IPPROTO_TCP else "udp"
    found: list[RawSocket] = []
    for body in _dump(sock, request):
        fam, state, _timer, _retrans = _INET_MSG_HEAD.unpack_from(body, 0)
        sport, dport = struct.unpack_from(">HH", body, 4)
        src, dst = bytes(body[8:24]), bytes(body[24:40])
        _expires, rqueue, wqueue, uid, inode = _INET_MSG_TAIL.unpack_from(body, 52)
        attrs: dict[str, Any] = {
            "proto": proto_name,
            "family": "inet" if fam == socket.AF_INET else "inet6",
            "state": TCP_STATES.get(state, str(state))
            if proto_name == "tcp"
            else _udp_state(state),
            "local_addr": _address(fam, src),
            "local_port": sport,
            "rx_queue": rqueue,
            "tx_queue": wqueue,
            "uid": uid,
            "inode": inode,
        }
        if dport:
            attrs["remote_addr"] = _address(fam, dst)
            attrs["remote_port"] = dport
        if netns is not None:
            attrs["netns"] = netns
        raw = RawSocket(inode, attrs)
        for kind, value in _attrs(body, 72):
            if kind == INET_DIAG_INFO and state != LISTEN:
                _add_tcp_info(raw, _decode_tcp_info(value))
        found.append(raw)
    return found


def _udp_state(state: int) -> str:
    return "ESTABLISHED" if state == 1 else "UNCONN"


def _add_tcp_info(raw: RawSocket, info: dict[str, int]) -> None:
    raw.attrs.update(
        bytes_sent=info["bytes_acked"],
        bytes_received=info["bytes_received"],
        rtt_ms=info["rtt"] / 1000,
        min_rtt_ms=info["min_rtt"] / 1000,
        retrans_total=info["total_retrans"],
        lost=info["lost"],
        rto_ms=info["rto"] / 1000,
        segs_out=info["segs_out"],
        data_segs_out=info["data_segs_out"],
    )
    raw.counters = tuple(info[name] for name in COUNTERS)


def dump_unix(sock: socket.socket, netns: int | None) -> list[RawSocket]:
    """Every UNIX socket in the namespace of ``sock``, with its name and peer."""
    show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN
    request = _UNIX_REQ.pack(socket.AF_UNIX, 0, 0, ALL_STATES, 0, show, 0, 0)
    found: list[RawSocket] = []
    for body in _dump(sock, request):
        _fam, sock_type, state, _pad, inode = _UNIX_MSG.unpack_from(body, 0)
        attrs: dict[str, Any] = {
            "proto": "unix",
            "family": "unix",
            "sock_type": UNIX_TYPES.get(sock_type, str(sock_type)),
            "state": TCP_STATES.get(state, str(state)),
            "inode": inode,
        }
        if netns is not None:
            attrs["netns"] = netns
        raw = RawSocket(inode, attrs)
        for kind, value in _attrs(body, 16):
            if kind == UNIX_DIAG_NAME:
                name = bytes(value)
                # abstract names start with a NUL byte; show them with "@" like ss does
                raw.attrs["path"] = (
                    "@" + name[1:].decode("utf-8", "replace")
                    if name.startswith(b"\0")
                    else name.rstrip(b"\0").decode("utf-8", "replace")
                )
            elif kind == UNIX_DIAG_PEER:
                raw.peer_inode = struct.unpack_from("=I", value, 0)[0]
            elif kind == UNIX_DIAG_RQLEN:
                raw.attrs["rx_queue"], raw.attrs["tx_queue"] = struct.unpack_from("=II", value, 0)
        found.append(raw)
    return found


def dump_namespace(netns: int | None, sock: socket.socket) -> list[RawSocket]:
    found: list[RawSocket] = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for proto in (socket.IPPROTO_TCP, socket.IPPROTO_UDP):
            found += dump_inet(sock, family, proto, netns)
    found += dump_unix(sock, netns)
    return found


def diag_socket() -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                         NETLINK_SOCK_DIAG)  # fmt: skip


def diag_socket_in(ns_path: str) -> socket.socket:
    """A sock_diag socket bound to another network namespace.

    A socket belongs to the namespace of the thread that created it, so a short-lived thread
    enters the namespace, opens the socket and leaves; the caller's thread never moves.
    """
    result: dict[str, Any] = {}

    def enter_and_open() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            target = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            result["error"] = exc
            return
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                result["error"] = OSError(errno, os.strerror(errno))
                return
            try:
                result["sock"] = diag_socket()
            finally:
                if libc.setns(home, CLONE_NEWNET) != 0:
                    # never leave a pool thread in a foreign namespace: this one dies anyway
                    result.setdefault("error", OSError("could not return to own namespace"))
        finally:
            os.close(home)
            os.close(target)

    worker = threading.Thread(target=enter_and_open, name="wp-mcp-netns", daemon=True)
    worker.start()
    worker.join()
    if "sock" in result:
        return result["sock"]
    raise result.get("error") or OSError("could not enter network namespace")


def network_namespaces(proc_root: Path, pids: set[int] | None) -> dict[int, str]:
    """Network namespace inode → a ``/proc/<pid>/ns/net`` path that enters it."""
    spaces: dict[int, str] = {}
    for entry in list_dir(proc_root):
        if not entry.name.isdigit() or (pids is not None and int(entry.name) not in pids):
            continue
        path = f"{proc_root}/{entry.name}/ns/net"
        inode = namespace_inode(read_link(path))
        if inode is not None:
            spaces.setdefault(inode, path)
    return spaces


def own_namespace() -> int | None:
    return namespace_inode(read_link("/proc/thread-self/ns/net"))


# --------------------------------------------------------------------------- pairing


def pair_key(attrs: dict[str, Any], reverse: bool) -> tuple | None:
    """A connection's 4-tuple as seen from this end (or from the other end)."""
    if "remote_port" not in attrs:
        return None
    local = (attrs["local_addr"], attrs["local_port"])
    remote = (attrs["remote_addr"], attrs["remote_port"])
    first, second = (remote, local) if reverse else (local, remote)
    # loopback addresses only mean "this host" inside one namespace
    scope = attrs.get("netns") if is_loopback(attrs["remote_addr"]) else None
    return (scope, attrs["proto"], first, second)


def inet_peers(sockets: list[RawSocket]) -> list[tuple[RawSocket, RawSocket]]:
    """Pairs (connecting end, accepting end) of connections with both ends on this host."""
    by_key = {}
    listening: set[tuple] = set()
    for raw in sockets:
        if raw.attrs["proto"] == "unix":
            continue
        key = pair_key(raw.attrs, reverse=False)
        if key is not None:
            by_key[key] = raw
        if raw.attrs.get("state") == "LISTEN":
            listening.add((raw.attrs.get("netns"), raw.attrs["proto"], raw.attrs["local_port"]))
    pairs = []
    for raw in by_key.values():
        reverse = pair_key(raw.attrs, reverse=True)
        other = by_key.get(reverse) if reverse is not None else None
        if other is None or other is raw:
            continue
        raw_serves = (
            raw.attrs.get("netns"),
            raw.attrs["proto"],
            raw.attrs["local_port"],
        ) in listening
        other_serves = (
            other.attrs.get("netns"),
            other.attrs["proto"],
            other.attrs["local_port"],
        ) in listening
        if raw_serves == other_serves:
            if raw.inode < other.inode:  # no listener tells the roles: one pair, stable order
                pairs.append((raw, other))
        elif other_serves:
            pairs.append((raw, other))
    return pairs


# --------------------------------------------------------------------------- the collector


class SocketsCollector(Collector):
    """Sockets and their peers from sock_diag, TCP counters over the window."""

    name = NAME
    tier = "T0"
    timeout_s = 15.0

    def __init__(self) -> None:
        self._first: dict[int, tuple[int, ...]] = {}
        self._first_at: float | None = None

    def probe(self, ctx: Context) -> str | None:
        try:
            diag_socket().close()
        except OSError as exc:
            return f"netlink sock_diag unavailable: {exc.strerror or exc}"
        return None

    def begin(self, ctx: Context) -> None:
        if ctx.window_s <= 0:
            return
        sockets, _ = self._dump_all(ctx)
        self._first = {raw.inode: raw.counters for raw in sockets if raw.counters}
        self._first_at = time.monotonic()

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        sockets, unreachable = self._dump_all(ctx)
        window = time.monotonic() - self._first_at if self._first_at is not None else None
        skipped_time_wait = 0
        kept: dict[int, RawSocket] = {}
        for raw in sockets:
            if raw.inode == 0:  # TIME_WAIT and embryonic sockets belong to no process
                skipped_time_wait += 1
                continue
            if window:
                self._add_rates(raw, window)
            kept[raw.inode] = raw
        pairs = inet_peers(list(kept.values()))
        for client, server in pairs:
            client.attrs["role"], server.attrs["role"] = "client", "server"
        for raw in kept.values():
            add_typed_node(graph, SocketNode, ids.socket_inode(raw.inode), raw.attrs, NAME)
        for client, server in pairs:
            graph.link("peer", ids.socket_inode(client.inode), ids.socket_inode(server.inode))
        peers = len(pairs)
        peers += _link_unix_peers(graph, kept)
        details = {"sockets": len(kept), "peers": peers, "without_owner_state": skipped_time_wait}
        if unreachable:
            reason = (
                f"sockets of {len(unreachable)} network namespaces not visible "
                f"({unreachable[0]}); entering a namespace needs CAP_SYS_ADMIN"
            )
            return Outcome("partial", reason, details)
        return Outcome("ok", None, details)

    def _add_rates(self, raw: RawSocket, window: float) -> None:
        if raw.counters is None:
            return
        # a connection the first dump did not see was opened during the window: its
        # counters started at zero inside it
        first = self._first.get(raw.inode, (0,) * len(COUNTERS))
        sent, received, retrans, segs, data_segs = (
            now - then for now, then in zip(raw.counters, first, strict=True)
        )
        if min(sent, received, retrans, segs, data_segs) < 0:
            return  # the inode was reused by another connection: no delta to speak of
        raw.attrs.update(
            send_bytes_per_s=round(sent / window, 1),
            recv_bytes_per_s=round(received / window, 1),
            retrans_per_s=round(retrans / window, 3),
            window_bytes_sent=sent,
            window_bytes_received=received,
            window_retrans=retrans,
            window_segs_out=segs,
            window_data_segs_out=data_segs,
            window_s=round(window, 3),
        )

    def _dump_all(self, ctx: Context) -> tuple[list[RawSocket], list[str]]:
        """Sockets of every namespace we can enter, and the reasons for those we cannot."""
        home = own_namespace()
        sockets: list[RawSocket] = []
        with diag_socket() as sock:
            sockets += dump_namespace(home, sock)
        unreachable: list[str] = []
        if str(ctx.proc_root) != "/proc":
            return sockets, unreachable
        for netns, path in network_namespaces(ctx.proc_root, None).items():
            if netns == home:
                continue
            ctx.check_cancelled()
            try:
                with diag_socket_in(path) as sock:
                    sockets += dump_namespace(netns, sock)
            except OSError as exc:
                unreachable.append(f"net:[{netns}]: {exc.strerror or exc}")
        return sockets, unreachable


def _link_unix_peers(graph: Graph, kept: dict[int, RawSocket]) -> int:
    """UNIX peers: from the connecting end (no name) to the accepting end (the bound name)."""
    linked = 0
    for raw in kept.values():
        other = kept.get(raw.peer_inode) if raw.peer_inode else None
        if other is None:
            continue
        raw_named, other_named = "path" in raw.attrs, "path" in other.attrs
        if raw_named == other_named and raw.inode > other.inode:
            continue  # socketpair or both named: link once, lower inode first
        if raw_named and not other_named:
            continue  # the other end links it
        graph.link("peer", ids.socket_inode(raw.inode), ids.socket_inode(other.inode))
        linked += 1
    return linked
