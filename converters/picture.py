"""The picture of a graph, like lstopo: what is drawn where, before any format draws it.

Each host is a box; each NUMA node a box inside it (grouped by socket where the graph
knows the socket) holding its CPU range, its memory, the devices local to it and the
processes of interest whose CPU time runs there. A process of interest is one a finding
names, one that uses a device (a rank), its parent (loader, front end), one end of a flow
or one of the busiest; the rest are folded into one count per host. Lines join processes
to their devices (with the share of their CPU time and pages on the device's node) and
processes to each other (flows with bytes and rate). What a finding names carries its
priority, and the finding's title says why.

The model holds raw host strings; each format (HTML, SVG, Mermaid) escapes them for where
they land. Every format draws the same :class:`Picture`, so they cannot disagree.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from wp_mcp.graph import ids
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Node
from wp_mcp.graph.query import cpu_set, cpu_share, device_numa_node, page_share

from .text import fmt_byte_rate, fmt_bytes, word

PRIORITY_ORDER = ("P0", "P1", "P2")
ACCELERATORS = ("gpu", "npu")
LOCAL_DEVICES = ("gpu", "npu", "nic", "rdma_device", "disk")
# Per host: more processes than this and the box stops being readable; the rest are counted.
MAX_PROCESSES = 40
MAX_FLOWS = 60  # per picture, biggest first
MAX_BUSIEST = 5  # processes kept for their CPU time alone
MAX_DEVICES_PER_NODE = 12  # NICs/disks beyond this (veths, loops) are counted, accelerators never
# From this many hosts on, hosts start folded (a box with counts) and open on demand.
FOLD_HOSTS_FROM = 5
CMDLINE_LIMIT = 160
MAX_EVIDENCE = 4  # links of a finding's evidence chain shown on hover
EVIDENCE_CHARS = 240


class FindingLike(Protocol):
    """What the picture reads of a skill's finding (skills come later in the data flow);
    read-only, so a finding whose priority is a Literal of str fits."""

    @property
    def priority(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def subject(self) -> str | None: ...
    @property
    def evidence(self) -> list[Any]: ...


@dataclass(slots=True)
class Box:
    """One thing drawn: a container (host, socket, NUMA node) or a leaf inside one."""

    id: str
    kind: str  # host | socket | numa | device | process | folded
    label: str  # first line: the name; later lines: facts
    parent: str | None
    detail: list[tuple[str, str]] = field(default_factory=list)  # shown on hover
    priority: str | None = None  # the most urgent finding naming it
    marks: list[int] = field(default_factory=list)  # indexes into Picture.marks
    folded: bool = False  # a host drawn closed at first (large clusters)
    inner_priority: str | None = None  # the most urgent finding on anything inside it


@dataclass(slots=True)
class Link:
    src: str
    dst: str
    kind: str  # uses (process → device) | flow (process → process)
    label: str
    priority: str | None = None


@dataclass(slots=True)
class Mark:
    """A finding as the picture shows it: its priority, its title, the boxes it names."""

    priority: str
    title: str
    subjects: list[str]
    evidence: list[str] = field(default_factory=list)  # the chain, one short line per link


@dataclass(slots=True)
class Picture:
    title: str
    boxes: list[Box]
    links: list[Link]
    marks: list[Mark]
    notes: list[str]

    def box(self, box_id: str) -> Box | None:
        return next((b for b in self.boxes if b.id == box_id), None)

    def children(self, parent: str | None) -> list[Box]:
        return [b for b in self.boxes if b.parent == parent]

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "boxes": [_box_dict(b) for b in self.boxes],
            "links": [
                {
                    "src": x.src,
                    "dst": x.dst,
                    "kind": x.kind,
                    "label": x.label,
                    "priority": x.priority,
                }
                for x in self.links
            ],
            "marks": [
                {
                    "priority": m.priority,
                    "title": m.title,
                    "subjects": m.subjects,
                    "evidence": m.evidence,
                }
                for m in self.marks
            ],
            "notes": self.notes,
        }


def _box_dict(box: Box) -> dict[str, Any]:
    return {
        "id": box.id,
        "kind": box.kind,
        "label": box.label,
        "parent": box.parent,
        "detail": [list(pair) for pair in box.detail],
        "priority": box.priority,
        "marks": box.marks,
        "folded": box.folded,
        "inner_priority": box.inner_priority,
    }


def build_picture(graph: Graph, findings: Iterable[FindingLike] = (), title: str = "") -> Picture:
    """The picture of ``graph`` with ``findings`` (a skill report's) marked on it."""
    findings = list(findings)
    builder = _Builder(graph, findings)
    hosts = builder.host_prefixes()
    for prefix in hosts:
        builder.add_host(prefix, folded=len(hosts) >= FOLD_HOSTS_FROM)
    builder.add_flows()
    builder.add_marks(findings)
    builder.roll_up_priorities()
    return Picture(
        title=title or _title(graph, hosts),
        boxes=builder.boxes,
        links=builder.links,
        marks=builder.marks,
        notes=builder.notes,
    )


def _title(graph: Graph, hosts: list[str]) -> str:
    names = graph.meta.hosts or [h.get("hostname") or h.id for h in graph.of_kind("host")]
    if len(hosts) > 1:
        return f"{len(hosts)} hosts"
    return str(names[0]) if names else (graph.meta.origin or "snapshot")


class _Builder:
    def __init__(self, graph: Graph, findings: list[FindingLike]) -> None:
        self.graph = graph
        self.boxes: list[Box] = []
        self.by_id: dict[str, Box] = {}
        self.links: list[Link] = []
        self.marks: list[Mark] = []
        self.notes: list[str] = []
        self.named = _named_processes(graph, findings)

    # ------------------------------------------------------------------ boxes

    def add(self, box: Box) -> Box:
        self.boxes.append(box)
        self.by_id[box.id] = box
        return box

    def host_prefixes(self) -> list[str]:
        prefixes = {ids.split_host(n.id)[0] for n in self.graph.of_kind("host")}
        prefixes.update(prefix for kind in self.on_host.values() for prefix in kind)
        return sorted(prefixes, key=_natural) or [""]

    @cached_property
    def on_host(self) -> dict[str, dict[str, list[Node]]]:
        """kind → host prefix → nodes, read once (a 128-host graph has 20,000 processes)."""
        grouped: dict[str, dict[str, list[Node]]] = {}
        for kind in ("numa_node", "process", *LOCAL_DEVICES):
            grouped[kind] = defaultdict(list)
            for node in self.graph.of_kind(kind):
                grouped[kind][ids.split_host(node.id)[0]].append(node)
        return grouped

    def add_host(self, prefix: str, folded: bool) -> None:
        host_id = ids.with_host(prefix, "host")
        node = self.graph.nodes.get(host_id)
        name = (node.get("hostname") if node else None) or prefix or _title(self.graph, [prefix])
        host = self.add(Box(host_id, "host", str(name), None, _host_detail(node), folded=folded))
        numa_boxes = self.add_numa_nodes(prefix, host.id)
        self.add_devices(prefix, host.id, numa_boxes)
        shown, folded_count, idle = self.add_processes(prefix, host.id, numa_boxes)
        host.label = f"{name}\n{_count(len(numa_boxes), 'NUMA node')} · {_count(shown, 'process', 'processes')} shown"
        if folded_count:
            self.add(
                Box(
                    ids.with_host(prefix, "folded:processes"),
                    "folded",
                    f"+{_count(folded_count, 'other process', 'other processes')}\n{idle} idle",
                    host.id,
                    [("why folded", "no device, no flow, no finding, not among the busiest")],
                )
            )

    def add_numa_nodes(self, prefix: str, host_id: str) -> dict[int, str]:
        numa_boxes: dict[int, str] = {}
        nodes = self.on_host["numa_node"].get(prefix, [])
        for node in sorted(nodes, key=lambda n: (n.get("numa_id") or 0, n.id)):
            number = int(node.get("numa_id") or 0)
            parent = self._socket_box(prefix, host_id, node)
            self.add(Box(node.id, "numa", _numa_label(node), parent, _numa_detail(node)))
            numa_boxes[number] = node.id
        return numa_boxes

    def _socket_box(self, prefix: str, host_id: str, numa: Node) -> str:
        """The socket's box when the graph knows the socket (``package_id``), else the host."""
        package = numa.get("package_id", numa.get("socket"))
        if package is None:
            return host_id
        socket_id = ids.with_host(prefix, f"socket:{package}")
        if socket_id not in self.by_id:
            self.add(Box(socket_id, "socket", f"Socket {package}", host_id))
        return socket_id

    def add_devices(self, prefix: str, host_id: str, numa_boxes: dict[int, str]) -> None:
        per_parent: dict[str, int] = defaultdict(int)
        hidden: dict[str, int] = defaultdict(int)
        for kind in LOCAL_DEVICES:
            devices = self.on_host[kind].get(prefix, [])
            for device in sorted(devices, key=lambda d: (d.get("index") or 0, _natural(d.id))):
                number = device_numa_node(self.graph, device)[0]
                parent = numa_boxes.get(number, host_id) if number is not None else host_id
                used = bool(self.graph.in_edges(device.id, "uses_device"))
                crowded = per_parent[parent] >= MAX_DEVICES_PER_NODE
                if kind not in ACCELERATORS and crowded and not used:
                    hidden[parent] += 1
                    continue
                per_parent[parent] += 1
                self.add(Box(device.id, "device", _device_label(device), parent, _detail(device)))
        for parent, count in hidden.items():
            self.add(Box(f"{parent}/folded:devices", "folded", f"+{count} more devices", parent))

    def add_processes(
        self, prefix: str, host_id: str, numa_boxes: dict[int, str]
    ) -> tuple[int, int, int]:
        processes = self.on_host["process"].get(prefix, [])
        chosen = self._of_interest(processes)
        for process in chosen:
            home = _home_node(self.graph, process, self.on_host["numa_node"].get(prefix, []))
            parent = numa_boxes.get(home, host_id) if home is not None else host_id
            self.add(
                Box(
                    process.id,
                    "process",
                    _process_label(process),
                    parent,
                    _process_detail(self.graph, process),
                )
            )
            self._device_links(process, numa_boxes)
        chosen_ids = {p.id for p in chosen}
        rest = [p for p in processes if p.id not in chosen_ids]
        idle = sum(1 for p in rest if not p.get("cpu_pct"))
        return len(chosen), len(rest), idle

    def _of_interest(self, processes: list[Node]) -> list[Node]:
        """Named by a finding, then device users and their parents, then flow ends, then the
        busiest; at most MAX_PROCESSES per host."""
        graph = self.graph
        rank: dict[str, int] = {}

        def keep(process_id: str, level: int) -> None:
            if process_id in graph.nodes and graph.nodes[process_id].kind == "process":
                rank[process_id] = min(level, rank.get(process_id, level))

        for process in processes:
            if process.id in self.named:
                keep(process.id, 0)
            if graph.out_edges(process.id, "uses_device"):
                keep(process.id, 1)
                for edge in graph.in_edges(process.id, "parent_of"):
                    keep(edge.src, 2)
            if graph.out_edges(process.id, "talks_to") or graph.in_edges(process.id, "talks_to"):
                keep(process.id, 3)
        busiest = sorted(processes, key=lambda p: -(p.get("cpu_pct") or 0))[:MAX_BUSIEST]
        for process in busiest:
            if (process.get("cpu_pct") or 0) > 0:
                keep(process.id, 4)
        ordered = sorted(rank, key=lambda pid: (rank[pid], _natural(pid)))[:MAX_PROCESSES]
        kept = set(ordered)
        return [p for p in sorted(processes, key=lambda p: _natural(p.id)) if p.id in kept]

    # ------------------------------------------------------------------ links

    def _device_links(self, process: Node, numa_boxes: dict[int, str]) -> None:
        cpu, pages = cpu_share(self.graph, process), page_share(self.graph, process)
        for edge in self.graph.out_edges(process.id, "uses_device"):
            device = self.graph.nodes.get(edge.dst)
            if device is None or edge.dst not in self.by_id:
                continue
            number = device_numa_node(self.graph, device)[0]
            facts = []
            if number is not None and cpu:
                facts.append(f"CPU {cpu.get(number, 0.0):.0%}")
            if number is not None and pages:
                facts.append(f"mem {pages.get(number, 0.0):.0%}")
            where = f" on N{number}" if facts else ""
            self.links.append(Link(process.id, device.id, "uses", " · ".join(facts) + where))

    def add_flows(self) -> None:
        flows = [
            edge
            for process in self.graph.of_kind("process")
            for edge in self.graph.out_edges(process.id, "talks_to")
            if edge.src in self.by_id and edge.dst in self.by_id
        ]
        flows.sort(key=lambda e: -(e.get("bytes") or 0))
        for edge in flows[:MAX_FLOWS]:
            parts = [edge.get("transport")]
            if edge.get("bytes") is not None:
                parts.append(fmt_bytes(edge.get("bytes")))
            if edge.get("bytes_per_s") is not None:
                parts.append(fmt_byte_rate(edge.get("bytes_per_s")))
            label = " ".join(str(p) for p in parts if p)
            self.links.append(Link(edge.src, edge.dst, "flow", label))
        if len(flows) > MAX_FLOWS:
            self.notes.append(f"{len(flows) - MAX_FLOWS} smaller flows not drawn")

    def roll_up_priorities(self) -> None:
        """Each container learns the most urgent finding inside it, so a folded host still
        shows that it holds a P0."""
        for box in self.boxes:
            if box.priority is None:
                continue
            parent = self.by_id.get(box.parent) if box.parent else None
            while parent is not None:
                if _priority_rank(box.priority) < _priority_rank(parent.inner_priority):
                    parent.inner_priority = box.priority
                parent = self.by_id.get(parent.parent) if parent.parent else None

    @cached_property
    def links_from(self) -> dict[str, list[Link]]:
        """Lines by their start (built once the lines are drawn, when findings are marked)."""
        out: dict[str, list[Link]] = defaultdict(list)
        for link in self.links:
            out[link.src].append(link)
        return out

    def add_marks(self, findings: list[FindingLike]) -> None:
        ordered = sorted(findings, key=lambda f: _priority_rank(f.priority))
        for finding in ordered:
            subjects = [s for s in _subjects(self.graph, finding) if s in self.by_id]
            if not subjects:
                continue
            index = len(self.marks)
            evidence = [_evidence_line(e) for e in finding.evidence[:MAX_EVIDENCE]]
            self.marks.append(Mark(finding.priority, finding.title, subjects, evidence))
            for subject in subjects:
                box = self.by_id[subject]
                box.marks.append(index)
                if box.priority is None or _priority_rank(finding.priority) < _priority_rank(
                    box.priority
                ):
                    box.priority = finding.priority
            named = set(subjects)
            for subject in subjects:
                for link in self.links_from[subject]:
                    if link.dst in named and link.priority is None:
                        link.priority = finding.priority


# ---------------------------------------------------------------------- findings


def _subjects(graph: Graph, finding: FindingLike) -> list[str]:
    """The graph ids a finding names, threads read as their processes, in order, once each."""
    found: list[str] = []
    candidates = [finding.subject] if finding.subject else []
    for evidence in finding.evidence:
        candidates += list(getattr(evidence, "ids", None) or evidence.get("ids", []))
    for node_id in candidates:
        node = graph.nodes.get(node_id)
        if node is not None and node.kind == "thread":
            owners = graph.in_edges(node_id, "has_thread")
            node_id = owners[0].src if owners else node_id
        if node_id not in found:
            found.append(node_id)
    return found


def _evidence_line(evidence: Any) -> str:
    """One link of a finding's evidence chain as a short line: ids, then raw values."""
    ids_part = " ".join(str(i) for i in (getattr(evidence, "ids", None) or [])[:4])
    values = getattr(evidence, "values", None) or {}
    shown = ", ".join(f"{k}={_short(v)}" for k, v in list(values.items())[:6])
    return f"{ids_part}: {shown}"[:EVIDENCE_CHARS]


def _short(value: Any) -> str:
    """A raw value in a few characters: floats to 3 digits, maps by their biggest entries."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        numeric = {k: v for k, v in value.items() if isinstance(v, int | float)}
        biggest = sorted(numeric.items(), key=lambda kv: -kv[1])[:3]
        return "{" + " ".join(f"{k}:{_short(v)}" for k, v in biggest) + "}"
    return str(value)[:60]


def _named_processes(graph: Graph, findings: list[FindingLike]) -> set[str]:
    return {s for f in findings for s in _subjects(graph, f)}


def _priority_rank(priority: str | None) -> int:
    return PRIORITY_ORDER.index(priority) if priority in PRIORITY_ORDER else len(PRIORITY_ORDER)


# ---------------------------------------------------------------------- labels


def _home_node(graph: Graph, process: Node, numa_nodes: list[Node]) -> int | None:
    """Where a process's CPU time runs: the node with the biggest share, else the one node
    (of its host's ``numa_nodes``) its allowed CPUs lie on."""
    shares = cpu_share(graph, process)
    if shares:
        return max(shares.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    allowed = cpu_set(process.get("cpus_allowed"))
    homes = {int(n.get("numa_id")) for n in numa_nodes if allowed & cpu_set(n.get("cpulist"))}
    return homes.pop() if len(homes) == 1 else None


def _numa_label(node: Node) -> str:
    lines = [f"NUMA {node.get('numa_id')}"]
    if node.get("cpulist"):
        lines.append(f"CPUs {node.get('cpulist')}")
    total, free = node.get("mem_total_bytes"), node.get("mem_free_bytes")
    if total:
        lines.append(fmt_bytes(total) + (f", {fmt_bytes(free)} free" if free is not None else ""))
    return "\n".join(lines)


def _numa_detail(node: Node) -> list[tuple[str, str]]:
    detail = []
    for key in ("cpulist", "mem_total_bytes", "mem_free_bytes"):
        if node.get(key) is not None:
            value = node.get(key)
            detail.append((key, fmt_bytes(value) if key.endswith("bytes") else str(value)))
    if node.get("distances"):
        detail.append(("distances", _distance_row(node.get("distances"))))
    return detail


def _distance_row(distances: dict[str, Any]) -> str:
    """The node's row of the SLIT distance matrix, as `numactl -H` prints it: plain
    relative costs (10 = local), in node id order: ``{0:10,1:12,2:32}``."""
    ordered = sorted(
        distances, key=lambda k: (not str(k).isdigit(), int(k) if str(k).isdigit() else 0, str(k))
    )
    shown = ",".join(f"{word(str(k), 12)}:{word(str(distances[k]), 12)}" for k in ordered[:64])
    return "{" + shown + (f",+{len(ordered) - 64}" if len(ordered) > 64 else "") + "}"


def _device_label(device: Node) -> str:
    if device.kind in ACCELERATORS:
        name = f"{device.kind.upper()} {device.get('index')}"
        extra = device.get("model")
    else:
        name = str(device.get("ifname") or device.get("name") or ids.split_host(device.id)[1])
        extra = {"nic": "NIC", "rdma_device": "RDMA", "disk": "disk"}.get(device.kind)
    return f"{name}\n{extra}" if extra else name


def _process_label(process: Node) -> str:
    facts = [f"pid {process.get('pid')}"]
    if process.get("cpu_pct") is not None:
        facts.append(f"{process.get('cpu_pct'):.0f}% CPU")
    return f"{process.get('name') or 'process'}\n{' · '.join(facts)}"


def _process_detail(graph: Graph, process: Node) -> list[tuple[str, str]]:
    detail = [(k, v) for k, v in _detail(process) if k != "cmdline"]
    cmdline = process.get("cmdline")
    if cmdline:
        detail.insert(0, ("cmdline", str(cmdline)[:CMDLINE_LIMIT]))
    cpu, pages = cpu_share(graph, process), page_share(graph, process)
    if cpu:
        detail.append(("CPU time by NUMA node", _shares_text(cpu)))
    if pages:
        detail.append(("pages by NUMA node", _shares_text(pages)))
    return detail


def _shares_text(shares: dict[int, float]) -> str:
    ordered = sorted(shares.items(), key=lambda kv: -kv[1])
    return ", ".join(f"N{node} {share:.0%}" for node, share in ordered if share >= 0.005)


_DETAIL_KEYS = (
    "pid", "ppid", "cmdline", "user", "container_id", "cpus_allowed", "cpu_pct", "num_threads",
    "rss_bytes", "index", "model", "pci_bus_id", "numa_node", "cpu_affinity", "util_pct",
    "mem_used_bytes", "mem_total_bytes", "ifname", "speed_mbps", "rx_bytes_per_s",
    "tx_bytes_per_s", "hostname", "cpus", "mem_available_bytes", "cpu_busy_pct",
)  # fmt: skip


def _detail(node: Node) -> list[tuple[str, str]]:
    """The attributes worth a hover, formatted, in a fixed order."""
    detail = [("id", node.id)]
    for key in _DETAIL_KEYS:
        value = node.get(key)
        if value is None:
            continue
        if key.endswith("bytes"):
            text = fmt_bytes(value)
        elif key.endswith("bytes_per_s"):
            text = fmt_byte_rate(value)
        elif isinstance(value, float):
            text = f"{value:.1f}"
        else:
            text = str(value)
        detail.append((key, text))
    return detail


def _host_detail(node: Node | None) -> list[tuple[str, str]]:
    return _detail(node) if node is not None else []


def _count(number: int, singular: str, plural: str | None = None) -> str:
    return f"{number} {singular if number == 1 else plural or singular + 's'}"


def _natural(text: str) -> tuple[int | str, ...]:
    """Sort key putting h2 before h10 and proc:9 before proc:10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))
