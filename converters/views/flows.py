"""The ``flows`` view: every process-to-process flow, biggest first (those of unmeasured
size folded per pair of hosts, names and transport)."""

from __future__ import annotations

from typing import Any

from wp_mcp.graph.query import host_prefix

from ..facts import Facts, attr
from ..items import Item
from ..lines import escape_short, flow_items, parts
from ..text import id_ranges, name_pattern, quote
from . import view

LEGEND = "A → B transport bytes rate window flows retrans (process to process, biggest first)"


@view("flows", legend=LEGEND, narrow="pid=N min_bytes=1M")
def flows(facts: Facts) -> list[Item]:
    """Every talks_to edge, biggest first; edges with no measured size folded per pair shape."""
    items = flow_items(facts, lambda _t: True)
    measured = [i for i in items if i.metrics]
    unmeasured = [i for i in items if not i.metrics]
    if len(unmeasured) < 3:
        return measured + unmeasured
    shapes: dict[tuple[Any, ...], list[Item]] = {}
    for item in unmeasured:
        edge = item.edges[0]
        shape = (  # per pair of hosts, so a host's drill-down holds only its own flows
            host_prefix(edge.src),
            host_prefix(edge.dst),
            name_pattern(facts.name_of(edge.src) or ""),
            name_pattern(facts.name_of(edge.dst) or ""),
            attr(edge, "transport"),
        )
        shapes.setdefault(shape, []).append(item)
    folded: list[Item] = []
    for (_, _, src, dst, transport), group in shapes.items():
        if len(group) < 3:
            folded += group
            continue
        folded.append(_flow_group(src, dst, transport, group))
    return measured + folded


def _flow_group(src: str, dst: str, transport: object, group: list[Item]) -> Item:
    edges = tuple(i.edges[0] for i in group)
    sources = sorted({e.src for e in edges})
    targets = sorted({e.dst for e in edges})

    def render() -> str:
        return parts(
            f"{len(edges)}× talks_to {quote(src, 40)} → {quote(dst, 40)}",
            escape_short(transport or "?"),
            "size unmeasured",
            f"from={id_ranges(sources, 3)} to={id_ranges(targets, 3)}",
        )

    return Item(
        ids=(),
        kind="talks_to",
        render=render,
        procs=tuple(sorted(set(sources) | set(targets))),
        name=src,
        edges=edges,
        group={"group": "talks_to", "count": len(edges), "transport": transport},
    )
