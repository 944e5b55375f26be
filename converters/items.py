"""Items: the unit of every view. One item is one line of compact text (or one JSON record).

An item covers one entity, one edge, or a group of idle/identical entities. Its line is
rendered lazily and its token count cached, so paging through a large view renders and counts
only the lines it shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from wp_mcp.graph import ids
from wp_mcp.graph.model import Edge, Node

from .facts import attr
from .text import id_ranges, name_pattern, quote
from .tokens import count_tokens


@dataclass(slots=True, eq=False)  # items compare by identity
class Item:
    ids: tuple[str, ...]  # entities (node ids) this item stands for; groups list them all
    kind: str  # node kind, or the edge kind for edge items (talks_to, path)
    render: Callable[[], str]  # builds the line without its indentation
    procs: tuple[str, ...] = ()  # processes it belongs to (the pid filter's scope)
    name: str | None = None  # what the name filter matches
    # What min_<metric> filters test: a dict (a new one when not given), or a function
    # building it on first use (most items are never filtered on a metric, so most never pay
    # for it).
    measure: dict[str, float] | Callable[[], dict[str, float]] = field(default_factory=dict)
    nodes: tuple[Node, ...] = ()  # JSON slice: nodes in full
    edges: tuple[Edge, ...] = ()  # JSON slice: edges in full
    group: dict[str, Any] | None = None  # JSON slice: an aggregated group
    indent: int = 0
    _line: str | None = field(default=None, init=False, repr=False)
    _tokens: int = field(default=-1, init=False, repr=False)
    _alt: dict[str, str] | None = field(default=None, init=False, repr=False)  # other formats
    _alt_tokens: dict[str, int] | None = field(default=None, init=False, repr=False)

    def piece_text(self, fmt: str, build: Callable[[Item], str]) -> str:
        """This item's text in another format (JSON, Mermaid, DOT), built once."""
        if self._alt is None:
            self._alt = {}
        text = self._alt.get(fmt)
        if text is None:
            text = self._alt[fmt] = build(self)
        return text

    def piece(self, fmt: str, build: Callable[[Item], str]) -> tuple[str, int]:
        """That text and its tokens (one more for its line break), counted once."""
        text = self.piece_text(fmt, build)
        if self._alt_tokens is None:
            self._alt_tokens = {}
        tokens = self._alt_tokens.get(fmt)
        if tokens is None:
            tokens = self._alt_tokens[fmt] = count_tokens(text) + 1
        return text, tokens

    @property
    def metrics(self) -> dict[str, float]:
        if callable(self.measure):
            self.measure = self.measure()
        return self.measure

    @property
    def line(self) -> str:
        if self._line is None:
            self._line = "  " * self.indent + self.render()
        return self._line

    @property
    def tokens(self) -> int:
        if self._tokens < 0:
            self._tokens = count_tokens(self.line) + 1  # +1 for its newline
        return self._tokens


def node_item(
    node: Node,
    render: Callable[[], str],
    *,
    procs: tuple[str, ...] = (),
    metrics: dict[str, float] | Callable[[], dict[str, float]] | None = None,
    edges: Iterable[Edge] = (),
    indent: int = 0,
) -> Item:
    return Item(
        ids=(node.id,),
        kind=node.kind,
        render=render,
        procs=procs,
        name=node.__dict__.get("name"),
        measure=metrics or {},
        nodes=(node,),
        edges=tuple(edges),
        indent=indent,
    )


def group_item(
    nodes: list[Node],
    label: str,
    detail: str | Callable[[], str] = "",
    *,
    procs: tuple[str, ...] = (),
    metrics: dict[str, float] | Callable[[], dict[str, float]] | None = None,
    indent: int = 0,
) -> Item:
    """``48× thread "ProcessPool-*" idle thr:100..147`` — many alike entities on one line
    (``detail``: its text, or a function making it when the line is first rendered)."""
    ids = tuple(n.id for n in nodes)
    kind = nodes[0].kind
    names = {attr(n, "name") for n in nodes}
    pattern = _shared_pattern(nodes)

    def render() -> str:
        shown = f" {quote(pattern)}" if pattern is not None else _some_names(nodes)
        shown_detail = detail() if callable(detail) else detail
        extra = f" {shown_detail}" if shown_detail else ""
        return f"{len(nodes)}× {kind}{shown} {label}{extra} {id_ranges(ids)}"

    group = {"group": kind, "count": len(nodes), "label": label, "ids": list(ids)}
    if pattern is not None:
        group["name"] = pattern
    return Item(
        ids=ids,
        kind=kind,
        render=render,
        procs=procs,
        name=next(iter(names)) if len(names) == 1 else pattern,
        measure=metrics or {},
        group=group,
        indent=indent,
    )


def _some_names(nodes: list[Node], limit: int = 3) -> str:
    """`` names="a","b",+4`` for a group whose members are named differently."""
    patterns = sorted({name_pattern(n) for n in (attr(node, "name") for node in nodes) if n})
    if not patterns:
        return ""
    shown = ",".join(quote(p, 40) for p in patterns[:limit])
    more = f",+{len(patterns) - limit}" if len(patterns) > limit else ""
    return f" names={shown}{more}"


def _shared_pattern(nodes: list[Node]) -> str | None:
    names = {attr(n, "name") for n in nodes}
    if None in names:
        return None
    if len(names) == 1:
        only: str = next(iter(names))
        return only
    patterns = {name_pattern(name) for name in names}
    return next(iter(patterns)) if len(patterns) == 1 else None


def aggregate(
    nodes: list[Node],
    key: Callable[[Node], Any],
    make_one: Callable[[Node], Item],
    make_group: Callable[[list[Node]], Item],
    min_group: int = 3,
) -> list[Item]:
    """One item per node, except runs of ``min_group`` or more alike nodes (same ``key``,
    ``None`` meaning "not aggregatable") which become one group item at the first one's place.
    Nodes on different hosts of a cluster graph never share a group: a host's drill-down
    (the ``host`` filter) keeps whole groups, each of its own nodes only.
    """
    keys = list(map(key, nodes))
    if keys.count(None) == len(keys):  # nothing to fold (most measured threads)
        return list(map(make_one, nodes))
    buckets: dict[Any, list[Node]] = {}
    for position, (node, k) in enumerate(zip(nodes, keys, strict=True)):
        if k is not None:
            k = keys[position] = (ids.split_host(node.id)[0], k)
            buckets.setdefault(k, []).append(node)
    items: list[Item] = []
    done: set[Any] = set()
    for node, k in zip(nodes, keys, strict=True):
        bucket = buckets.get(k) if k is not None else None
        if bucket is None or len(bucket) < min_group:
            items.append(make_one(node))
        elif k not in done:
            done.add(k)
            items.append(make_group(bucket))
    return items
