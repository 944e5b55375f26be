"""What a cluster collection runs on each node, before the graphs are merged.

- ``collect_node``: wait for the shared window start, collect this node's snapshot, scope
  it to one network namespace where asked (several Ray nodes on one machine, or a container
  per node, see every process of the machine but own only those in their namespace), and
  mark the processes that carry rank variables;
- ``annotate_ranks``: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR… read from each process's
  environment (only these names are read: the environment also holds secrets);
- ``clock_offset``: a remote clock's offset from ours, NTP-style (the sample with the
  shortest round trip wins; the half round trip bounds the error).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wp_mcp.graph import Graph

from ..base import Context
from ..orchestrator import SHARED_KINDS, collect_snapshot
from ..taskstat import list_dir, namespace_inode, read_bytes, read_link

SOURCE = "cluster-node"
# environment variable -> (process attribute, type); launchers set different names
RANK_VARIABLES: dict[str, tuple[str, type]] = {
    "RANK": ("rank", int),  # torchrun, torch.distributed launchers, Slurm wrappers
    "OMPI_COMM_WORLD_RANK": ("rank", int),  # Open MPI
    "PMI_RANK": ("rank", int),  # MPICH, Intel MPI
    "LOCAL_RANK": ("local_rank", int),
    "WORLD_SIZE": ("world_size", int),
    "OMPI_COMM_WORLD_SIZE": ("world_size", int),
    "GROUP_RANK": ("node_rank", int),  # torchrun's node index
    "MASTER_ADDR": ("master_addr", str),
    "MASTER_PORT": ("master_port", int),
    "TORCHELASTIC_RUN_ID": ("launcher_run_id", str),
}
MAX_ENVIRON_BYTES = 256 * 1024  # ARG_MAX-sized environments exist; ranks sit in the first KiB
MAX_VALUE_CHARS = 256


def collect_node(ctx: Context, start_at: float | None = None, netns: int | None = None) -> Graph:
    """This node's snapshot: the window opens at ``start_at`` (epoch seconds, the same for
    every node) when given; with ``netns`` (a network namespace's inode, e.g.
    ``own_netns_inode()``) only processes in that namespace are kept."""
    if start_at is not None:
        delay = start_at - time.time()
        if delay > 0 and ctx.cancel.wait(delay):
            graph = Graph()
            graph.meta.cancelled = True  # type: ignore[attr-defined]
            return graph
    scope = netns_pids(ctx.proc_root, netns) if netns is not None else None
    if scope is not None:
        ctx.pids = scope  # procfs reads these families only; keep_only trims the families
    graph = collect_snapshot(ctx)
    if scope is not None:
        keep_only(graph, scope)
        graph.meta.capabilities["netns_scope"] = f"net:[{netns}]"
    annotate_ranks(graph, ctx.proc_root)
    return graph


# --------------------------------------------------------------------------- netns scope


def netns_inode(ns_path: str) -> int | None:
    """The inode of the network namespace ``ns_path`` (``/proc/PID/ns/net``) names."""
    return namespace_inode(read_link(ns_path))  # None: exited, or a kernel thread


def own_netns_inode() -> int | None:
    return netns_inode("/proc/thread-self/ns/net")


def netns_pids(proc_root: Path, netns: int) -> set[int]:
    """Pids of the processes in network namespace ``netns`` (inode)."""
    found = set()
    for entry in list_dir(proc_root):
        if entry.name.isdigit() and netns_inode(f"{proc_root}/{entry.name}/ns/net") == netns:
            found.add(int(entry.name))
    return found


def keep_only(graph: Graph, pids: set[int]) -> None:
    """Remove processes (and their threads) outside ``pids``, then what none of the kept
    processes holds: a pid filter keeps whole families, a namespace is not one."""
    for proc in graph.of_kind("process"):
        if proc.get("pid") not in pids:
            graph.remove_node(proc.id)
    for thread in graph.of_kind("thread"):
        pid = thread.get("pid")
        # a thread some source saw without its pid goes when its process went
        orphan = not graph.in_edges(thread.id, "has_thread")
        if (pid is None and orphan) or (pid is not None and pid not in pids):
            graph.remove_node(thread.id)
    for kind in SHARED_KINDS:
        for node in graph.of_kind(kind):
            if not graph.in_edges(node.id, "holds"):
                graph.remove_node(node.id)


# --------------------------------------------------------------------------- ranks


def annotate_ranks(graph: Graph, proc_root: Path = Path("/proc")) -> int:
    """Set rank attributes on processes whose environment carries them; returns how many."""
    marked = 0
    for proc in graph.of_kind("process"):
        found = rank_environment(proc_root, proc.get("pid"))
        if "rank" in found:
            for name, value in found.items():
                proc.set(name, value, SOURCE)
            marked += 1
    return marked


def rank_environment(proc_root: Path, pid: int | None) -> dict[str, Any]:
    """The rank variables of one process (empty when it has none or cannot be read)."""
    if pid is None:
        return {}
    data = read_bytes(f"{proc_root}/{pid}/environ", MAX_ENVIRON_BYTES)
    if data is None:  # gone, or another user's process without CAP_SYS_PTRACE
        return {}
    found: dict[str, Any] = {}
    for entry in data.split(b"\0"):
        name, sep, raw = entry.partition(b"=")
        spec = RANK_VARIABLES.get(name.decode("ascii", "replace")) if sep else None
        if spec is None or spec[0] in found:
            continue
        value = raw.decode("utf-8", "replace")[:MAX_VALUE_CHARS]
        attr, kind = spec
        if kind is int:
            if not value.isdigit():
                continue
            found[attr] = int(value)
        else:
            found[attr] = value
    return found


# --------------------------------------------------------------------------- clock


def clock_offset(remote_now: Callable[[], float], samples: int = 5) -> dict[str, float]:
    """How far a remote clock is ahead of ours: ``remote_now`` returns the remote epoch time.

    Each sample brackets the remote reading between two local ones; assuming the reading
    happened mid-way, the offset's error is at most half the round trip, so the sample with
    the shortest round trip is kept.
    """
    if samples < 1:
        raise ValueError("clock_offset needs at least one sample")
    best: tuple[float, float] | None = None
    for _ in range(samples):
        sent = time.time()
        remote = remote_now()
        back = time.time()
        round_trip = max(back - sent, 0.0)
        if best is None or round_trip < best[1]:
            best = (remote - (sent + back) / 2, round_trip)
    offset, round_trip = best  # type: ignore[misc]  # set by the first sample
    return {"offset_s": round(offset, 6), "uncertainty_s": round(round_trip / 2, 6),
            "samples": samples}  # fmt: skip
