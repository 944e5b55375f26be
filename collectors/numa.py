"""NUMA placement (T1): nodes, and where each process runs and keeps its memory.

- Nodes from ``/sys/devices/system/node/node<N>``: ``cpulist``, ``meminfo``, ``distance``,
  ``numastat``.
- CPU share per node of a process: each thread's CPU time over the window is attributed to
  the node of the CPU it was last seen on (the ``processor`` field of its ``stat`` at the
  window's end). This is an approximation — a thread that migrated during the window counts
  wholly on its last node. A process that used no CPU during the window gets its share from
  its threads' last CPUs, one vote per thread (``numa_cpu_basis = "placement"``).
- Page share per node from ``/proc/<pid>/numa_maps`` (``N<node>=<pages>`` weighted by
  ``kernelpagesize_kB``; reading it needs ptrace access to the process). On a host with
  one node the resident size from ``statm`` is used instead (same answer, any user, cheap).
- Locality = Σ_node cpu_share·page_share: the probability that a random unit of CPU time
  and a random resident byte of the process are on the same node.
- NUMA balancing: ``/proc/sys/kernel/numa_balancing``; hint-fault locality over the window
  from ``/proc/vmstat`` (``numa_hint_faults_local / numa_hint_faults``); per-process fault
  counts per node from ``/proc/<pid>/sched`` where the kernel prints them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .cpulist import format_cpulist, parse_cpulist
from .metrics import parse_key_values
from .taskstat import list_dir, list_tids, read_stat, read_text, scoped_pids
from .window import WindowedCollector, rate

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

SOURCE = "numa"
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_NODE_DIR = re.compile(r"node(\d+)$")
_NUMA_MAPS_NODE = re.compile(r"\bN(\d+)=(\d+)")
_PAGESIZE = re.compile(r"\bkernelpagesize_kB=(\d+)")
_SCHED_FAULTS = re.compile(
    r"numa_faults node=(\d+) task_private=(\d+) task_shared=(\d+)"
    r"(?: group_private=(\d+) group_shared=(\d+))?"
)


# --------------------------------------------------------------------------- parsers


@dataclass
class NumaNodeInfo:
    node: int
    cpus: list[int] = field(default_factory=list)
    mem_total_bytes: int | None = None
    mem_free_bytes: int | None = None
    distances: dict[int, int] = field(default_factory=dict)
    numastat: dict[str, int] = field(default_factory=dict)


def read_sysfs_nodes(sys_root: Path) -> dict[int, NumaNodeInfo]:
    """Every node under ``<sys>/devices/system/node``; {} on a kernel without NUMA."""
    base = sys_root / "devices" / "system" / "node"
    numbers = sorted(int(m.group(1)) for e in list_dir(base) if (m := _NODE_DIR.match(e.name)))
    nodes: dict[int, NumaNodeInfo] = {}
    for number in numbers:
        folder = base / f"node{number}"
        info = NumaNodeInfo(number, parse_cpulist(read_text(folder / "cpulist") or ""))
        meminfo = _parse_node_meminfo(read_text(folder / "meminfo") or "")
        info.mem_total_bytes = meminfo.get("MemTotal")
        info.mem_free_bytes = meminfo.get("MemFree")
        row = (read_text(folder / "distance") or "").split()
        # the distance row lists every node in the order the node folders sort
        info.distances = {other: int(d) for other, d in zip(numbers, row, strict=False)}
        info.numastat = parse_key_values(read_text(folder / "numastat") or "")
        nodes[number] = info
    return nodes


def _parse_node_meminfo(text: str) -> dict[str, int]:
    # "Node 0 MemTotal:  5334816 kB": drop the "Node 0" prefix, then it is plain meminfo
    return parse_key_values("\n".join(line.split(None, 2)[-1] for line in text.splitlines()))


def parse_numactl_hardware(text: str) -> dict[int, NumaNodeInfo]:
    """``numactl -H`` output (a captured one, or from a host we only have text of)."""
    nodes: dict[int, NumaNodeInfo] = {}
    columns: list[int] = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["node"] and len(words) > 1 and all(w.isdigit() for w in words[1:]):
            columns = [int(w) for w in words[1:]]  # header of the distance table
        elif len(words) >= 3 and words[0] == "node" and words[1].isdigit():
            info = nodes.setdefault(int(words[1]), NumaNodeInfo(int(words[1])))
            _numactl_node_line(info, words[2].rstrip(":"), words[3:])
        elif columns and words and words[0].endswith(":") and words[0][:-1].isdigit():
            row = int(words[0][:-1])
            info = nodes.setdefault(row, NumaNodeInfo(row))
            info.distances = {c: int(d) for c, d in zip(columns, words[1:], strict=False)}
    return nodes


_LSCPU_NODE = re.compile(r"^\s*NUMA node(\d+) CPU\(s\):\s*(.*)$")


def parse_lscpu_numa(text: str) -> dict[int, NumaNodeInfo]:
    """The ``NUMA nodeN CPU(s):`` lines of ``lscpu`` (flat or grouped layout; strided and
    empty CPU lists as util-linux prints them)."""
    nodes: dict[int, NumaNodeInfo] = {}
    for line in text.splitlines():
        match = _LSCPU_NODE.match(line)
        if match:
            node = int(match.group(1))
            nodes[node] = NumaNodeInfo(node, parse_cpulist(match.group(2)))
    return nodes


def _numactl_node_line(info: NumaNodeInfo, key: str, values: list[str]) -> None:
    if key == "cpus":
        info.cpus = [int(v) for v in values]
    elif key in ("size", "free") and values:
        size = int(values[0]) * {"MB": 2**20, "GB": 2**30, "kB": 2**10}.get(values[-1], 2**20)
        if key == "size":
            info.mem_total_bytes = size
        else:
            info.mem_free_bytes = size


def parse_numa_maps(text: str) -> dict[int, int]:
    """Resident bytes per node from ``numa_maps`` (``N<node>=<pages>`` × page size)."""
    per_node: dict[int, int] = {}
    for line in text.splitlines():
        pagesize = _PAGESIZE.search(line)
        page_bytes = int(pagesize.group(1)) * 1024 if pagesize else 4096
        for node, pages in _NUMA_MAPS_NODE.findall(line):
            per_node[int(node)] = per_node.get(int(node), 0) + int(pages) * page_bytes
    return per_node


def parse_sched_numa_faults(text: str) -> dict[int, int]:
    """NUMA hint faults per memory node from ``/proc/<pid>/sched`` (balancing kernels)."""
    faults: dict[int, int] = {}
    for match in _SCHED_FAULTS.finditer(text):
        node = int(match.group(1))
        faults[node] = faults.get(node, 0) + int(match.group(2)) + int(match.group(3))
    return faults


def node_of_cpus(cpulist: str, nodes: dict[int, NumaNodeInfo]) -> int | None:
    """The one NUMA node whose CPUs hold all of ``cpulist`` (a device's CPU affinity)."""
    wanted = set(parse_cpulist(cpulist))
    matches = [n for n, info in nodes.items() if wanted and wanted <= set(info.cpus)]
    return matches[0] if len(matches) == 1 else None


def locality(cpu_share: dict[int, float], page_share: dict[int, float]) -> float:
    """P(CPU time and memory on the same node) = Σ cpu_share[n] · page_share[n]."""
    return sum(share * page_share.get(node, 0.0) for node, share in cpu_share.items())


def shares(values: dict[int, float]) -> dict[int, float]:
    total = sum(values.values())
    return {node: value / total for node, value in values.items()} if total > 0 else {}


# --------------------------------------------------------------------------- collector


@dataclass
class NumaSample:
    threads: dict[int, tuple[int, float, int | None]]  # tid -> (pid, cpu_time_s, last_cpu)
    vmstat: dict[str, int]


class NumaCollector(WindowedCollector[NumaSample]):
    name = "numa"

    def __init__(self) -> None:
        super().__init__()
        self._nodes: dict[int, NumaNodeInfo] = {}
        self._balancing = False

    def probe(self, ctx: Context) -> str | None:
        self._nodes = read_sysfs_nodes(ctx.sys_root)
        if not self._nodes:
            return f"no NUMA nodes under {ctx.sys_root}/devices/system/node (kernel without NUMA)"
        return None

    def sample(self, ctx: Context) -> NumaSample:
        threads: dict[int, tuple[int, float, int | None]] = {}
        for pid in scoped_pids(ctx.proc_root, ctx.pids):
            ctx.check_cancelled()
            for tid in list_tids(ctx.proc_root, pid):
                stat = read_stat(f"{ctx.proc_root}/{pid}/task/{tid}/stat")
                if stat is not None:
                    threads[tid] = (pid, stat.cpu_time_s, stat.last_cpu)
        vmstat = parse_key_values(read_text(ctx.proc_root / "vmstat") or "")
        return NumaSample(threads, vmstat)

    def emit(
        self, graph: Graph, ctx: Context, first: NumaSample, last: NumaSample, window_s: float
    ) -> Outcome:
        if not self._nodes:
            self._nodes = read_sysfs_nodes(ctx.sys_root)
        add_numa_nodes(graph, self._nodes)
        self._emit_balancing(graph, ctx, first, last, window_s)
        cpu_node = {cpu: info.node for info in self._nodes.values() for cpu in info.cpus}
        per_process = _cpu_time_per_node(first, last, cpu_node, graph, window_s)
        denied = 0
        for pid, (cpu_time, basis) in per_process.items():
            ctx.check_cancelled()
            denied += not self._emit_process(graph, ctx, pid, cpu_time, basis)
        if denied:
            return Outcome.partial(
                f"numa_maps unreadable for {denied} processes (needs root or ptrace access); "
                "their page shares and locality are absent"
            )
        return Outcome()

    def _emit_balancing(
        self, graph: Graph, ctx: Context, first: NumaSample, last: NumaSample, window_s: float
    ) -> None:
        setting = (read_text(ctx.proc_root / "sys" / "kernel" / "numa_balancing") or "").strip()
        attrs: dict[str, Any] = {}
        self._balancing = bool(setting) and setting != "0"
        if setting:
            attrs["numa_balancing"] = setting != "0"
            graph.meta.capabilities.setdefault("numa_balancing", setting != "0")
        faults = rate(first.vmstat.get("numa_hint_faults"), last.vmstat.get("numa_hint_faults"), 1)
        local = rate(
            first.vmstat.get("numa_hint_faults_local"), last.vmstat.get("numa_hint_faults_local"), 1
        )
        if faults:
            attrs["numa_hint_faults_per_s"] = round(faults / window_s, 2)
            attrs["numa_hint_locality"] = round((local or 0) / faults, 4)
        if attrs:
            graph.add("host", ids.host(), source=SOURCE, **attrs)

    def _emit_process(
        self,
        graph: Graph,
        ctx: Context,
        pid: int,
        cpu_time: dict[int, float],
        basis: str,
    ) -> bool:
        """Add CPU and page placement of one process; False when numa_maps was unreadable."""
        base = ctx.proc_root / str(pid)
        page_bytes = self._page_bytes(base)
        if basis == "placement" and page_bytes is not None and not any(page_bytes.values()):
            return True  # an idle kernel thread: no memory, no CPU time, nothing to place
        proc_id = ids.process(pid)
        cpu_share = shares(cpu_time)
        attrs: dict[str, Any] = {
            "numa_cpu_share": {str(n): round(s, 4) for n, s in cpu_share.items()},
            "numa_cpu_basis": basis,
        }
        graph.add("process", proc_id, source=SOURCE, pid=pid, **attrs)
        for node, share in cpu_share.items():
            graph.link(
                "cpu_on", proc_id, ids.numa(node), source=SOURCE,
                share=round(share, 4), cpu_time_s=round(cpu_time[node], 3),
            )  # fmt: skip
        if page_bytes is None:
            return not base.exists()  # a process that exited is not a permission problem
        page_share = shares({n: float(b) for n, b in page_bytes.items()})
        if page_share:
            pages = {str(n): b // PAGE_BYTES for n, b in page_bytes.items()}
            graph.add(
                "process", proc_id, source=SOURCE, pid=pid,
                numa_pages=pages,
                numa_page_share={str(n): round(s, 4) for n, s in page_share.items()},
                numa_locality=round(locality(cpu_share, page_share), 4),
            )  # fmt: skip
            for node, share in page_share.items():
                graph.link(
                    "mem_on", proc_id, ids.numa(node), source=SOURCE,
                    share=round(share, 4), pages=pages[str(node)],
                )  # fmt: skip
        if self._balancing:
            faults = parse_sched_numa_faults(read_text(base / "sched") or "")
            if sum(faults.values()) > 0:
                numa_faults = {str(n): f for n, f in faults.items()}
                graph.add("process", proc_id, source=SOURCE, pid=pid, numa_faults=numa_faults)
        return True

    def _page_bytes(self, base: Path) -> dict[int, int] | None:
        """Resident bytes per node; None when the process may not be read.

        With one node every page is on it: the resident size from ``statm`` (readable by
        anyone, and far cheaper than ``numa_maps``, which walks the page tables) says it all.
        """
        if len(self._nodes) == 1:
            statm = (read_text(base / "statm") or "").split()
            if len(statm) < 2:
                return None
            return {next(iter(self._nodes)): int(statm[1]) * PAGE_BYTES}
        maps = read_text(base / "numa_maps")
        return None if maps is None else parse_numa_maps(maps)


def add_numa_nodes(graph: Graph, nodes: dict[int, NumaNodeInfo], source: str = SOURCE) -> None:
    """One ``numa_node`` per node (also used by tests and imports of ``numactl -H`` text)."""
    for info in nodes.values():
        attrs: dict[str, Any] = {
            "numa_id": info.node,
            "cpulist": format_cpulist(info.cpus),
            "distances": {str(o): d for o, d in info.distances.items()} or None,
            "mem_total_bytes": info.mem_total_bytes,
            "mem_free_bytes": info.mem_free_bytes,
            "numa_stats": info.numastat or None,
        }
        graph.add(
            "numa_node", ids.numa(info.node), source=source,
            **{k: v for k, v in attrs.items() if v is not None},
        )  # fmt: skip


def _cpu_time_per_node(
    first: NumaSample,
    last: NumaSample,
    cpu_node: dict[int, int],
    graph: Graph,
    window_s: float,
) -> dict[int, tuple[dict[int, float], str]]:
    """Per process: CPU seconds per node over the window, and the basis of the numbers."""
    used: dict[int, dict[int, float]] = {}
    votes: dict[int, dict[int, float]] = {}
    for tid, (pid, cpu_time, last_cpu) in last.threads.items():
        if last_cpu is None:
            continue
        node = cpu_node.get(last_cpu)
        if node is None:
            continue
        before = first.threads.get(tid)
        delta = cpu_time - before[1] if before and before[0] == pid else cpu_time
        per_node = used.setdefault(pid, {})
        per_node[node] = per_node.get(node, 0.0) + max(delta, 0.0)
        votes.setdefault(pid, {}).setdefault(node, 0.0)
        votes[pid][node] += 1.0
        if delta > 0:
            seen_on = {last_cpu} | ({before[2]} if before and before[2] is not None else set())
            graph.add(
                "thread", ids.thread(tid), source=SOURCE, tid=tid, pid=pid,
                numa_cpu_time={str(node): round(delta, 3)},
                cpus_used=format_cpulist(seen_on),  # CPUs seen at the window's two ends
            )  # fmt: skip
            graph.add("process", ids.process(pid), pid=pid)
            graph.link("has_thread", ids.process(pid), ids.thread(tid))
    out: dict[int, tuple[dict[int, float], str]] = {}
    for pid, per_node in used.items():
        if sum(per_node.values()) > 0:
            out[pid] = ({n: t for n, t in per_node.items() if t > 0}, "cpu_time")
        else:
            out[pid] = (votes[pid], "placement")
    return out
