"""The graph look-ups that views and rules share: one answer to each question for both.

Where a node is (its host, its NUMA node, a device's node), what a process is connected to
(parent, ancestors, threads, devices, container, peers, a socket's real owners), and the
shares of its CPU time and pages per node. Each reads the typed attribute first and falls
back to the edges that carry the same fact, because live collectors and imports fill
different ones. ``converters.facts.Facts`` answers them once per graph for the views, and
the skills' ``Analysis`` reads the same ``Facts``; neither judges, rules do.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass

from . import ids
from .cpulist import CpuListError, parse_cpulist
from .graph import Graph
from .model import Edge, Node

ACCELERATOR_KINDS = ("gpu", "npu")


def host_prefix(node_id: str) -> str:
    """The host part of a node id (``""`` in a one-host graph): what nodes of a host share."""
    return ids.split_host(node_id)[0]


def hosts_by_prefix(graph: Graph) -> dict[str, Node]:
    """Host prefix → its host node (the first, when a graph holds two with one prefix)."""
    hosts: dict[str, Node] = {}
    for host in graph.of_kind("host"):
        hosts.setdefault(host_prefix(host.id), host)
    return hosts


def numa_id(node: Node) -> int | None:
    """A numa_node's number."""
    value = node.get("numa_id")
    return int(value) if value is not None else None


def numa_nodes(graph: Graph) -> dict[str, dict[int, Node]]:
    """Host prefix → NUMA id → its numa_node."""
    out: dict[str, dict[int, Node]] = defaultdict(dict)
    for node in graph.of_kind("numa_node"):
        number = numa_id(node)
        if number is not None:
            out[host_prefix(node.id)][number] = node
    return out


def numa_distance(node: Node | None, other: int) -> int | None:
    """The firmware's distance (SLIT: 10 is local) from a numa_node to NUMA node ``other``."""
    distances = node.get("distances") or node.get("distance_to_all_numa") if node else None
    value = (distances or {}).get(str(other))
    return int(value) if value is not None else None


def device_numa_node(graph: Graph, device: Node) -> tuple[int | None, str, bool]:
    """The NUMA node a device (GPU, NPU, NIC) is attached to: ``(node, how, certain)``.

    Firmware's ``numa_node`` first (``-1`` is not an answer), then a ``local_to`` edge, then
    the node holding most of its ``cpu_affinity`` CPUs. ``certain`` is False when firmware
    said ``-1`` (a VM or a BIOS that does not describe the topology) and the node was inferred.
    """
    value = device.get("numa_node")
    if value is not None and int(value) >= 0:
        return int(value), "numa_node", True
    for edge in graph.out_edges(device.id, "local_to"):
        target = graph.nodes.get(edge.dst)
        number = target.get("numa_id") if target is not None else None
        if number is not None:
            return int(number), "local_to", value is None
    affinity = cpu_set(device.get("cpu_affinity"))
    if affinity:
        node = numa_node_of_cpus(graph, host_prefix(device.id), affinity)
        if node is not None:
            return node, "cpu_affinity", value is None
    return None, "unknown", False


def numa_node_of_cpus(graph: Graph, prefix: str, cpus: set[int]) -> int | None:
    """The NUMA node (of the host with this id prefix) holding most of these CPUs."""
    best, best_overlap = None, 0
    for node in graph.of_kind("numa_node"):
        number = node.get("numa_id")
        if number is None or host_prefix(node.id) != prefix:
            continue
        overlap = len(cpus & cpu_set(node.get("cpulist")))
        if overlap > best_overlap:
            best, best_overlap = int(number), overlap
    return best


def cpu_set(cpulist: str | None) -> set[int]:
    """The CPUs of a cpulist such as ``0-3,8``; absent or unreadable lists name none."""
    if not cpulist:
        return set()
    if isinstance(cpulist, str):
        return set(_parsed_cpus(cpulist))
    try:
        return set(parse_cpulist(cpulist))
    except CpuListError:
        return set()


# A graph holds a handful of distinct lists over hundreds of thousands of threads and
# processes; views and rules ask for each again and again (every process line compares its
# threads' lists with its own).
@functools.lru_cache(maxsize=4096)
def _parsed_cpus(cpulist: str) -> frozenset[int]:
    try:
        return frozenset(parse_cpulist(cpulist))
    except CpuListError:
        return frozenset()


def shares(values: dict[str, float] | None) -> dict[int, float]:
    """Per-node values → shares summing to 1 (empty when there is nothing to share)."""
    if not values:
        return {}
    clean: dict[int, float] = {}
    for key, value in values.items():
        try:  # a node number and an amount; anything else (a hand-made graph's text) is no share
            node, amount = int(key), float(value)
        except (TypeError, ValueError):
            continue
        if amount > 0:
            clean[node] = amount
    total = sum(clean.values())
    return {k: v / total for k, v in clean.items()} if total > 0 else {}


