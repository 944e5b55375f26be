"""The in-memory graph: nodes by id, by kind, and adjacency by edge kind.

Collectors add to it, converters and skills read it. Adding a node whose id exists merges
attributes into it (the newer value wins, provenance follows the value), so collectors can
each contribute what they know about the same process or device.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import UserError
from .gcpause import kept_out_of_collections
from .model import Edge, Meta, Node, edge_from_dict, node_from_dict


class GraphError(UserError):
    """A graph that breaks the model's rules (an edge naming a missing node, …)."""


class Graph:
    def __init__(self, meta: Meta | None = None) -> None:
        self.meta = meta or Meta()
        self.nodes: dict[str, Node] = {}
        # nodes by kind; None in a graph built in bulk until first asked for (_kind_index)
        self._by_kind: dict[str, dict[str, Node]] | None = {}
        self._edges: dict[tuple[Any, ...], Edge] = {}
        # a graph read from the store holds its edges as a list until an edge is added or
        # removed: the table by identity costs a tuple and a hash per edge, and most readers
        # only walk the edges (see from_trusted)
        self._edge_list: list[Edge] | None = None
        # set by a reader that validated every element and checked the whole graph (native,
        # witty), cleared by any change made through the graph: the store then trusts it
        # without checking it again (graph/trusted.py)
        self.checked = False
        # adjacency is built on first use: loading a big file need not pay for it up front
        self._adjacency_ready = True
        self._out: dict[str, dict[str, list[Edge]]] = defaultdict(lambda: defaultdict(list))
        self._in: dict[str, dict[str, list[Edge]]] = defaultdict(lambda: defaultdict(list))

    @classmethod
    def from_validated(
        cls, meta: Meta, nodes: list[Node], edges: list[Edge]
    ) -> tuple[Graph, int | None, int | None]:
        """Bulk-build from validated elements; returns (graph, position of the first duplicate
        node, position of the first dangling edge) so a reader can say where a file is wrong."""
        graph = cls.from_trusted(meta, nodes, edges)  # the same bulk build, then the checks
        by_id = graph.nodes
        if len(by_id) != len(nodes):
            seen: set[str] = set()
            for position, node in enumerate(nodes):
                if node.id in seen:
                    return graph, position, None
                seen.add(node.id)
        ends = {edge.src for edge in edges} | {edge.dst for edge in edges}
        if ends.difference(by_id):
            for position, edge in enumerate(edges):
                if edge.src not in by_id or edge.dst not in by_id:
                    return graph, None, position
        table = {edge.ident: edge for edge in edges}
        if len(table) != len(edges):  # parallel twins in the file: merged into the first
            table = {}
            for edge in edges:
                existing = table.setdefault(edge.ident, edge)
                if existing is not edge:
                    _merge_attrs(existing, edge)
        graph._edges, graph._edge_list = table, None
        return graph, None, None

    @classmethod
    def from_trusted(cls, meta: Meta, nodes: list[Node], edges: list[Edge]) -> Graph:
        """Build from elements the store validated and checked when it stored them (unique
        ids, unique edges, no dangling end): no check here."""
        graph = cls(meta)
        graph.nodes = {node.id: node for node in nodes}
        graph._by_kind = None  # built on first need: a read need not pay for it
        graph._edge_list = edges
        graph._adjacency_ready = False
        return graph

    def _kind_index(self) -> dict[str, dict[str, Node]]:
        """Nodes by kind, built from the nodes on first need (a change builds it first, so
        that kinds keep the order of their first appearance before the change)."""
        index = self._by_kind
        if index is None:
            index = self._by_kind = _by_kind(self.nodes)
        return index

    def _edge_table(self) -> dict[tuple[str, str, str, str | None], Edge]:
        """Edges by identity, built from the stored list on first need."""
        if self._edge_list is not None:
            edges, self._edge_list = self._edge_list, None
            self._edges = {edge.ident: edge for edge in edges}
        return self._edges

    def _every_edge(self) -> list[Edge] | Any:
        return self._edge_list if self._edge_list is not None else self._edges.values()

    def _adjacency(self) -> None:
        if self._adjacency_ready:
            return
        # built aside and set at once: two threads rendering one cached graph may both get
        # here, and neither may see (or append to) a half-built table
        out: dict[str, dict[str, list[Edge]]] = defaultdict(lambda: defaultdict(list))
        into: dict[str, dict[str, list[Edge]]] = defaultdict(lambda: defaultdict(list))
        every = self._every_edge()
        # two million lists and dicts that live as long as the graph: the collector's passes
        # over them while they are made doubled the build (640 hosts: 3.0 -> 1.5 s)
        with kept_out_of_collections(len(every)):
            for edge in every:
                out[edge.src][edge.kind].append(edge)
                into[edge.dst][edge.kind].append(edge)
        self._out, self._in = out, into
        self._adjacency_ready = True

    # ------------------------------------------------------------------ building

    def add_node(self, node: Node | dict[str, Any]) -> Node:
        """Add a node, or merge it into the node with the same id."""
        if isinstance(node, dict):
            node = node_from_dict(node)
        self.checked = False
        existing = self.nodes.get(node.id)
        if existing is None:
            self.nodes[node.id] = node
            self._kind_index().setdefault(node.kind, {})[node.id] = node
            return node
        if existing.kind != node.kind:
            raise GraphError(
                f"node {node.id!r} is a {existing.kind}, cannot merge a {node.kind} into it"
            )
        _merge_attrs(existing, node)
        return existing

    def add(self, kind: str, id: str, source: str | None = None, **attrs: Any) -> Node:
        """Shorthand used by collectors: add or merge a node, recording its source."""
        data: dict[str, Any] = {"id": id, "kind": kind, **attrs}
        if source:
            data["source"] = {name: source for name in attrs}
        return self.add_node(data)

    def add_edge(self, edge: Edge | dict[str, Any], strict: bool = True) -> Edge:
        """Add an edge (both ends must exist when ``strict``), or merge into its twin."""
        if isinstance(edge, dict):
            edge = edge_from_dict(edge)
        if strict:
            for end in (edge.src, edge.dst):
                if end not in self.nodes:
                    raise GraphError(f"edge {edge.kind} {edge.src} -> {edge.dst}: no node {end!r}")
        self._adjacency()
        self.checked = False
        table = self._edge_table()
        ident = edge.ident
        existing = table.get(ident)
        if existing is not None:
            _merge_attrs(existing, edge)
            return existing
        table[ident] = edge
        self._out[edge.src][edge.kind].append(edge)
        self._in[edge.dst][edge.kind].append(edge)
        return edge

    def link(self, kind: str, src: str, dst: str, source: str | None = None, **attrs: Any) -> Edge:
        data: dict[str, Any] = {"src": src, "dst": dst, "kind": kind, **attrs}
        if source:
            data["source"] = {name: source for name in attrs if name != "key"}
        return self.add_edge(data)

    def remove_node(self, node_id: str) -> None:
        """Remove a node and every edge touching it."""
        if node_id not in self.nodes:
            return
        by_kind = self._kind_index()  # before the change: see _kind_index
        node = self.nodes.pop(node_id)
        self._adjacency()
        self.checked = False
        by_kind[node.kind].pop(node_id, None)
        doomed = [e for lists in self._out.pop(node_id, {}).values() for e in lists]
        doomed += [e for lists in self._in.pop(node_id, {}).values() for e in lists]
        table = self._edge_table()
        for edge in doomed:
            if table.pop(edge.ident, None) is None:
                continue
            other_out = self._out.get(edge.src, {}).get(edge.kind)
            if other_out and edge in other_out:
                other_out.remove(edge)
            other_in = self._in.get(edge.dst, {}).get(edge.kind)
            if other_in and edge in other_in:
                other_in.remove(edge)

    def merge(self, other: Graph) -> Graph:
        """Merge another graph into this one: same id → attributes merged, provenance kept."""
        for node in other.nodes.values():
            self.add_node(node.copy())
        for edge in other.edges():
            self.add_edge(edge.copy(), strict=False)
        for host in other.meta.hosts:
            if host not in self.meta.hosts:
                self.meta.hosts.append(host)
        self.meta.collectors.extend(other.meta.collectors)
        for name, value in other.meta.capabilities.items():
            self.meta.capabilities.setdefault(name, value)
        return self

    # ------------------------------------------------------------------ reading

    def __contains__(self, node_id: str) -> bool:
        return node_id in self.nodes

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, node_id: str) -> Node | None:
        return self.nodes.get(node_id)

    def of_kind(self, kind: str) -> list[Node]:
        return list(self._kind_index().get(kind, {}).values())

    def kinds(self) -> dict[str, int]:
        return {kind: len(nodes) for kind, nodes in self._kind_index().items() if nodes}

    def edges(self, kind: str | None = None) -> Iterator[Edge]:
        every = self._every_edge()
        if kind is None:
            return iter(every)
        return (edge for edge in every if edge.kind == kind)

    @property
    def edge_count(self) -> int:
        return len(self._every_edge())

    def edge_kinds(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for edge in self._every_edge():
            counts[edge.kind] += 1
        return dict(counts)

    def out_edges(self, node_id: str, kind: str | None = None) -> list[Edge]:
        self._adjacency()
        by_kind = self._out.get(node_id)
        if not by_kind:
            return []
        if kind is not None:
            return list(by_kind.get(kind, ()))
        return [e for lists in by_kind.values() for e in lists]

    def in_edges(self, node_id: str, kind: str | None = None) -> list[Edge]:
        self._adjacency()
        by_kind = self._in.get(node_id)
        if not by_kind:
            return []
        if kind is not None:
            return list(by_kind.get(kind, ()))
        return [e for lists in by_kind.values() for e in lists]

    def successors(self, node_id: str, kind: str) -> list[Node]:
        return [self.nodes[e.dst] for e in self.out_edges(node_id, kind) if e.dst in self.nodes]

    def predecessors(self, node_id: str, kind: str) -> list[Node]:
        return [self.nodes[e.src] for e in self.in_edges(node_id, kind) if e.src in self.nodes]

    def neighbours(self, node_id: str) -> set[str]:
        ids = {e.dst for e in self.out_edges(node_id)}
        ids.update(e.src for e in self.in_edges(node_id))
        ids.discard(node_id)
        return ids

    def process_family(self, process: int | str) -> set[str]:
        """Ids of a process, its ancestors and its descendants (the `--pid` filter's scope).

        ``process`` is a pid or a node id (host-prefixed ids such as ``h2/proc:7`` too).
        A parent cycle in a malformed graph ends the walk instead of looping.
        """
        root = f"proc:{process}" if isinstance(process, int) else process
        if root not in self.nodes:
            return set()
        family = {root}
        up = root
        while parents := [e.src for e in self.in_edges(up, "parent_of") if e.src not in family]:
            up = parents[0]
            family.add(up)
        stack = [root]
        while stack:
            for edge in self.out_edges(stack.pop(), "parent_of"):
                if edge.dst not in family:
                    family.add(edge.dst)
                    stack.append(edge.dst)
        return family

    def iter_nodes(self, kinds: Iterable[str] | None = None) -> Iterator[Node]:
        if kinds is None:
            return iter(self.nodes.values())
        index = self._kind_index()
        return (n for k in kinds for n in index.get(k, {}).values())


def _by_kind(nodes: dict[str, Node]) -> dict[str, dict[str, Node]]:
    """Nodes by kind, each kind's in the nodes' order, kinds in order of appearance."""
    index: dict[str, dict[str, Node]] = {}
    for node_id, node in nodes.items():
        index.setdefault(node.kind, {})[node_id] = node
    return index


def _merge_attrs(target: Node | Edge, incoming: Node | Edge) -> None:
    """Copy the attributes ``incoming`` set onto ``target``; provenance follows the value."""
    skip = ("source", *incoming.ID_KEYS)
    for name, value in incoming.__dict__.items():
        if name not in skip:
            setattr(target, name, value)
    if incoming.source:
        if target.source is None:
            target.source = {}
        target.source.update(incoming.source)
