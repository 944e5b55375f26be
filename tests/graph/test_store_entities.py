"""Entities and searches of a stored snapshot: read from its node index, not its graph, and
identical to what rendering the whole graph gives (converters/stored.py).

An entity page is rendered from the part of the graph it shows (the node, its edges and
neighbours, theirs at depth 2), read back from the store's rows; a search reads only the rows
whose text matches. Both must give, field for field and cursor for cursor, the page the whole
graph gives; a snapshot whose index is not built yet says None and is rendered as before.
"""

from __future__ import annotations

import sqlite3

import orjson
import pytest
from wp_mcp.converters import ViewError, render_view, search
from wp_mcp.converters.pages import build_node_index, page_record
from wp_mcp.converters.search import COUNT_CAP
from wp_mcp.converters.stored import entity_page, search_page
from wp_mcp.graph import witty
from wp_mcp.graph.store import Store
from wp_synthetic import cluster_graph, scaled_capture
from wp_testdata import WITTY_GRAPH

ENTITIES_COMPARED = 10  # per graph, spread over its nodes (several kinds each)


def fields(page) -> dict:
    """A page's fields, rendered from the whole graph or from the node index."""
    return page_record(page)


def indexed(store_dir, graph) -> tuple[Store, str]:
    store = Store(store_dir)
    snapshot_id = store.put(graph)
    build_node_index(store, snapshot_id, graph)
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
    build_node_index(store, snapshot_id, graph)
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
        build_node_index(store, snapshot_id, graph)
    store.delete(doomed)
    db = sqlite3.connect(store_dir / "store.sqlite3")
    owners = {row[0] for row in db.execute("SELECT snapshot_id FROM node_sets")}
    assert owners == {kept}
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert any(kept in table for table in tables)
    assert not any(doomed in table for table in tables)  # its tables, indexes and FTS shadows


# Names a search must treat as plain text: quotes, LIKE/GLOB and FTS5 query syntax, case
# that lower-cases to more characters or by context, NUL and the index's own frame characters
AWKWARD_NAMES = [
    'say "hi"', '""', "100%_done", "a*b?[c]", "x AND y OR NEAR(z)", "{name}:^-+",
    "İstanbul", "STRASSE Straße", "ΟΔΟΣ", "日本語ワーカー", "fr\x01am\x02e",
    "tab\there", "back\\slash",
]  # fmt: skip
AWKWARD_QUERIES = [
    '"', '""', 'say "hi', "%", "_", "0%_", "*", "a*b", "?[c]", "AND", "or near", "NEAR(",
    "{name}", ":^-", "i̇st", "İSTAN", "straße", "ß", "οδος", "ΟΔΟΣ", "ς", "本語", "日", "ワーカ",
    "\x00", "a\x00b", "\x01", "\x01am", "am\x02", "\t", "b\\s", "\udcff", "x\udcffy",
    "ας", "αας", "ασα", "e", "ab", "a", "b", "x\x00", "bcd", "日本", "ー", "q9", "ж", "\x01awkward", "awkward:1\x01", "\x02edgy", ":1", "1:", "proc", "awkward:", "awkward:3", "\n", "python\ntorch",
]  # fmt: skip


# FTS5's tokenizer ends a text at a NUL: a snapshot holding one is searched by a scan
NUL_NAMES = ["a\x00b", "x\x00bcd"]


def awkward_graph(names: list[str] = AWKWARD_NAMES):
    """A small cluster with processes named (and run) by the awkward names, and one whose
    id's case differs from its lower-cased id."""
    graph = cluster_graph(2, accelerators_per_host=2, seed=5)
    for number, name in enumerate(names):
        graph.add("process", f"awkward:{number}", pid=90000 + number, name=name,
                  cmdline=f"{name} --n {number}")  # fmt: skip
    graph.add("process", "Awkward:Mixed", pid=99999, name="python", cmdline="python\ntorch")
    # a needle of one or two characters only at the start or the end of a command line
    graph.add("process", "awkward:edges", pid=99997, name="edgy", cmdline="Q9 Ж")
    # searched text keeps 4096 characters of a name: its last sigma is final there, not whole
    graph.add("process", "awkward:long", pid=99998, name="Α" * 4095 + "ΣΑ")
    return graph


@pytest.mark.parametrize("names", [AWKWARD_NAMES, AWKWARD_NAMES + NUL_NAMES], ids=["", "NUL"])
def test_a_search_for_awkward_text_from_the_node_index_is_the_search_of_the_whole_graph(
    store_dir, names
):
    """Needles of 1 and 2 characters (no trigram of their own), non-ASCII, quotes, LIKE, GLOB
    and FTS5 metacharacters, control characters and a lone surrogate are plain text both
    ways; a line break inside a query (it may match across two values) is left to the graph;
    a graph holding a NUL is scanned (the trigram index would not see past it)."""
    graph = awkward_graph(names)
    store, snapshot_id = indexed(store_dir, graph)
    assert store.index.has_search_index(snapshot_id) == (names == AWKWARD_NAMES)
    for query in AWKWARD_QUERIES + names:
        for limit in (1, 3, 200):
            served = search_page(store, snapshot_id, query, limit=limit)
            if "\n" in query.strip():
                assert served is None, query
                continue
            rendered = search(graph, query, limit=limit, snapshot_id=snapshot_id)
            assert fields(served) == fields(rendered), (query, limit)


def test_a_search_matching_more_than_the_cap_says_over_it_both_ways(store_dir):
    """Beyond COUNT_CAP matches a page says "over 10000" (the index stops counting there):
    read from the node index, by its trigrams or by a scan (a NUL in the text), as from the
    whole graph."""
    for nul in (False, True):
        graph = cluster_graph(14, accelerators_per_host=8)  # 11,592 nodes, ids "hN/..."
        if nul:
            graph.add("process", "h0/proc:99999", pid=99999, name="with\x00nul")
        store, snapshot_id = indexed(store_dir, graph)
        assert store.index.has_search_index(snapshot_id) == (not nul)
        for query in ("h", "/", "h1", "proc"):
            rendered = search(graph, query, snapshot_id=snapshot_id)
            served = search_page(store, snapshot_id, query)
            assert fields(served) == fields(rendered), (nul, query)
        over = search_page(store, snapshot_id, "/")
        assert over.text.splitlines()[0].endswith(f"matches over {COUNT_CAP}")
        assert over.total_items == COUNT_CAP + 1
        assert f"#more over {COUNT_CAP - over.item_count} matches" in over.text


def test_an_index_of_an_earlier_format_is_not_read_and_is_built_again(store_dir):
    graph = awkward_graph()
    _store, snapshot_id = indexed(store_dir, graph)
    db = sqlite3.connect(store_dir / "store.sqlite3")
    with db:  # as a store written before formats has it: no format, rows in the old tables
        db.execute("ALTER TABLE node_sets DROP COLUMN format")
        db.execute("INSERT INTO node_rows VALUES (?, 'stale', x'00')", (snapshot_id,))
    store = Store(store_dir)  # adds the column: the index has no format
    assert search_page(store, snapshot_id, "python") is None  # the graph answers
    assert entity_page(store, snapshot_id, "awkward:1", 1) is None
    build_node_index(store, snapshot_id, graph)
    rendered = search(graph, "python", snapshot_id=snapshot_id)
    assert fields(search_page(store, snapshot_id, "python")) == fields(rendered)
    assert db.execute("SELECT count(*) FROM node_rows").fetchone() == (0,)
