"""Interfaces, their addresses and their queueing disciplines over rtnetlink (the dumps
``ip -s link``, ``ip addr`` and ``tc -s qdisc`` / ``tc -s class`` make), for the namespace
of the netlink socket they are given.

- ``dump_links``: name, MTU, state, MAC, link kind (``veth``, ``bridge``…; none for a
  physical NIC), the interface it sits on (``IFLA_LINK``: a veth's other end, a vlan's
  parent; with ``IFLA_LINK_NETNSID`` when that is in another namespace, which
  ``namespace_id`` names) and the counters of ``IFLA_STATS64`` under the names sysfs gives
  them;
- ``dump_addresses``: every local address and the interface that holds it;
- ``dump_qdiscs``: each qdisc's kind, handle and parent, its statistics (``bytes``,
  ``packets``, ``drops``, ``overlimits``, ``requeues``, ``backlog_bytes``,
  ``backlog_packets``) and, for the shapers, their parameters (tbf: ``rate_bytes_per_s``,
  ``peak_rate_bytes_per_s``, ``limit_bytes``; htb: ``default_class`` and, per class, its
  ``rate_bytes_per_s`` and ``ceil_bytes_per_s`` with the class's own statistics; fifos:
  ``limit_packets`` or ``limit_bytes``).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

from .netlink import attributes, dump, request
from .taskstat import if_vanished

RTM_GETLINK, RTM_GETADDR, RTM_GETQDISC, RTM_GETTCLASS, RTM_GETNSID = 18, 22, 38, 42, 90
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_OPERSTATE, IFLA_LINKINFO = 1, 3, 4, 5, 16, 18
IFLA_STATS64, IFLA_LINK_NETNSID = 23, 37
NETNSA_NSID, NETNSA_FD = 1, 3
IFLA_INFO_KIND = 1
IFA_ADDRESS, IFA_LOCAL = 1, 2
TCA_KIND, TCA_OPTIONS, TCA_STATS, TCA_STATS2 = 1, 2, 3, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_PRATE64 = 1, 4, 5
TCA_HTB_PARMS, TCA_HTB_INIT, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 2, 6, 7
TC_H_ROOT, TC_H_INGRESS = 0xFFFFFFFF, 0xFFFFFFF1
ARPHRD_LOOPBACK = 772
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
# rtnl_link_stats64's first eight u64, named as /sys/class/net/<if>/statistics names them
LINK_COUNTERS = (
    "rx_packets", "tx_packets", "rx_bytes", "tx_bytes",
    "rx_errors", "tx_errors", "rx_dropped", "tx_dropped",
)  # fmt: skip
# counters of a qdisc or class that are turned into deltas over a window
QDISC_COUNTERS = ("bytes", "packets", "drops", "overlimits", "requeues")

_IFINFO = struct.Struct("=BBHiII")
_IFADDR = struct.Struct("=BBBBI")
_TCMSG = struct.Struct("=BBHiIII")
_QUEUE = struct.Struct("=5I")  # gnet_stats_queue: qlen, backlog, drops, requeues, overlimits
_OLD_STATS = struct.Struct("=QIIIIIII")  # tc_stats: bytes, packets, drops, overlimits, …
_RATESPEC_RATE = 8  # tc_ratespec: cell_log, linklayer, overhead, cell_align, mpu, then rate


def dump_links(sock: socket.socket) -> list[dict[str, Any]]:
    """One dict per interface: ``ifindex``, ``ifname``, attrs, and ``counters``."""
    links = []
    for body in dump(sock, RTM_GETLINK, _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0)):
        _family, _pad, link_type, index, _flags, _change = _IFINFO.unpack_from(body, 0)
        link: dict[str, Any] = {"ifindex": index, "counters": {}}
        for kind, value in attributes(body, _IFINFO.size):
            if kind == IFLA_IFNAME:
                link["ifname"] = _c_string(value)
            elif kind == IFLA_LINK:
                link["link_ifindex"] = struct.unpack_from("=I", value)[0]
            elif kind == IFLA_LINK_NETNSID:
                link["link_nsid"] = struct.unpack_from("=i", value)[0]
            elif kind == IFLA_MTU:
                link["mtu"] = struct.unpack_from("=I", value)[0]
            elif kind == IFLA_OPERSTATE:
                state = value[0]
                link["operstate"] = OPERSTATES[state] if state < len(OPERSTATES) else str(state)
            elif kind == IFLA_ADDRESS and len(value) == 6:
                link["mac"] = ":".join(f"{byte:02x}" for byte in bytes(value))
            elif kind == IFLA_LINKINFO:
                for sub, sub_value in attributes(value, 0):
                    if sub == IFLA_INFO_KIND:
                        link["link_kind"] = _c_string(sub_value)
            elif kind == IFLA_STATS64 and len(value) >= 64:
                link["counters"] = dict(
                    zip(LINK_COUNTERS, struct.unpack_from("=8Q", value), strict=True)
                )
        if link_type == ARPHRD_LOOPBACK:
            link["loopback"] = True
        if "ifname" in link:
            links.append(link)
    return links


@if_vanished(None)  # its last process exited since it was listed
def namespace_id(sock: socket.socket, ns_path: str) -> int | None:
    """The id the namespace of ``sock`` knows the namespace ``ns_path`` by (the
    ``IFLA_LINK_NETNSID`` of a veth whose other end is there); None when it has none."""
    fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        payload = struct.pack("=B3x", socket.AF_UNSPEC) + _u32_attribute(NETNSA_FD, fd)
        reply = request(sock, RTM_GETNSID, payload)
    finally:
        os.close(fd)
    for kind, value in attributes(reply, 4):
        if kind == NETNSA_NSID:
            nsid = struct.unpack_from("=i", value)[0]
            return nsid if nsid >= 0 else None
    return None


def _u32_attribute(kind: int, value: int) -> bytes:
    return struct.pack("=HHI", 8, kind, value)


def dump_addresses(sock: socket.socket) -> dict[str, int]:
    """Local address → index of the interface that holds it (IPv4 and IPv6)."""
    found: dict[str, int] = {}
    for body in dump(sock, RTM_GETADDR, _IFADDR.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        family, _prefix, _flags, _scope, index = _IFADDR.unpack_from(body, 0)
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        addresses = dict(attributes(body, _IFADDR.size))
        # IFA_LOCAL is the own end of a point-to-point link, where IFA_ADDRESS is the peer's
        raw = addresses.get(IFA_LOCAL, addresses.get(IFA_ADDRESS))
        if raw is not None:
            found.setdefault(socket.inet_ntop(family, bytes(raw)), index)
    return found


def dump_qdiscs(sock: socket.socket) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(ifindex, qdisc)`` for every qdisc of every interface."""
    yield from _dump_tc(sock, RTM_GETQDISC, 0)


