"""Layer 3, interconnect: NUMA distances, where each device sits and how it is linked,
device-to-device paths per class, and each process's placement against its devices."""

from __future__ import annotations

from functools import partial
from typing import Any

from wp_mcp.graph.model import Edge, Node

from ..facts import Facts, attr
from ..items import Item, aggregate, group_item, node_item
from ..lines import (
    allowed,
    bus_line,
    cpus,
    device_items,
    escape_short,
    is_unmeasured,
    kv,
    link,
    named,
    parts,
    users,
)
from ..text import fmt_bytes, fmt_num, fmt_per_node, show_id, word
from . import view

LEGEND = (
    "numa cpus mem dist=SLIT row | dev numa cpus pci link users | nic/rdma | "
    "N× path CLASS pairs | proc dev=id@numa REMOTE(cpu/mem≠dev) cpu{numa:share} "
    "mem{numa:share} loc=P(cpu and pages on one node, 0..1) allowed thr_allowed=threads "
    "pinned elsewhere"
)
DEVICE_ATTRS = ("numa_node", "cpu_affinity", "pci_bus_id", "link_speed_gts")


@view("interconnect", legend=LEGEND, narrow="kind=process pid=N", top=("process", "path"))
def interconnect(facts: Facts) -> list[Item]:
    graph = facts.graph
    numas = sorted(graph.of_kind("numa_node"), key=lambda n: (attr(n, "numa_id") or 0, n.id))
    items = [node_item(n, partial(_numa_line, n)) for n in numas]
    items += device_items(facts, _device_line, DEVICE_ATTRS)
    for kind in ("nic", "rdma_device", "pci_bridge"):
        for node in sorted(graph.of_kind(kind), key=lambda n: n.id):
            items.append(
                node_item(
                    node,
                    partial(bus_line, facts, node),
                    edges=graph.out_edges(node.id, "local_to")
                    + graph.out_edges(node.id, "attached"),
                )
            )
    items += path_items(facts)

    def key(process: Node) -> tuple[Any, ...] | None:
        if is_unmeasured(process, PLACEMENT_ATTRS):
            return ("unmeasured",)
        return None

    def one(process: Node) -> Item:
        locality = attr(process, "numa_locality")
        return node_item(
            process,
            partial(_placement_line, facts, process),
            procs=(process.id,),
            metrics={"locality": locality} if locality is not None else {},
            edges=graph.out_edges(process.id, "cpu_on") + graph.out_edges(process.id, "mem_on"),
        )

    def many(group: list[Node]) -> Item:
        return group_item(group, "no NUMA data", procs=tuple(p.id for p in group))

    processes = sorted(graph.of_kind("process"), key=partial(_placement_rank, facts))
    return items + aggregate(processes, key, one, many)


PLACEMENT_ATTRS = ("numa_cpu_share", "numa_page_share", "numa_locality")


def _placement_rank(facts: Facts, process: Node) -> tuple[Any, ...]:
    """Device workers first, then the worst locality."""
    locality = attr(process, "numa_locality")
    return (
        0 if facts.devices_of(process.id) else 1,
        locality if locality is not None else 2.0,
        process.id,
    )


def _numa_line(numa: Node) -> str:
    g = numa.get
    distances = g("distances") or {}
    row = ",".join(str(distances[k]) for k in sorted(distances, key=_numeric_key))
    return parts(
        show_id(numa.id),
        kv("cpus", g("cpulist"), cpus),
        kv("mem", g("mem_total_bytes"), fmt_bytes),
        f"dist={word(row, 200)}" if row else None,
    )


def _numeric_key(text: str) -> tuple[Any, ...]:
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def _device_line(facts: Facts, device: Node) -> str:
    g = device.get
    numa = facts.device_numa(device.id)
    return parts(
        show_id(device.id),
        f"numa={numa}" if numa is not None else "numa=?",
        kv("cpus", g("cpu_affinity"), cpus),
        kv("pci", g("pci_bus_id"), escape_short),
        link(device),
        users(facts, device),
    )


def path_items(facts: Facts) -> list[Item]:
    """Device↔device paths grouped by class (NCCL's LOC/NVL/PIX/PXB/PHB/SYS)."""
    by_class: dict[str, list[Edge]] = {}
    for edge in facts.paths:
        by_class.setdefault(str(attr(edge, "path_class") or "?"), []).append(edge)
    items = []
    for path_class in sorted(by_class):
        edges = sorted(by_class[path_class], key=lambda e: (e.src, e.dst))
        items.append(
            Item(
                ids=(),
                kind="path",
                render=partial(_path_line, path_class, edges),
                edges=tuple(edges),
                measure={"bw": min((attr(e, "bandwidth_gbps") or 0) for e in edges)},
            )
        )
    return items


def _path_line(path_class: str, edges: list[Edge]) -> str:
    pairs = [f"{show_id(e.src)}-{show_id(e.dst)}" for e in edges[:6]]
    more = f" +{len(edges) - 6}" if len(edges) > 6 else ""
    bandwidths = sorted({attr(e, "bandwidth_gbps") for e in edges if attr(e, "bandwidth_gbps")})
    bw = f" bw={fmt_num(bandwidths[0])}Gb/s" if bandwidths else ""
    return f"{len(edges)}× path {word(path_class, 8)}{bw} {' '.join(pairs)}{more}"


def _placement_line(facts: Facts, process: Node) -> str:
    g = process.get
    cpu_share, page_share = g("numa_cpu_share"), g("numa_page_share")
    devices = facts.devices_of(process.id)
    device_numas = {d: facts.device_numa(d) for d in devices}
    shown_devices = [f"{show_id(d)}@{n if n is not None else '?'}" for d, n in device_numas.items()]
    return parts(
        named(process),
        f"dev={','.join(shown_devices)}" if shown_devices else None,
        _device_remote(cpu_share, page_share, device_numas),
        f"cpu{fmt_per_node(cpu_share)}" if cpu_share else None,
        f"mem{fmt_per_node(page_share)}" if page_share else None,
        kv("loc", g("numa_locality"), lambda v: f"{v:.2f}"),
        allowed(facts, process),
    )


def _device_remote(
    cpu_share: dict[str, float] | None,
    page_share: dict[str, float] | None,
    device_numas: dict[str, int | None],
) -> str | None:
    """Says when a device worker runs or keeps its memory away from its device's node."""
    wanted = {str(n) for n in device_numas.values() if n is not None}
    if not wanted:
        return None
    flags = []
    if cpu_share and max(cpu_share, key=lambda node: cpu_share[node]) not in wanted:
        flags.append("cpu")
    if page_share and max(page_share, key=lambda node: page_share[node]) not in wanted:
        flags.append("mem")
    return f"REMOTE({'+'.join(flags)}≠dev)" if flags else None
