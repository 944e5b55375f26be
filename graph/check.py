"""The checks a graph read from a file passes before anything may store or render it.

Types and ranges are validated per element (graph/model.py); these are the rules that need
the whole graph: CPU lists bounded by the graph's own CPU count, and a process tree without
cycles. Both readers (native and witty) run ``check_graph`` as their last step, so no import
path — CLI, MCP or the store's own reads — can hand a later stage a graph that would exhaust
memory expanding a CPU list or loop walking a tree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from .cpulist import MAX_CPUS, CpuListError, CpuListTooLarge, parse_cpulist
from .errors import FormatError
from .graph import Graph
from .model import Node
from .safetext import excerpt

# Attributes holding kernel cpulist syntax, on any kind (witty processes carry their own
# cpu_affinity as an extra attribute).
CPULIST_ATTRIBUTES = ("cpulist", "cpus_allowed", "cpus_used", "cpu_affinity")
# An unrestricted task's Cpus_allowed_list is the kernel's *possible* mask, which can exceed
# the online CPUs the graph counts: a VM's hotplug slots (KVM allows up to 1,024 vCPUs),
# firmware's empty sockets. CPU numbers up to twice the count, and never below this floor,
# are real; beyond that a list is refused.
POSSIBLE_CPUS_FLOOR = 1024


def check_graph(graph: Graph, origin: str) -> None:
    """Raise ``FormatError`` (one line naming the element) for a graph no stage may get."""
    _check_cpulists(graph, origin)
    _check_process_tree(graph, origin)


def cpu_bound(graph: Graph, origin: str) -> int:
    """The CPU numbers this graph's lists may name: from its hosts' CPU counts and NUMA
    cpulists where it has them, else the absolute ``MAX_CPUS``."""
    known = max((_count(host.get("cpus")) for host in graph.of_kind("host")), default=0)
    for numa in graph.of_kind("numa_node"):
        cpus = _parsed(numa, "cpulist", MAX_CPUS, origin)
        if cpus:
            known = max(known, cpus[-1] + 1)
    if not known:
        return MAX_CPUS
    return min(MAX_CPUS, max(2 * known, POSSIBLE_CPUS_FLOOR))


def _count(value: object) -> int:
    return value if type(value) is int and 0 < value <= MAX_CPUS else 0


def _check_cpulists(graph: Graph, origin: str) -> None:
    bound = cpu_bound(graph, origin)
    for name in CPULIST_ATTRIBUTES:
        for text in _distinct_strings(graph, name):
            try:
                parse_cpulist(text, bound)
            except CpuListTooLarge as exc:
                node = next(n for n in graph.nodes.values() if n.__dict__.get(name) == text)
                raise FormatError(f"{origin}: {_named(node)}: {name}: {exc}") from None
            except CpuListError:
                continue  # unreadable syntax names no CPU (as ``query.cpu_set`` reads it)


def _distinct_strings(graph: Graph, name: str) -> set[str]:
    """Each distinct string value of ``name`` once: the same list repeats on every thread of
    a process, so a large graph has hundreds of thousands of values and a few dozen distinct
    ones."""
    distinct = set()
    for node in graph.nodes.values():
        value = node.__dict__.get(name)
        if type(value) is str:
            distinct.add(value)
    return distinct


def _parsed(node: Node, name: str, bound: int, origin: str) -> list[int]:
    """The CPUs of one attribute; unreadable syntax names none, a CPU over the bound refuses
    the graph."""
    text = node.get(name)
    if type(text) is not str:
        return []
    try:
        return parse_cpulist(text, bound)
    except CpuListTooLarge as exc:
        raise FormatError(f"{origin}: {_named(node)}: {name}: {exc}") from None
    except CpuListError:
        return []


def _named(node: Node) -> str:
    return f"{node.kind} {excerpt(node.id)}"


def _check_process_tree(graph: Graph, origin: str) -> None:
    # /proc cannot describe a cycle (a parent exists before its child); a file can, and
    # every walk up a tree would then have to guard against it forever
    cycle = find_cycle(graph, "parent_of")
    if cycle:
        shown = " -> ".join(excerpt(node_id, 40) for node_id in cycle[:4])
        more = " -> ..." if len(cycle) > 4 else f" -> {excerpt(cycle[0], 40)}"
        raise FormatError(
            f"{origin}: parent_of edges form a cycle ({shown}{more}): a process cannot be "
            "its own ancestor"
        )


def find_cycle(graph: Graph, kind: str) -> list[str]:
    """One cycle of ``kind`` edges, in order, or ``[]``; iterative, so any depth is fine."""
    children: dict[str, list[str]] = defaultdict(list)
    for edge in graph.edges(kind):
        children[edge.src].append(edge.dst)
    done: set[str] = set()
    for root in children:
        if root not in done:
            cycle = _cycle_from(root, children, done)
            if cycle:
                return cycle
    return []


def _cycle_from(root: str, children: dict[str, list[str]], done: set[str]) -> list[str]:
    """Depth-first from ``root``, keeping the current path; a child on it closes a cycle."""
    path: list[str] = [root]
    on_path: set[str] = {root}
    pending: list[Iterator[str]] = [iter(children.get(root, ()))]
    while pending:
        child = next(pending[-1], None)
        if child is None:
            done.add(path[-1])
            on_path.discard(path.pop())
            pending.pop()
        elif child in on_path:
            return path[path.index(child) :]
        elif child not in done:
            path.append(child)
            on_path.add(child)
            pending.append(iter(children.get(child, ())))
    return []