def dump_classes(sock: socket.socket, ifindex: int) -> list[dict[str, Any]]:
    """The classes of one interface's classful qdiscs (the kernel lists them per interface)."""
    return [tc for _index, tc in _dump_tc(sock, RTM_GETTCLASS, ifindex)]


def _dump_tc(
    sock: socket.socket, msg_type: int, ifindex: int
) -> Iterator[tuple[int, dict[str, Any]]]:
    request = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, ifindex, 0, 0, 0)
    for body in dump(sock, msg_type, request):
        _family, _pad1, _pad2, index, handle, parent, _info = _TCMSG.unpack_from(body, 0)
        tc: dict[str, Any] = {"handle": tc_handle(handle), "parent": tc_handle(parent)}
        options = None
        for kind, value in attributes(body, _TCMSG.size):
            if kind == TCA_KIND:
                tc["kind"] = _c_string(value)
            elif kind == TCA_OPTIONS:
                options = value
            elif kind == TCA_STATS2:
                tc.update(_stats2(value))
            elif kind == TCA_STATS and "bytes" not in tc and len(value) >= _OLD_STATS.size:
                tc.update(_old_stats(value))
        if options is not None:
            tc.update(_parameters(tc.get("kind"), options, is_class=msg_type == RTM_GETTCLASS))
        yield index, tc


