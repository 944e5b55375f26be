"""Per-graph view index: items per view, filtered lists and page layouts, built lazily once.

Cached on the graph object (so a dropped graph frees its index) and rebuilt if the graph
grows. Paging then only slices a list and renders the lines it shows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from wp_mcp.graph.blake import blake2b
from wp_mcp.graph.gcpause import kept_out_of_collections
from wp_mcp.graph.graph import Graph

from .facts import Facts
from .items import Item

FILTERED_CACHE = 32


class ViewIndex:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.shape = _shape(graph)
        self.facts = Facts(graph)
        self.fingerprint = _fingerprint(graph)
        self._items: dict[str, list[Item]] = {}
        self._filtered: OrderedDict[tuple[Any, ...], list[Item]] = OrderedDict()
        self.layouts: OrderedDict[tuple[Any, ...], list[int]] = OrderedDict()
        self.search_haystacks: list[tuple[Any, str]] | None = None  # built by search()
        self.summary_layers: dict[str, dict[str, Any]] | None = None  # built by the summary
        # host drill-downs (cluster.py)
        self.parts: OrderedDict[tuple[Any, ...], Graph] = OrderedDict()
        self._lock = threading.RLock()

    def items(self, view: str, build: Callable[[Facts], list[Item]]) -> list[Item]:
        with self._lock:
            items = self._items.get(view)
            if items is None:
                # one small object per entity, none freed, kept as long as the graph: on a
                # large graph they go where the graph's own objects are, out of every later
                # pass of the cyclic collector (as the adjacency does, graph/gcpause.py)
                with kept_out_of_collections(sum(self.shape)):
                    items = self._items[view] = build(self.facts)
            return items

    def filtered(
        self, key: tuple[Any, ...], items: list[Item], keep: Callable[[Item], bool] | None
    ) -> list[Item]:
        if keep is None:
            return items
        with self._lock:
            cached = self._filtered.get(key)
            if cached is None:
                cached = [item for item in items if keep(item)]
                self._filtered[key] = cached
                while len(self._filtered) > FILTERED_CACHE:
                    self._filtered.popitem(last=False)
            else:
                self._filtered.move_to_end(key)
            return cached

    def remember_layout(self, key: tuple[Any, ...], starts: list[int]) -> None:
        with self._lock:
            self.layouts[key] = starts
            while len(self.layouts) > FILTERED_CACHE:
                self.layouts.popitem(last=False)


# The index lives on the graph itself: its items point back at the graph's nodes, so a
# module-level cache (even a weak-keyed one, whose values would keep their keys alive) would
# keep every graph ever viewed. As an attribute, graph and index go away together.
_ATTRIBUTE = "_wp_view_index"
_INDEXES_LOCK = threading.Lock()


def index_for(graph: Graph) -> ViewIndex:
    with _INDEXES_LOCK:
        index = graph.__dict__.get(_ATTRIBUTE)
        if index is None or index.shape != _shape(graph):
            index = ViewIndex(graph)
            setattr(graph, _ATTRIBUTE, index)
        return index


def _shape(graph: Graph) -> tuple[int, int]:
    return (len(graph.nodes), graph.edge_count)


# A part of a bigger graph (an entity's neighbourhood read from the store) carries the
# bigger graph's fingerprint: its cursors must be those of the whole graph's pages.
_WHOLE_FINGERPRINT = "_wp_whole_fingerprint"


def carry_fingerprint(part: Graph, fingerprint: str) -> None:
    """Let ``part`` (not yet viewed) stand for the graph whose fingerprint is given."""
    setattr(part, _WHOLE_FINGERPRINT, fingerprint)


def _fingerprint(graph: Graph) -> str:
    """Cheap and stable: the metadata, the sizes and a sample of ids in insertion order."""
    whole = graph.__dict__.get(_WHOLE_FINGERPRINT)
    if whole is not None:
        return str(whole)
    meta: Any = graph.meta
    digest = blake2b(digest_size=6)
    digest.update(repr((meta.origin, meta.started_at, meta.hosts, _shape(graph))).encode())
    node_ids = list(graph.nodes)
    step = max(1, len(node_ids) // 64)
    for node_id in node_ids[::step]:
        digest.update(node_id.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
