"""Layer 2, memory: hosts' memory and swap, NUMA nodes' free memory and hit/miss counts,
accelerators' memory, processes by resident size."""

from __future__ import annotations

from functools import partial
from typing import Any

from wp_mcp.graph.model import Node

from ..facts import Facts, attr
from ..items import Item, aggregate, group_item, node_item
from ..lines import (
    device_items,
    host_items,
    is_unmeasured,
    kv,
    named,
    pair_kv,
    parts,
    sort_desc,
    users,
)
from ..text import fmt_bytes, fmt_count, fmt_rate, show_id
from . import view

LEGEND = (
    "host avail=free/total swap majflt psi | numa free=free/total hit miss | dev mem | "
    "proc rss majflt pages=resident page count(numa_maps, base pages; per-node shares in "
    "interconnect)"
)


@view("memory", legend=LEGEND, narrow="pid=N min_rss=1G min_pages=N", top=("host", "process"))
def memory(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("mem",))
    for numa in sorted(graph.of_kind("numa_node"), key=lambda n: (attr(n, "numa_id") or 0, n.id)):
        items.append(node_item(numa, partial(_numa_line, numa)))
    devices = device_items(facts, _device_line, ("mem_used_bytes", "mem_total_bytes"))
    items += [i for i in devices if i.group is None]  # only measured ones

    def key(process: Node) -> tuple[Any, ...] | None:
        if is_unmeasured(process, ("rss_bytes", "numa_pages", "major_faults")):
            return ("unmeasured",)
        return None

    def one(process: Node) -> Item:
        return node_item(
            process,
            partial(_process_line, process),
            procs=(process.id,),
            metrics=partial(_metrics, process),
            edges=graph.out_edges(process.id, "mem_on"),
        )

    def many(group: list[Node]) -> Item:
        return group_item(group, "no memory data", procs=tuple(p.id for p in group))

    processes = sorted(graph.of_kind("process"), key=_rank)
    return items + aggregate(processes, key, one, many)


def _metrics(process: Node) -> dict[str, float]:
    metrics = {"rss": attr(process, "rss_bytes"), "pages": _total_pages(process)}
    return {k: float(v) for k, v in metrics.items() if v is not None}


def _total_pages(process: Node) -> int | None:
    pages = attr(process, "numa_pages")
    return sum(pages.values()) if pages else None


def _rank(process: Node) -> tuple[Any, ...]:
    return (sort_desc(attr(process, "rss_bytes")), sort_desc(_total_pages(process)), process.id)


def _device_line(facts: Facts, device: Node) -> str:
    g = device.get
    return parts(
        named(device),
        pair_kv("mem", g("mem_used_bytes"), g("mem_total_bytes"), fmt_bytes),
        users(facts, device),
    )


def _numa_line(numa: Node) -> str:
    g = numa.get
    stats = g("numa_stats") or {}
    return parts(
        show_id(numa.id),
        pair_kv("free", g("mem_free_bytes"), g("mem_total_bytes"), fmt_bytes),
        kv("hit", stats.get("numa_hit")),
        kv("miss", stats.get("numa_miss")),
        kv("other_node", stats.get("other_node")),
    )


def _process_line(process: Node) -> str:
    g = process.get
    pages = g("numa_pages")
    return parts(
        named(process),
        kv("rss", g("rss_bytes"), fmt_bytes),
        kv("majflt_total", g("major_faults")),
        kv("majflt", g("major_faults_per_s"), fmt_rate),
        f"pages={fmt_count(sum(pages.values()))}" if pages else None,
    )
