"""The ``entity`` view: one node in full detail, then its neighbours (depth 1 or 2)."""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

from wp_mcp.graph.model import Edge, Node

from .cursor import ViewError
from .facts import Facts, attr
from .items import Item, node_item
from .lines import named
from .text import compact, quote, show_id, word

VALUE_LIMIT = 400
# At depth 2, each neighbour lists at most this many of its own edges (a NUMA node or a
# launcher can have thousands); the rest are counted on one line.
NESTED_EDGES = 12
LEGEND = (
    "first line: the entity; then one line per attribute (raw values, host strings quoted); "
    "then → out-edges and ← in-edges: edge-kind neighbour {edge attributes}; depth 2 indents "
    "the neighbours' own edges"
)


def entity_items(facts: Facts, entity: str | None, depth: int) -> list[Item]:
    graph = facts.graph
    if not entity:
        raise ViewError("the entity view needs entity=<id>; find ids with search or a layer view")
    node = graph.nodes.get(entity)
    if node is None:
        raise ViewError(
            f"no entity {quote(entity, 80)} in this snapshot; find ids with search "
            "(by id, name, cmdline or address)"
        )
    if depth not in (1, 2):
        raise ViewError("depth must be 1 or 2")
    items = [node_item(node, partial(_title, node))]
    for name, value in node.attrs().items():
        if name in ("id", "kind", "source") or value is None:
            continue
        items.append(
            Item(
                ids=(),
                kind="attribute",
                render=partial(_attribute, name, value),
                name=name,
                indent=1,
            )
        )
    items += _edges(facts, node.id, indent=1, exclude=None, nested=depth == 2)
    return items


def _title(node: Node) -> str:
    return f"{named(node)} kind={word(node.kind, 24)}"


def _attribute(name: str, value: Any) -> str:
    return f"{word(name, 60)}={_value(value)}"


def _value(value: Any) -> str:
    if isinstance(value, str):
        return quote(value, VALUE_LIMIT)
    if isinstance(value, bool | int | float) or value is None:
        return str(value)
    return compact(value, VALUE_LIMIT)


def _edges(
    facts: Facts,
    node_id: str,
    indent: int,
    exclude: str | None,
    nested: bool,
    limit: int | None = None,
) -> list[Item]:
    graph = facts.graph
    out = sorted(graph.out_edges(node_id), key=lambda e: (e.kind, e.dst))
    into = sorted(graph.in_edges(node_id), key=lambda e: (e.kind, e.src))
    pairs = [(e, e.dst, "→") for e in out] + [(e, e.src, "←") for e in into]
    pairs = [p for p in pairs if p[1] != exclude]
    items: list[Item] = []
    rest = []
    if limit is not None and len(pairs) > limit:
        pairs, rest = pairs[:limit], pairs[limit:]
    for edge, other, arrow in pairs:
        neighbour = graph.nodes.get(other)
        items.append(
            Item(
                ids=(other,) if neighbour is not None else (),
                kind=neighbour.kind if neighbour is not None else "missing",
                render=partial(_edge_line, edge, arrow, neighbour, other),
                procs=(other,) if neighbour is not None and neighbour.kind == "process" else (),
                name=attr(neighbour, "name") if neighbour is not None else None,
                nodes=(neighbour,) if neighbour is not None else (),
                edges=(edge,),
                indent=indent,
            )
        )
        if nested and neighbour is not None:
            items += _edges(
                facts, other, indent + 1, exclude=node_id, nested=False, limit=NESTED_EDGES
            )
    if rest:
        items.append(_more_edges(node_id, rest, indent))
    return items


def _more_edges(node_id: str, rest: list[tuple[Edge, str, str]], indent: int) -> Item:
    """A depth-2 neighbour's remaining edges, counted per kind (its own entity view has all)."""
    kinds = Counter(f"{'out' if arrow == '→' else 'in'}:{edge.kind}" for edge, _o, arrow in rest)

    def render() -> str:
        shown = ",".join(f"{word(k, 24)}:{n}" for k, n in sorted(kinds.items()))
        return f"+{len(rest)} more edges ({shown}): open entity={show_id(node_id)}"

    return Item(ids=(), kind="more", render=render, indent=indent)


def _edge_line(edge: Edge, arrow: str, neighbour: Node | None, other: str) -> str:
    attrs = {
        k: v
        for k, v in edge.attrs().items()
        if k not in ("src", "dst", "kind", "source") and v is not None
    }
    target = named(neighbour) if neighbour is not None else f"{show_id(other)} (not in graph)"
    extra = f" {_value(attrs)}" if attrs else ""
    return f"{arrow} {word(edge.kind, 24)} {target}{extra}"