def cpu_share(graph: Graph, proc: Node) -> dict[int, float]:
    """Share of a process's CPU time per NUMA node: the collector's shares, else its
    ``cpu_on`` edges, else its threads' CPU time per node."""
    found = shares(proc.get("numa_cpu_share")) or shares(_edge_values(graph, proc.id, "cpu_on"))
    if found:
        return found
    per_node: dict[str, float] = defaultdict(float)
    for thread in graph.successors(proc.id, "has_thread"):
        for node, seconds in (thread.get("numa_cpu_time") or {}).items():
            per_node[node] += seconds
    return shares(per_node)


def page_share(graph: Graph, proc: Node) -> dict[int, float]:
    """Share of a process's resident pages per NUMA node."""
    return (
        shares(proc.get("numa_page_share"))
        or shares(proc.get("numa_pages"))
        or shares(_edge_values(graph, proc.id, "mem_on"))
    )


def _edge_values(graph: Graph, node_id: str, kind: str) -> dict[str, float]:
    """NUMA id → ``share`` of a process's cpu_on/mem_on edges."""
    out: dict[str, float] = {}
    for edge in graph.out_edges(node_id, kind):
        target = graph.node(edge.dst)
        number = target.get("numa_id") if target else None
        value = edge.get("share")
        if number is not None and value is not None:
            out[str(number)] = value
    return out


def thread_owners(graph: Graph) -> tuple[dict[str, str], dict[str, list[Node]]]:
    """Thread id → process id (its ``has_thread`` edge, else the process its pid names:
    witty-profiler imports link only some threads), and process id → its threads in the
    graph's order: both in one pass over the threads."""
    owner: dict[str, str] = {}
    by_process: dict[str, list[Node]] = defaultdict(list)
    nodes = graph.nodes
    linked = _first_process_parents(graph)
    for thread in graph.of_kind("thread"):
        thread_id = thread.id
        parent = linked.get(thread_id)
        if parent is None:
            parent = _process_of_pid(nodes, thread)
            if parent is None:
                continue
        owner[thread_id] = parent
        by_process[parent].append(thread)
    return owner, by_process


def _process_of_pid(nodes: dict[str, Node], thread: Node) -> str | None:
    pid = thread.get("pid")
    if pid is None:
        return None
    host, _ = ids.split_host(thread.id)
    candidate = ids.with_host(host, ids.process(int(pid)))
    return candidate if candidate in nodes else None


def _first_process_parents(graph: Graph) -> dict[str, str]:
    """Thread id → the source of the first ``has_thread`` edge into it from a process, in
    the graph's edge order (the order ``in_edges`` lists them in). Found from each process's
    own edges (no scan of the whole edge list, nor a lookup per thread: a quarter of a cold
    summary at 640 hosts); only a thread two processes claim is looked up by its edges."""
    parents: dict[str, str] = {}
    contested: list[str] = []
    for process in graph.of_kind("process"):
        process_id = process.id
        for edge in graph.out_edges(process_id, "has_thread"):
            if parents.setdefault(edge.dst, process_id) is not process_id:
                contested.append(edge.dst)
    if contested:
        processes = {process.id for process in graph.of_kind("process")}
        for thread_id in contested:
            edges = graph.in_edges(thread_id, "has_thread")
            parents[thread_id] = next(e.src for e in edges if e.src in processes)
    return parents


def foreign_thread_cpus(proc: Node, threads: list[Node]) -> dict[str, set[int]]:
    """Threads allowed other CPUs than their process shows: thread id → its CPUs."""
    own_list = proc.get("cpus_allowed")
    own = cpu_set(own_list)
    return {
        t.id: allowed
        for t in threads
        # the same list as its process's names the same CPUs: no need to parse it
        if (listed := t.get("cpus_allowed")) != own_list
        and (allowed := cpu_set(listed))
        and allowed != own
    }


def devices_of(graph: Graph, process_id: str) -> list[str]:
    """The devices a process uses (its ``uses_device`` edges)."""
    return [e.dst for e in graph.out_edges(process_id, "uses_device")]


def accelerators_of(graph: Graph, process_id: str) -> list[Node]:
    """The GPUs and NPUs a process uses (what ranks and placements are judged by)."""
    found = (graph.nodes.get(device) for device in devices_of(graph, process_id))
    return [d for d in found if d is not None and d.kind in ACCELERATOR_KINDS]


LINKED_KINDS = ("gpu", "npu", "nic", "pci_bridge", "rdma_device")  # devices with a PCIe link


def link_downtrained(device: Node) -> bool | None:
    """Whether a device's PCIe link trained below its capability (speed or width, as lspci
    flags LnkSta below LnkCap); None when its current or maximum speed is unknown."""
    speed, top = device.get("link_speed_gts"), device.get("link_max_speed_gts")
    if speed is None or top is None:
        return None
    width, top_width = device.get("link_width"), device.get("link_max_width")
    return speed < top or (width is not None and top_width is not None and width < top_width)


