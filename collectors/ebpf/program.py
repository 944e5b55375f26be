"""One bcc program of the eBPF tier: its tracepoints, its C text, how to read its maps.

Every program is a small self-contained module (``sockbytes``, ``retrans``, ``runqlat``,
``blockio``, ``pipes``) exposing a ``PROGRAM``. The collector compiles the C of every
program whose tracepoints exist into one BPF object (one clang run, not one per program),
reads each
program's maps once at the end of the window, and hands the records to the program's
``merge`` to turn them into graph attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

SOURCE = "ebpf"  # provenance recorded on every attribute this tier sets

# Shared C: the macros (offsets from BTF, map sizes) are prepended by the collector.
COMMON_C = r"""
#include <uapi/linux/ptrace.h>

/* Events that could not be counted because a bounded map was full, per program. */
BPF_ARRAY(lost_events, u64, 8);

static __always_inline void count_lost(int program)
{
    u64 *lost = lost_events.lookup(&program);
    if (lost)
        __sync_fetch_and_add(lost, 1);
}

/* Inode number of a struct sock's socket (0 for kernel sockets without one); it names the
   same socket as /proc/<pid>/fd and sock_diag do. A struct socket is allocated together with
   its inode (struct socket_alloc, the kernel's SOCK_INODE()), so two reads reach i_ino. */
static __always_inline u64 sock_inode(const void *sk)
{
    void *sock = NULL;
    u64 ino = 0;
    bpf_probe_read_kernel(&sock, sizeof(sock), (char *)sk + OFF_SOCK_SK_SOCKET);
    if (!sock)
        return 0;
    bpf_probe_read_kernel(&ino, sizeof(ino),
                          (char *)sock - OFF_SOCKET_ALLOC_SOCKET + OFF_SOCKET_ALLOC_VFS_INODE
                              + OFF_INODE_I_INO);
    return ino;
}
"""

# (struct, member path) -> macro name; the C above and the programs use these offsets.
OFFSETS: dict[str, tuple[str, str]] = {
    "OFF_SOCK_SK_SOCKET": ("sock", "sk_socket"),
    "OFF_SOCK_SK_TYPE": ("sock", "sk_type"),
    "OFF_SOCKET_ALLOC_SOCKET": ("socket_alloc", "socket"),
    "OFF_SOCKET_ALLOC_VFS_INODE": ("socket_alloc", "vfs_inode"),
    "OFF_FILE_F_INODE": ("file", "f_inode"),
    "OFF_INODE_I_INO": ("inode", "i_ino"),
    "OFF_SKC_DADDR": ("sock", "__sk_common.skc_daddr"),
    "OFF_SKC_RCV_SADDR": ("sock", "__sk_common.skc_rcv_saddr"),
    "OFF_SKC_DPORT": ("sock", "__sk_common.skc_dport"),
    "OFF_SKC_NUM": ("sock", "__sk_common.skc_num"),
    "OFF_SKC_V6_DADDR": ("sock", "__sk_common.skc_v6_daddr"),
    "OFF_SKC_V6_RCV_SADDR": ("sock", "__sk_common.skc_v6_rcv_saddr"),
    "OFF_UNIX_SOCK_PEER": ("unix_sock", "peer"),
    "OFF_TASK_FILES": ("task_struct", "files"),
    "OFF_FILES_FDT": ("files_struct", "fdt"),
    "OFF_FDTABLE_FD": ("fdtable", "fd"),
    "OFF_FDTABLE_MAX_FDS": ("fdtable", "max_fds"),
    "OFF_INODE_I_MODE": ("inode", "i_mode"),
}


@dataclass
class Scope:
    """What the collection covers: the pid filter and the window actually measured."""

    window_s: float
    pids: set[int] | None = None

    def includes(self, graph: Graph, pid: int) -> bool:
        """A process is in scope when no filter is set, or it is filtered in or already in
        the graph (the polling collectors applied the family filter)."""
        if self.pids is None:
            return True
        return pid in self.pids or ids.process(pid) in graph


@dataclass(frozen=True)
class Program:
    name: str
    index: int  # slot in lost_events
    tracepoints: tuple[tuple[str, str], ...]  # all must exist for the program to load
    c_text: str
    read: Callable[[Any], Any]  # BPF object -> records
    merge: Callable[[Graph, Any, Scope], None]
    limits: dict[str, int] = field(default_factory=dict)  # map size macros -> entries
