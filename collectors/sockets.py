"""TCP, UDP and UNIX sockets from netlink ``sock_diag`` (tier T0, rates over the window).

What it reads: one ``SOCK_DIAG_BY_FAMILY`` dump per family and protocol (TCP and UDP over
IPv4 and IPv6 with ``tcp_info``; UNIX with names, peers and queue lengths), in every network
namespace some process lives in (entering another namespace needs CAP_SYS_ADMIN; without it
those sockets are missing and the status says so).

What it adds: ``sock:<inode>`` nodes (procfs links them to their owners by the same inode)
with addresses, state, queues, the socket's memory and, for TCP, ``bytes_sent``
(``tcpi_bytes_acked``), ``bytes_received``, RTT, min RTT, retransmits, segments sent
(``segs_out``, and ``data_segs_out`` without pure ACKs), lost segments, RTO and the kernel's
reasons the sender is slow (``tcpinfo.py`` lists them); with a window, the
send/receive/retransmit rates over it, the counters' deltas (``window_bytes_sent``,
``window_retrans``, ``window_data_segs_out`` …: a connection opened inside the window counts
from zero) and ``window_s``. ``peer`` edges join the two ends of
a connection whose both ends are on this host (loopback pairs within one namespace; other
addresses also across namespaces, as with veth pairs) and UNIX peers, from the connecting
end to the accepting one. Each TCP/UDP socket whose local address an interface holds names
it (``ifname``, and ``nic``: that interface's node id, see ``netlink.nic_id``).

The netlink plumbing (dumps, attributes, entering a namespace) is in ``netlink.py``.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids
from wp_mcp.graph.model import SocketNode

from .base import Collector, Context, Outcome, add_typed_node
from .netlink import (
    NETLINK_ROUTE,
    NETLINK_SOCK_DIAG,
    attributes,
    dump,
    netlink_socket,
    network_namespaces,
    nic_id,
    own_namespace,
    socket_in_namespace,
)
from .rtnetlink import dump_addresses, dump_links
from .tcpinfo import (
    counters_of,
    decode_skmeminfo,
    decode_tcp_info,
    memory_attrs,
    tcp_attrs,
    window_deltas,
)

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

NAME = "sockets"

SOCK_DIAG_BY_FAMILY = 20
INET_DIAG_INFO, INET_DIAG_SKMEMINFO = 2, 7
UNIX_DIAG_NAME, UNIX_DIAG_PEER, UNIX_DIAG_RQLEN = 0, 2, 4
UDIAG_SHOW_NAME, UDIAG_SHOW_PEER, UDIAG_SHOW_RQLEN = 0x1, 0x4, 0x10
ALL_STATES = 0xFFFFFFFF

TCP_STATES = {
    1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
    6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING",
    12: "NEW_SYN_RECV",
}  # fmt: skip
UNIX_TYPES = {1: "stream", 2: "dgram", 5: "seqpacket"}
LISTEN = 10

_INET_REQ = struct.Struct("=BBBBI48s")
_INET_MSG_HEAD = struct.Struct("=BBBB")
_INET_MSG_TAIL = struct.Struct("=IIIII")
_UNIX_REQ = struct.Struct("=BBHIIIII")
_UNIX_MSG = struct.Struct("=BBBBI")
# --------------------------------------------------------------------------- netlink


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
    counters: dict[str, int] | None = None  # what window_deltas compares (TCP only)


def dump_inet(sock: socket.socket, family: int, proto: int, netns: int | None) -> list[RawSocket]:
    """Every TCP or UDP socket of one address family in the namespace of ``sock``."""
    ext = 1 << (INET_DIAG_SKMEMINFO - 1)
    if proto == socket.IPPROTO_TCP:
        ext |= 1 << (INET_DIAG_INFO - 1)
    request = _INET_REQ.pack(family, proto, ext, 0, ALL_STATES, b"\0" * 48)
    proto_name = "tcp" if proto == socket.IPPROTO_TCP else "udp"
    found: list[RawSocket] = []
    for body in dump(sock, SOCK_DIAG_BY_FAMILY, request):
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
        info, mem = None, None
        for kind, value in attributes(body, 72):
            if kind == INET_DIAG_INFO and state != LISTEN:
                info = decode_tcp_info(value)
            elif kind == INET_DIAG_SKMEMINFO:
                mem = decode_skmeminfo(value)
        if info is not None:
            attrs.update(tcp_attrs(info))
            raw.counters = counters_of(info, mem)
        if mem is not None:
            attrs.update(memory_attrs(mem))
        found.append(raw)
    return found


def _udp_state(state: int) -> str:
    return "ESTABLISHED" if state == 1 else "UNCONN"


def dump_unix(sock: socket.socket, netns: int | None) -> list[RawSocket]:
    """Every UNIX socket in the namespace of ``sock``, with its name and peer."""
    show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN
    request = _UNIX_REQ.pack(socket.AF_UNIX, 0, 0, ALL_STATES, 0, show, 0, 0)
    found: list[RawSocket] = []
    for body in dump(sock, SOCK_DIAG_BY_FAMILY, request):
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
        for kind, value in attributes(body, 16):
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
    return netlink_socket(NETLINK_SOCK_DIAG)


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
        self._first: dict[int, dict[str, int]] = {}
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
        sockets, unreachable = self._dump_all(ctx, interfaces=True)
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
        deltas = window_deltas(raw.counters, self._first.get(raw.inode), window)
        if deltas is not None:
            raw.attrs.update(deltas)

    def _dump_all(
        self, ctx: Context, interfaces: bool = False
    ) -> tuple[list[RawSocket], list[str]]:
        """Sockets of every namespace we can enter, and the reasons for those we cannot;
        with ``interfaces``, each socket's interface where its local address is one's."""
        home = own_namespace()
        sockets: list[RawSocket] = []
        with diag_socket() as sock:
            sockets += dump_namespace(home, sock)
        if interfaces:
            name_interfaces(sockets, home, home, None)
        unreachable: list[str] = []
        if str(ctx.proc_root) != "/proc":
            return sockets, unreachable
        for netns, path in network_namespaces(ctx.proc_root, None).items():
            if netns == home:
                continue
            ctx.check_cancelled()
            try:
                with socket_in_namespace(path, NETLINK_SOCK_DIAG) as sock:
                    found = dump_namespace(netns, sock)
                if interfaces:
                    name_interfaces(found, netns, home, path)
                sockets += found
            except OSError as exc:
                unreachable.append(f"net:[{netns}]: {exc.strerror or exc}")
        return sockets, unreachable


def name_interfaces(
    found: list[RawSocket], netns: int | None, home: int | None, path: str | None
) -> None:
    """Set ``ifname`` and ``nic`` (the nic node's id) on each TCP/UDP socket whose local
    address an interface of its namespace holds (loopback addresses: ``lo``); ``path``
    enters that namespace, None for the own one."""
    try:
        with socket_in_namespace(path, NETLINK_ROUTE) as sock:
            names = {link["ifindex"]: link["ifname"] for link in dump_links(sock)}
            addresses = dump_addresses(sock)
    except OSError:  # no route netlink here: the sockets stay without their interface
        return
    loopback = next((i for i, link in names.items() if link == "lo"), None)
    for raw in found:
        local = raw.attrs.get("local_addr")
        if raw.attrs["proto"] == "unix" or not local:
            continue
        index = addresses.get(local, loopback if is_loopback(local) else None)
        ifname = names.get(index) if index is not None else None
        if ifname:
            raw.attrs["ifname"] = ifname
            raw.attrs["nic"] = nic_id(ifname, netns, home)


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