def users_of(graph: Graph, device_id: str) -> list[str]:
    """The processes using a device."""
    return [e.src for e in graph.in_edges(device_id, "uses_device")]


def container_of(graph: Graph, process_id: str) -> str | None:
    edges = graph.out_edges(process_id, "in_container")
    return edges[0].dst if edges else None


def talks(graph: Graph, process_id: str) -> list[tuple[str, Edge]]:
    """(peer id, ``talks_to`` edge) of a process, in both directions."""
    out = [(e.dst, e) for e in graph.out_edges(process_id, "talks_to")]
    out += [(e.src, e) for e in graph.in_edges(process_id, "talks_to")]
    return out


def parent_of(graph: Graph, proc_id: str) -> str | None:
    """A process's parent: its ``parent_of`` edge, else the process its ``ppid`` names (imports
    and eBPF-only processes carry no edges)."""
    for edge in graph.in_edges(proc_id, "parent_of"):
        return edge.src
    node = graph.nodes.get(proc_id)
    ppid = node.get("ppid") if node is not None else None
    if ppid is None:
        return None
    candidate = ids.with_host(ids.split_host(proc_id)[0], ids.process(int(ppid)))
    return candidate if candidate in graph.nodes else None


def socket_owners(graph: Graph, sock_id: str) -> list[str]:
    """The processes that really use a TCP or UDP socket, of those holding it.

    A forked child (a DataLoader worker) inherits its parent's descriptors and so holds the
    parent's sockets without ever using them. With eBPF, the holders that moved bytes through
    the socket during the window own it; without, a holder whose ancestor holds the same
    socket inherited it and is not an owner (the earliest holder is)."""
    holds = graph.in_edges(sock_id, "holds")
    holders = sorted({edge.src for edge in holds})
    node = graph.nodes.get(sock_id)
    if len(holders) < 2 or (node is not None and node.get("proto") == "unix"):
        # a UNIX socketpair is how a parent and its child talk: both hold both ends
        return holders
    moved = sorted(
        {
            e.src
            for e in holds
            if (e.get("ebpf_bytes_sent") or 0) + (e.get("ebpf_bytes_received") or 0)
        }
    )
    if moved:
        return moved
    held = set(holders)
    return [h for h in holders if not ancestors(graph, h) & held]


def ancestors(graph: Graph, proc_id: str) -> set[str]:
    """A process's parent, its parent's parent, … (``parent_of``)."""
    found: set[str] = set()
    current = parent_of(graph, proc_id)
    while current is not None and current not in found:
        found.add(current)
        current = parent_of(graph, current)
    return found


# the step timeline (collectors/ebpf/timeline.py): a job's figures sit on each of its ranks
STEP_FIGURES = (
    "steps_per_s", "step_ms_p50", "step_ms_p99", "comm_share", "comm_excess_share",
    "step_lost_share",
)  # fmt: skip


@dataclass(frozen=True)
class StepJob:
    """One job whose step timeline eBPF measured: its label and its ranks' nodes."""

    label: str
    ranks: tuple[Node, ...]

    def figure(self, name: str) -> float | None:
        value = self.ranks[0].get(name)
        return None if value is None else float(value)

    @property
    def steps_per_s(self) -> float:
        return self.ranks[0].get("steps_per_s") or 0.0

    def straggler(self) -> Node:
        """The rank that arrived last most often."""
        return max(self.ranks, key=lambda r: (r.get("last_arrival_share") or 0.0, r.id))


def step_jobs(graph: Graph) -> list[StepJob]:
    """The jobs with a step timeline, the fastest-stepping first."""
    found: dict[str, list[Node]] = defaultdict(list)
    for proc in graph.of_kind("process"):
        label = proc.get("step_job")
        if label and proc.get("steps_per_s") is not None:
            found[label].append(proc)
    jobs = [
        StepJob(label, tuple(sorted(ranks, key=lambda r: r.id))) for label, ranks in found.items()
    ]
    return sorted(jobs, key=lambda j: (-j.steps_per_s, j.label))


def no_step_timeline(graph: Graph) -> str:
    """Why a graph has no step timeline, in a few words."""
    ebpf = next((c for c in graph.meta.collectors if c.name == "ebpf"), None)
    if ebpf is None:
        return "no eBPF tier in this snapshot (its send/receive bursts make the timeline)"
    if ebpf.status in ("skipped", "failed", "cancelled"):
        return f"eBPF {ebpf.status}: {ebpf.reason or 'no reason recorded'}"
    return (
        "no periodic traffic between processes over TCP in the window (collectives over "
        "NVLink, RDMA or shared memory use no socket: not measurable here)"
    )