def tc_handle(value: int) -> str:
    """A handle or parent as tc writes it: ``root``, ``ingress``, ``1:``, ``1:10``."""
    if value == TC_H_ROOT:
        return "root"
    if value == TC_H_INGRESS:
        return "ingress"
    major, minor = value >> 16, value & 0xFFFF
    return f"{major:x}:{minor:x}" if minor else f"{major:x}:"


def _stats2(nested: memoryview) -> dict[str, int]:
    stats: dict[str, int] = {}
    for kind, value in attributes(nested, 0):
        if kind == TCA_STATS_BASIC and len(value) >= 12:
            stats["bytes"], stats["packets"] = struct.unpack_from("=QI", value)
        elif kind == TCA_STATS_PKT64 and len(value) >= 8:
            stats["packets"] = struct.unpack_from("=Q", value)[0]
        elif kind == TCA_STATS_QUEUE and len(value) >= _QUEUE.size:
            qlen, backlog, drops, requeues, overlimits = _QUEUE.unpack_from(value)
            stats.update(drops=drops, overlimits=overlimits, requeues=requeues,
                         backlog_bytes=backlog, backlog_packets=qlen)  # fmt: skip
    return stats


def _old_stats(value: memoryview) -> dict[str, int]:
    nbytes, packets, drops, overlimits, _bps, _pps, qlen, backlog = _OLD_STATS.unpack_from(value)
    return {"bytes": nbytes, "packets": packets, "drops": drops, "overlimits": overlimits,
            "backlog_bytes": backlog, "backlog_packets": qlen}  # fmt: skip


def _parameters(kind: str | None, options: memoryview, is_class: bool) -> dict[str, Any]:
    """The rate and limit parameters of the shapers and fifos; nothing for other kinds."""
    if kind in ("pfifo", "bfifo") and len(options) >= 4:
        unit = "limit_packets" if kind == "pfifo" else "limit_bytes"
        return {unit: struct.unpack_from("=I", options)[0]}
    nested = dict(attributes(options, 0)) if kind in ("tbf", "htb") else {}
    if kind == "tbf" and len(nested.get(TCA_TBF_PARMS, b"")) >= 36:
        parms = nested[TCA_TBF_PARMS]
        rate, peak = (
            struct.unpack_from("=I", parms, at)[0] for at in (_RATESPEC_RATE, 12 + _RATESPEC_RATE)
        )
        params: dict[str, Any] = {
            "rate_bytes_per_s": _u64(nested.get(TCA_TBF_RATE64)) or rate,
            "limit_bytes": struct.unpack_from("=I", parms, 24)[0],
        }
        peak = _u64(nested.get(TCA_TBF_PRATE64)) or peak
        if peak:
            params["peak_rate_bytes_per_s"] = peak
        return params
    if kind == "htb" and is_class and len(nested.get(TCA_HTB_PARMS, b"")) >= 24:
        parms = nested[TCA_HTB_PARMS]
        rate, ceil = (
            struct.unpack_from("=I", parms, at)[0] for at in (_RATESPEC_RATE, 12 + _RATESPEC_RATE)
        )
        return {
            "rate_bytes_per_s": _u64(nested.get(TCA_HTB_RATE64)) or rate,
            "ceil_bytes_per_s": _u64(nested.get(TCA_HTB_CEIL64)) or ceil,
        }
    if kind == "htb" and len(nested.get(TCA_HTB_INIT, b"")) >= 12:
        default = struct.unpack_from("=I", nested[TCA_HTB_INIT], 8)[0]
        return {"default_class": f"{default:x}"}
    return {}


def _u64(value: memoryview | None) -> int:
    return struct.unpack_from("=Q", value)[0] if value is not None and len(value) >= 8 else 0


def _c_string(value: memoryview) -> str:
    return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
