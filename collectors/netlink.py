"""Netlink plumbing the network collectors share: one dump request and its replies, the
attributes of a message, and sockets opened inside another network namespace.

A netlink socket belongs to the namespace of the thread that created it, so
``socket_in_namespace`` lets a short-lived helper thread enter the namespace, open the socket
and leave; the collector's own threads never change namespace. Entering needs
CAP_SYS_ADMIN; without it the caller gets the ``OSError`` and says what is missing.

Decoded with ``struct``, not pyroute2: its pure-Python message decoding took ~1.5 s for 4,000
TCP sockets here, more than a whole snapshot may cost.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wp_mcp.graph import ids

from .taskstat import if_vanished, list_dir, namespace_inode, read_link

NETLINK_ROUTE, NETLINK_SOCK_DIAG = 0, 4
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
CLONE_NEWNET = 0x40000000
NAMED_NETNS_DIR = Path("/run/netns")  # where `ip netns add` binds the namespaces it names

_NLMSG = struct.Struct("=IHHII")
_RTA = struct.Struct("=HH")


def netlink_socket(protocol: int) -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)


def dump(sock: socket.socket, msg_type: int, payload: bytes) -> Iterator[memoryview]:
    """Send one dump request of ``msg_type`` and yield each reply's body."""
    header = _NLMSG.pack(_NLMSG.size + len(payload), msg_type,
                         NLM_F_REQUEST | NLM_F_DUMP, 1, 0)  # fmt: skip
    sock.send(header + payload)
    while True:
        data = memoryview(sock.recv(1 << 20))
        offset = 0
        while offset + _NLMSG.size <= len(data):
            length, reply_type, _flags, _seq, _pid = _NLMSG.unpack_from(data, offset)
            if length < _NLMSG.size or reply_type == NLMSG_DONE:
                return
            if reply_type == NLMSG_ERROR:
                errno = -struct.unpack_from("=i", data, offset + _NLMSG.size)[0]
                raise OSError(errno, f"netlink: {os.strerror(errno)}")
            yield data[offset + _NLMSG.size : offset + length]
            offset += (length + 3) & ~3


def request(sock: socket.socket, msg_type: int, payload: bytes) -> memoryview:
    """Send one (non-dump) request and return its reply's body."""
    sock.send(_NLMSG.pack(_NLMSG.size + len(payload), msg_type, NLM_F_REQUEST, 1, 0) + payload)
    data = memoryview(sock.recv(1 << 16))
    length, reply_type, _flags, _seq, _pid = _NLMSG.unpack_from(data, 0)
    if reply_type == NLMSG_ERROR:
        errno = -struct.unpack_from("=i", data, _NLMSG.size)[0]
        raise OSError(errno, f"netlink: {os.strerror(errno)}")
    return data[_NLMSG.size : length]


def attributes(body: memoryview, start: int) -> Iterator[tuple[int, memoryview]]:
    """``(type, payload)`` of each attribute from ``start`` on (nested ones: call again on
    the payload from 0). The nested flag bit is masked off the type."""
    offset = start
    while offset + _RTA.size <= len(body):
        length, kind = _RTA.unpack_from(body, offset)
        if length < _RTA.size:
            return
        yield kind & 0x3FFF, body[offset + _RTA.size : offset + length]
        offset += (length + 3) & ~3


def socket_in_namespace(ns_path: str | None, protocol: int) -> socket.socket:
    """A netlink socket of ``protocol`` bound to the network namespace ``ns_path`` names
    (None: the own namespace)."""
    if ns_path is None:
        return netlink_socket(protocol)
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
                result["sock"] = netlink_socket(protocol)
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


def namespace_names(folder: Path = NAMED_NETNS_DIR) -> dict[int, str]:
    """Inode → name of the namespaces ``ip netns`` named (its bind mounts in /run/netns)."""
    names: dict[int, str] = {}
    for entry in list_dir(folder):
        inode = _inode(entry.path)
        if inode is not None:
            names.setdefault(inode, entry.name)
    return names


@if_vanished(None)  # deleted since it was listed
def _inode(path: str) -> int:
    return os.stat(path).st_ino


def nic_id(ifname: str, netns: int | None, home: int | None) -> str:
    """``nic:<ifname>`` in the collector's own namespace, ``nic:<ifname>@<inode>`` in another
    (every namespace has its own ``lo``, and veth ends may share a name)."""
    return ids.nic(ifname if netns is None or netns == home else f"{ifname}@{netns}")
