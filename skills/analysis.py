"""Readings of the graph every skill shares: NUMA placement, fix plans, process roles.

The look-ups they stand on — where a node is, a process's parent, children, threads, devices
and peers, a socket's owners, which processes are the profiler's own — are ``graph.query``'s,
answered once per graph by ``converters.facts.Facts``, the same object the views read, so a
view and the rule it explains agree. What is built here is the skills' own: placements
graded against devices, the binding plan, rank groups, data loaders, front ends, and the
confidence of a finding. The roles leave the profiler's processes out, and the engine drops
findings about them: every rule inherits that. Nothing here judges; rules do.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from functools import cached_property

from wp_mcp.converters.facts import Facts
from wp_mcp.converters.index import index_for
from wp_mcp.graph import Edge, Graph, Node, query
from wp_mcp.graph.cpulist import format_cpulist
from wp_mcp.graph.query import cpu_set, device_numa_node, host_prefix

from .report import safe
from .roles import Group, Roles
from .waitfor import WaitGraph

# NUMA locality grades (issue 6): share of the work that is local to one node.
GRADES = ((0.8, "good"), (0.5, "mild"), (0.3, "moderate"), (0.0, "severe"))


def grade(share: float) -> str:
    """``0.85`` → ``good``, ``0.6`` → ``mild``, ``0.4`` → ``moderate``, ``0.1`` → ``severe``."""
    for floor, name in GRADES:
        if share >= floor:
            return name
    return "severe"


@dataclass
class Placement:
    """Where a process runs relative to the accelerator it uses."""

    process: str
    device: str
    device_node: int
    device_node_how: str  # numa_node | local_to | cpu_affinity
    device_node_certain: bool
    cpu_share: dict[int, float]
    page_share: dict[int, float]
    cpu_on_device_node: float
    pages_on_device_node: float | None
    dominant_cpu_node: int
    grade: str

    @property
    def mismatched(self) -> bool:
        return self.dominant_cpu_node != self.device_node


@dataclass(frozen=True)
class Binding:
    """One rank's part of a fix plan: its own CPUs on its device's node, memory there."""

    process: str
    pid: int | None
    device: str
    node: int
    cpus: str  # a cpulist, disjoint from every other rank's of the plan
    serves: str | None = None  # a data loader's rank: it shares that rank's slice

    @property
    def live(self) -> str | None:
        """For the running job: every thread moved (-a), then its pages."""
        if self.pid is None:
            return None
        return f"taskset -a -c -p {self.cpus} {self.pid} && migratepages {self.pid} all {self.node}"

    @property
    def launch(self) -> str:
        """For the next launch (it lasts): the rank's command wrapped in numactl."""
        return f"numactl --physcpubind={self.cpus} --membind={self.node} <command>"


