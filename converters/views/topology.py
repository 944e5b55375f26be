"""The ``topology`` view: NUMA nodes, accelerators, containers, then the process tree
(each level's childless look-alikes folded)."""

from __future__ import annotations

from functools import partial
from typing import Any

from wp_mcp.graph.model import Node

from ..facts import Facts, attr
from ..items import Item, aggregate, group_item, node_item
from ..lines import ACCELERATORS, escape_short, kv, named, parts
from ..text import fmt_bytes, id_ranges, name_pattern, quote, show_id
from . import view

LEGEND = (
    "numa cpus mem | dev numa pci users | ctr runtime procs | proc tree (indent = "
    "child) dev ctr cmd; N× leaf = childless look-alike siblings"
)

CMDLINE_LIMIT = 80


@view("topology", legend=LEGEND, narrow="pid=N (a process family) name=GLOB")
def topology(facts: Facts) -> list[Item]:
    graph = facts.graph
    items: list[Item] = []
    for numa in sorted(graph.of_kind("numa_node"), key=lambda n: (attr(n, "numa_id") or 0, n.id)):
        items.append(node_item(numa, partial(_numa_line, numa)))
    for kind in ACCELERATORS:
        for device in sorted(graph.of_kind(kind), key=lambda d: (attr(d, "index") or 0, d.id)):
            items.append(
                node_item(
                    device,
                    partial(_device_line, facts, device),
                    procs=tuple(facts.users_of(device.id)),
                    edges=graph.out_edges(device.id, "local_to"),
                )
            )
    for ctr in sorted(graph.of_kind("container"), key=lambda n: n.id):
        members = [e.src for e in graph.in_edges(ctr.id, "in_container")]
        items.append(node_item(ctr, partial(_container_line, ctr, members), procs=tuple(members)))
    processes = graph.of_kind("process")
    roots = sorted(
        (p for p in processes if facts.parent_of(p.id) not in graph.nodes),
        key=lambda p: (attr(p, "pid") or 0, p.id),
    )
    for root in roots:
        items += _subtree(facts, root)
    return items


def _subtree(facts: Facts, root: Node) -> list[Item]:
    """A process and its descendants depth-first, each level's childless look-alikes folded.

    Iterative, with each process expanded once: a tree a thousand shells deep (any user can
    make one) renders like a shallow one, and a malformed graph's cycle cannot loop.
    """
    items: list[Item] = []
    expanded: set[str] = set()
    levels = [iter(_level(facts, [root], 0))]
    while levels:
        item = next(levels[-1], None)
        if item is None:
            levels.pop()
            continue
        items.append(item)
        if item.group is None and item.ids[0] not in expanded:
            expanded.add(item.ids[0])
            graph = facts.graph
            children = [graph.nodes[c] for c in facts.children_of(item.ids[0]) if c in graph.nodes]
            children.sort(key=lambda p: (attr(p, "pid") or 0, p.id))
            levels.append(iter(_level(facts, children, len(levels))))
    return items


def _level(facts: Facts, siblings: list[Node], depth: int) -> list[Item]:
    """One level of the tree: an item per process, childless look-alikes without devices
    folded into one."""
    graph = facts.graph

    def key(process: Node) -> tuple[Any, ...] | None:
        if facts.children_of(process.id) or facts.devices_of(process.id):
            return None
        return (name_pattern(attr(process, "name") or ""), facts.container_of(process.id))

    def one(process: Node) -> Item:
        return node_item(
            process,
            partial(_process_line, facts, process),
            procs=(process.id,),
            edges=graph.in_edges(process.id, "parent_of")
            + graph.out_edges(process.id, "uses_device"),
            indent=min(depth, 8),
        )

    def many(group: list[Node]) -> Item:
        return group_item(group, "leaf", procs=tuple(p.id for p in group), indent=min(depth, 8))

    return aggregate(siblings, key, one, many)


def _numa_line(numa: Node) -> str:
    return parts(
        show_id(numa.id),
        kv("cpus", attr(numa, "cpulist"), escape_short),
        kv("mem", attr(numa, "mem_total_bytes"), fmt_bytes),
    )


def _device_line(facts: Facts, device: Node) -> str:
    numa = facts.device_numa(device.id)
    users = facts.users_of(device.id)
    return parts(
        named(device),
        f"numa={numa}" if numa is not None else "numa=?",
        kv("pci", attr(device, "pci_bus_id"), escape_short),
        f"users={id_ranges(users, 3)}" if users else None,
    )


def _container_line(ctr: Node, members: list[str]) -> str:
    return parts(
        named(ctr),
        kv("runtime", attr(ctr, "runtime"), escape_short),
        f"procs={id_ranges(members, 3)}" if members else None,
    )


def _process_line(facts: Facts, process: Node) -> str:
    devices = facts.devices_of(process.id)
    container = facts.container_of(process.id)
    cmdline = attr(process, "cmdline")
    name = attr(process, "name")
    # The cmdline is left out when it only repeats the name.
    show_cmd = cmdline and cmdline.strip() != name
    return parts(
        named(process),
        f"dev={','.join(show_id(d) for d in devices)}" if devices else None,
        f"ctr={show_id(container)}" if container else None,
        f"cmd={quote(cmdline, CMDLINE_LIMIT)}" if show_cmd else None,
    )
