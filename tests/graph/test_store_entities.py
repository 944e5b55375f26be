"""Entities and searches of a stored snapshot: read from its node index, not its graph, and
identical to what rendering the whole graph gives (converters/stored.py).

An entity page is rendered from the part of the graph it shows (the node, its edges and
neighbours, theirs at depth 2), read back from the store's rows; a search reads only the rows
whose text matches. Both must give, field for field and cursor for cursor, the page the whole
graph gives; a snapshot whose index is not built yet says None and is rendered as before.
"""

from __future__ import annotations

import dataclasses
import sqlite3

import orjson
import pytest
from wp_mcp.converters import ViewError, render_view, search
from wp_mcp.converters.stored import entity_page, search_page
from wp_mcp.graph import witty
from wp_mcp.graph.store import Store
from wp_synthetic import cluster_graph, scaled_capture
from wp_testdata import WITTY_GRAPH

ENTITIES_COMPARED = 10  # per graph, spread over its nodes (several kinds each)


def fields(page) -> dict:
    return {f.name: getattr(page, f.name) for f in dataclasses.fields(page)}


def indexed(store_dir, graph) -> tuple[Store, str]:
    store = Store(store_dir)
    snapshot_id = store.put(graph)
    store.build_node_index(snapshot_id, graph)
    return Store(store_dir), snapshot_id  # what a fresh process reads: nothing in memory


def spread(node_ids: list[str], count: int) -> list[str]:
    step = max(1, len(node_ids) // count)
    return node_ids[::step]


def assert_entity_served_as_rendered(store, snapshot_id, graph, entity, depth, fmt) -> None:
    cursor = None
    while True:
        options = {"fmt": fmt, "cursor": cursor, "max_tokens": 2000}
        rendered = render_view(
            graph, "entity", entity=entity, depth=depth, snapshot_id=snapshot_id, **options
        )
        served = entity_page(store, snapshot_id, entity, depth, **options)
        assert fields(served) == fields(rendered), (entity, depth, fmt, rendered.page)
        cursor = rendered.next_cursor
        if cursor is None:
            return


@pytest.mark.parametrize(
    "make",
    [
        lambda: witty.load_witty(WITTY_GRAPH),
        lambda: witty.from_witty(scaled_capture(orjson.loads(WITTY_GRAPH.read_bytes()), 1.2), "x"),
        lambda: cluster_graph(2, accelerators_per_host=4, seed=3),
    ],
    ids=["fixture", "capture x3", "cluster 2 hosts"],
)
def test_an_entity_from_the_node_index_is_the_entity_rendered_from_the_whole_graph(store_dir, make):
    graph = make()
    store, snapshot_id = indexed(store_dir, graph)
    busiest = max(graph.nodes, key=lambda i: len(graph.neighbours(i)))
    # the busiest node (pages of edges; at depth 2, edges cut to NESTED_EDGES) and a spread
    entities = [busiest, *spread(list(graph.nodes), ENTITIES_COMPARED)]
    for entity in entities:
        for depth in (1, 2):
            for fmt in ("txt", "json"):
                assert_entity_served_as_rendered(store, snapshot_id, graph, entity, depth, fmt)


def test_a_search_from_the_node_index_is_the_search_of_the_whole_graph(store_dir):
    graph = witty.from_witty(scaled_capture(orjson.loads(WITTY_GRAPH.read_bytes()), 1.2), "x")
    store, snapshot_id = indexed(store_dir, graph)
    queries = ["python", "PROC:", "numa:0", "thr:", ":22", "ProcessPool", "/usr", "", "  ",
               "no such thing", "\udcff", "é", "1"]  # fmt: skip
    queries += [node_id.split(":", 1)[-1] for node_id in spread(list(graph.nodes), 12)]
    for query in queries:
        for limit in (1, 20, 200):
            rendered = search(graph, query, limit=limit, snapshot_id=snapshot_id)
            served = search_page(store, snapshot_id, query, limit=limit)
            assert fields(served) == fields(rendered), (query, limit)


def test_a_missing_entity_gets_the_same_error_and_an_unindexed_snapshot_none(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    snapshot_id = store.put(graph)
    assert entity_page(store, snapshot_id, "proc:1", 1) is None  # not built yet: rendered
    assert search_page(store, snapshot_id, "python") is None
    store.build_node_index(snapshot_id, graph)
    for entity in ("proc:does-not-exist", ""):
        with pytest.raises(ViewError) as rendered:
            render_view(graph, "entity", entity=entity, snapshot_id=snapshot_id)
        with pytest.raises(ViewError) as served:
            entity_page(store, snapshot_id, entity, 1)
        assert str(served.value) == str(rendered.value)


def test_deleting_a_snapshot_deletes_its_node_index(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    kept, doomed = store.put(graph), store.put(graph)
    for snapshot_id in (kept, doomed):
        store.build_node_index(snapshot_id, graph)
    store.delete(doomed)
    db = sqlite3.connect(store_dir / "store.sqlite3")
    for table in ("node_rows", "search_keys", "edge_rows", "node_sets"):
        owners = {row[0] for row in db.execute(f"SELECT DISTINCT snapshot_id FROM {table}")}
        assert owners == {kept}, table