class Analysis:
    """Cached readings of one graph (rules call them many times)."""

    def __init__(self, graph: Graph, facts: Facts | None = None) -> None:
        self.graph = graph
        # the views' own Facts of this graph (built once, cached on the graph by its index)
        self.facts = facts or index_for(graph).facts

    # ------------------------------------------------------------------ hosts

    @cached_property
    def hosts(self) -> dict[str, Node]:
        """Host prefix → its host node (rules ask per rank)."""
        return query.hosts_by_prefix(self.graph)

    def host_cpus(self, prefix: str) -> int | None:
        """How many CPUs a host has: its ``cpus`` attribute, else its NUMA nodes' cpulists
        (``Facts.cpu_hosts``, which the views read too)."""
        return self.facts.cpu_hosts.get(prefix)

    # ------------------------------------------------------------------ NUMA

    @cached_property
    def numa_nodes(self) -> dict[str, dict[int, Node]]:
        """host prefix → NUMA id → node."""
        return query.numa_nodes(self.graph)

    def numa_cpulist(self, prefix: str, node: int) -> str | None:
        found = self.numa_nodes.get(prefix, {}).get(node)
        return found.get("cpulist") if found else None

    def cpu_share(self, proc: Node) -> dict[int, float]:
        """Share of a process's CPU time per NUMA node."""
        return query.cpu_share(self.graph, proc)

    def page_share(self, proc: Node) -> dict[int, float]:
        return query.page_share(self.graph, proc)

    def locality(self, proc: Node) -> float | None:
        """P(CPU time and pages on the same node); the collector's value when it has one."""
        value = proc.get("numa_locality")
        if value is not None:
            return float(value)
        cpu, pages = self.cpu_share(proc), self.page_share(proc)
        if not cpu or not pages:
            return None
        return sum(share * pages.get(node, 0.0) for node, share in cpu.items())

    # ------------------------------------------------------------------ devices

    def device_numa(self, device: Node) -> tuple[int | None, str, bool]:
        """(node, how it was found, certain?) — firmware's ``-1`` is not an answer."""
        return device_numa_node(self.graph, device)

    def devices_of(self, proc_id: str) -> list[Node]:
        """The accelerators a process uses."""
        return self.facts.accelerators_of(proc_id)

    @cached_property
    def placements(self) -> list[Placement]:
        """One entry per (process, accelerator) whose placement can be judged."""
        out = []
        for proc in self.graph.of_kind("process"):
            for device in self.devices_of(proc.id):
                placement = self._placement(proc, device)
                if placement is not None:
                    out.append(placement)
        return out

    def _placement(self, proc: Node, device: Node) -> Placement | None:
        node, how, certain = self.device_numa(device)
        cpu = self.cpu_share(proc)
        if node is None or not cpu:
            return None
        pages = self.page_share(proc)
        on_node = cpu.get(node, 0.0)
        return Placement(
            process=proc.id,
            device=device.id,
            device_node=node,
            device_node_how=how,
            device_node_certain=certain,
            cpu_share=cpu,
            page_share=pages,
            cpu_on_device_node=on_node,
            pages_on_device_node=pages.get(node, 0.0) if pages else None,
            dominant_cpu_node=max(cpu, key=lambda n: cpu[n]),
            grade=grade(on_node),
        )

    def distance(self, prefix: str, first: int, second: int) -> int | None:
        """The firmware's NUMA distance (SLIT: 10 local) between two nodes of one host."""
        return query.numa_distance(self.numa_nodes.get(prefix, {}).get(first), second)

    # ------------------------------------------------------------------ threads, affinity

    @cached_property
    def waits(self) -> WaitGraph:
        """The wait-for chains of the job's threads (skills/waitfor.py)."""
        return WaitGraph(self.graph, self.facts.thread_owner)

    def threads_of(self, proc: Node) -> list[Node]:
        """A process's threads: ``has_thread`` edges, else threads naming its pid."""
        return self.facts.threads_of.get(proc.id, [])

    def foreign_threads(self, proc: Node) -> dict[str, set[int]]:
        """Threads whose affinity differs from their process's: thread id → its CPUs."""
        return query.foreign_thread_cpus(proc, self.threads_of(proc))

    def affinity(self, proc: Node) -> set[int]:
        """Every CPU the process or any of its threads may run on (threads can be pinned one
        by one, away from what the process's main thread shows)."""
        cpus = cpu_set(proc.get("cpus_allowed"))
        for allowed in self.foreign_threads(proc).values():
            cpus |= allowed
        return cpus

    # ------------------------------------------------------------------ the binding plan

    @cached_property
    def bindings(self) -> dict[str, Binding]:
        """One plan for the ranks that share a device node: disjoint CPU slices of the node
        and memory on it, for every rank of a node where one is misplaced or two overlap.

        Binding each misplaced rank to the whole node would put two ranks of one node on the
        same CPUs; slicing the node gives every rank its own.
        """
        by_node: dict[tuple[str, int], list[Placement]] = defaultdict(list)
        placed = Counter(p.process for p in self.placements)
        single = [p for p in self.placements if placed[p.process] == 1]  # one device each
        for place in single:
            by_node[(host_prefix(place.process), place.device_node)].append(place)
        out: dict[str, Binding] = {}
        for (prefix, node), places in sorted(by_node.items()):
            if not self._needs_plan(places):
                continue
            cpus = sorted(cpu_set(self.numa_cpulist(prefix, node)))
            places = sorted(places, key=lambda p: _natural(p.device))
            if len(cpus) < len(places):
                continue  # fewer CPUs than ranks: no disjoint plan exists on this node
            size = len(cpus) // len(places)
            for index, place in enumerate(places):
                end = len(cpus) if index == len(places) - 1 else (index + 1) * size
                rank = self._binding(place.process, place.device, node, cpus[index * size : end])
                out[place.process] = rank
                # its loaders move with it, as they would inherit a binding made at launch
                for loader in self.dataloaders.get(place.process, []):
                    out.setdefault(loader, replace(self._binding(loader, place.device, node, []),
                                                   cpus=rank.cpus, serves=rank.process))  # fmt: skip
        return out

    def _binding(self, proc_id: str, device: str, node: int, cpus: list[int]) -> Binding:
        proc = self.graph.node(proc_id)
        pid = proc.get("pid") if proc else None
        return Binding(proc_id, pid, device, node, format_cpulist(cpus))

    def plan_command(self, rank: str) -> str | None:
        """The running-job commands for a rank and the loaders that move with it."""
        lines = [b.live for b in self.plan_of.get(rank, [])]
        return " && ".join(line for line in lines if line) or None

    @cached_property
    def plan_of(self) -> dict[str, list[Binding]]:
        """A rank → its binding, then its loaders' (which move with it), in the plan's order."""
        out: dict[str, list[Binding]] = defaultdict(list)
        for binding in self.bindings.values():
            out[binding.serves or binding.process].append(binding)
        return out

    @cached_property
    def plan_by_node(self) -> dict[tuple[str, int], list[Binding]]:
        """(host prefix, NUMA node) → the ranks the plan binds there (not their loaders)."""
        out: dict[tuple[str, int], list[Binding]] = defaultdict(list)
        for binding in self.bindings.values():
            if binding.serves is None:
                out[(host_prefix(binding.process), binding.node)].append(binding)
        return out

    def _needs_plan(self, places: list[Placement]) -> bool:
        if any(p.grade != "good" for p in places):
            return True
        sets = [self.affinity(self.graph.nodes[p.process]) for p in places]
        return any(a & b for i, a in enumerate(sets) for b in sets[i + 1 :])

    def bind_commands(self, proc: Node, node: int) -> tuple[str, str | None]:
        """(``numactl`` for the next launch, ``taskset``+``migratepages`` for the running one)."""
        launch = f"numactl --cpunodebind={node} --membind={node} <command>"
        cpulist = self.numa_cpulist(host_prefix(proc.id), node)
        pid = proc.get("pid")
        if not cpulist or pid is None:
            return launch, None
        cpulist = format_cpulist(cpu_set(cpulist))
        return launch, f"taskset -a -c -p {cpulist} {pid} && migratepages {pid} all {node}"

    # ------------------------------------------------------------------ roles

    def parent(self, proc_id: str) -> str | None:
        return self.facts.parent_of(proc_id)

    def children(self, proc_id: str) -> list[str]:
        return self.facts.children_of(proc_id)

    def ancestors(self, proc_id: str) -> set[str]:
        return self.facts.ancestors(proc_id)

    def descendants(self, proc_id: str) -> set[str]:
        return self.facts.descendants(proc_id)

    @property
    def profiler(self) -> frozenset[str]:
        """wp-mcp's own processes (Facts.profiler): never a rank, a loader or a finding."""
        return self.facts.profiler

    def is_profiler(self, node_id: str | None) -> bool:
        """A finding's subject that is the profiler's own (process, thread or socket)."""
        return self.facts.is_profiler(node_id)

    def talks(self, proc_id: str) -> list[tuple[str, Edge]]:
        """(peer id, talks_to edge) in both directions."""
        return query.talks(self.graph, proc_id)

    @cached_property
    def _roles(self) -> Roles:
        return Roles(self.facts)

    @property
    def groups(self) -> list[Group]:
        """Rank groups (``skills/roles.py`` decides every role, from evidence)."""
        return self._roles.groups

    @property
    def ranks(self) -> set[str]:
        return self._roles.ranks

    @property
    def dataloaders(self) -> dict[str, list[str]]:
        """trainer → its data-loading worker processes."""
        return self._roles.dataloaders

    @property
    def front_ends(self) -> set[str]:
        """Processes accepting clients' connections and feeding workers below them."""
        return self._roles.front_ends

    @property
    def roles(self) -> dict[str, str]:
        return self._roles.of

    def role_evidence(self, proc_id: str) -> list[str]:
        """What was seen that gave ``proc_id`` its role (empty: none)."""
        return list(self._roles.evidence.get(proc_id, []))


def _natural(text: str) -> tuple:
    """``npu:2`` before ``npu:10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def confidence(graph: Graph, base: float = 0.9, *, certain: bool = True) -> tuple[float, list[str]]:
    """A finding's confidence and why it is lower than ``base``.

    Lower in a VM (placement and PMU data are the hypervisor's view), when the firmware did
    not say which NUMA node a device is on, and when some collectors did not fully run.
    """
    value, reasons = base, []
    if any(host.get("virtualized") for host in graph.of_kind("host")):
        value *= 0.85
        reasons.append("virtual machine")
    if not certain:
        value *= 0.7
        reasons.append("device NUMA node inferred (firmware says -1 or nothing)")
    # skipped sources (no GPU here, no RDMA) leave nothing half-measured; these do
    partial = [
        c.name for c in graph.meta.collectors if c.status in ("partial", "failed", "cancelled")
    ]
    if partial:
        value *= 0.9
        # collector names come from the snapshot's file: escaped, as the reasons reach Markdown
        names = ", ".join(safe(name, 40) for name in sorted(partial)[:4])
        reasons.append(f"partial coverage ({names})")
    return round(value, 2), reasons
