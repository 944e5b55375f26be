"""The MCP server's pages: a snapshot it stores is answered at once and its pages are built in
the background; what it serves, stored or rendered, is what rendering the graph gives; what
it caches is bounded by bytes."""

from __future__ import annotations

from wp_mcp.converters import render_view
from wp_mcp.converters.pages import page_record
from wp_mcp.graph import witty
from wp_mcp.server.mcp.state import ServerState, _Lru, answer_weight
from wp_testdata import WITTY_GRAPH


def fields(page) -> dict:
    """A page's fields, rendered or read back from the store."""
    return page_record(page)


def test_a_stored_snapshot_is_served_at_once_then_from_its_pages(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    state = ServerState(store_path=store_dir)
    snapshot_id = state.put(graph, "fixture")
    # Whether the background build got there yet or not, the answer is the rendered page.
    page, sid = state.render(snapshot_id, "compute", fmt="json")
    assert sid == snapshot_id
    assert fields(page) == fields(render_view(graph, "compute", fmt="json", snapshot_id=sid))
    state.warm(snapshot_id, graph).join(timeout=120)
    assert state.graph(snapshot_id) is graph  # handed to the store's cache, not read back
    fresh = ServerState(store_path=store_dir)  # nothing in memory: answered from the rows
    for view, options in (("summary", {}), ("network", {"fmt": "txt"}), ("topology", {})):
        served, _ = fresh.render("latest", view, **options)
        assert fields(served) == fields(render_view(graph, view, snapshot_id=sid, **options))
    assert not fresh.store._cache  # the graph was never read
    filtered, _ = fresh.render(snapshot_id, "compute", filters={"kind": "thread"})
    assert fresh.store._cache  # no page stored for filters: rendered from the graph
    expected = render_view(graph, "compute", filters={"kind": "thread"}, snapshot_id=sid)
    assert fields(filtered) == fields(expected)


def test_the_answer_cache_is_bounded_by_bytes_not_by_count():
    cache = _Lru(max_bytes=1000, weigh=len)
    for key in "abc":
        cache.get_or_make(key, lambda: "x" * 400)
    assert cache.bytes == 800  # 'a' went to make room for 'c'
    assert cache.get_or_make("b", lambda: "new") == "x" * 400  # still cached
    assert cache.get_or_make("a", lambda: "again") == "again"
    many = _Lru(max_bytes=1000, weigh=len)
    for key in range(500):
        many.get_or_make(key, lambda: "y")
    assert many.bytes == 500  # small answers: hundreds of them fit


def test_an_answer_weighs_its_text_and_ids():
    graph = witty.load_witty(WITTY_GRAPH)
    page = render_view(graph, "compute")
    assert answer_weight(page) >= len(page.text)
    assert answer_weight(object()) == 1 << 20


def test_entities_and_searches_are_read_from_the_node_index_the_warm_build_stores(store_dir):
    from wp_mcp.converters import search

    graph = witty.load_witty(WITTY_GRAPH)
    state = ServerState(store_path=store_dir)
    snapshot_id = state.put(graph, "fixture")
    state.warm(snapshot_id, graph).join(timeout=120)
    assert state.store.index.fingerprint(snapshot_id) is not None
    fresh = ServerState(store_path=store_dir)  # nothing in memory: answered from the rows
    page, _ = fresh.search(snapshot_id, "python", 20)
    assert fields(page) == fields(search(graph, "python", limit=20, snapshot_id=snapshot_id))
    page, _ = fresh.render(snapshot_id, "entity", entity="proc:1895087", depth=2)
    expected = render_view(graph, "entity", entity="proc:1895087", depth=2, snapshot_id=snapshot_id)
    assert fields(page) == fields(expected)
    assert not fresh.store._cache  # the graph was never read


def test_the_open_answer_never_waits_for_a_big_graphs_summary(store_dir, monkeypatch):
    from wp_mcp.server.mcp.tools import snapshots

    graph = witty.load_witty(WITTY_GRAPH)
    state = ServerState(store_path=store_dir)
    snapshot_id = state.store.put(graph)  # stored, no pages yet
    monkeypatch.setattr(snapshots, "OVERVIEW_RENDER_ELEMENTS", 100)  # the fixture is "big"
    assert "wp_summary" in snapshots._overview_summary(state, snapshot_id, graph)
    state.warm(snapshot_id, graph).join(timeout=120)
    expected = render_view(graph, "summary", snapshot_id=snapshot_id).text
    assert snapshots._overview_summary(state, snapshot_id, graph) == expected
