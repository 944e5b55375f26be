"""Pages stored with a snapshot: served without the graph, identical to rendering it.

The converters build, for every view but entity, each page in compact text and JSON at the
default budget, keyed by the cursor that asks for it (converters/pages.py), when first asked
for rather than when the snapshot is stored, and the store keeps them as rows. Whatever is
served from them must be exactly what ``render_view`` gives on the whole graph; whatever
they do not hold (filters, another budget, an entity) is None, and the caller renders.
"""

from __future__ import annotations

import sqlite3

import orjson
import pytest
from wp_mcp.converters import render_view
from wp_mcp.converters.pages import (
    STORED_FORMATS,
    STORED_VIEWS,
    build_pages,
    build_pages_quietly,
    page_record,
    stored_page,
)
from wp_mcp.graph import witty
from wp_mcp.graph.store import Store
from wp_synthetic import cluster_graph, scaled_capture
from wp_testdata import WITTY_GRAPH


def fields(page) -> dict:
    """A page's fields, rendered or read back from the store."""
    return page_record(page)


def put_with_pages(store: Store, graph) -> str:
    """Store ``graph`` and the first pages of each of its views, as the MCP server does."""
    snapshot_id = store.put(graph)
    build_pages(store, snapshot_id, graph)
    return snapshot_id


def assert_served_as_rendered(store: Store, snapshot_id: str, graph) -> int:
    """Follow every stored chain through its cursors, page by page; the pages compared."""
    compared = 0
    for view in STORED_VIEWS:
        for fmt in STORED_FORMATS:
            cursor = None
            while True:
                rendered = render_view(graph, view, fmt=fmt, cursor=cursor, snapshot_id=snapshot_id)
                served = stored_page(
                    store, snapshot_id, view, fmt=fmt, cursor=cursor, max_tokens=4000
                )
                assert served is not None, (view, fmt, rendered.page)
                assert fields(served) == fields(rendered), (view, fmt, rendered.page)
                compared += 1
                cursor = rendered.next_cursor
                if cursor is None:
                    break
    return compared


def small_capture_copies():
    """The witty capture repeated a few times: views run to several pages."""
    return witty.from_witty(scaled_capture(orjson.loads(WITTY_GRAPH.read_bytes()), 1.2), "x")


@pytest.mark.parametrize(
    "make",
    [
        lambda: witty.load_witty(WITTY_GRAPH),
        small_capture_copies,
        lambda: cluster_graph(2, accelerators_per_host=4, seed=1),
        lambda: cluster_graph(3, accelerators_per_host=2, seed=7),
    ],
    ids=["fixture", "capture x3", "cluster 2 hosts", "cluster 3 hosts"],
)
def test_every_stored_page_is_the_page_rendered_from_the_whole_graph(store_dir, make):
    graph = make()
    store = Store(store_dir)
    snapshot_id = store.put(graph)
    build_pages(store, snapshot_id, graph, limit=None)
    reopened = Store(store_dir)  # what a fresh process reads: nothing cached in memory
    assert assert_served_as_rendered(reopened, snapshot_id, graph) >= len(STORED_VIEWS) * 2


def test_put_stores_no_pages_and_a_build_of_one_view_stores_only_that_one(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    snapshot_id = store.put(graph)  # storing costs what storing the graph costs
    assert stored_page(store, snapshot_id, "summary", max_tokens=4000) is None
    build_pages(store, snapshot_id, graph, only=("compute", "json"))
    served = stored_page(store, snapshot_id, "compute", fmt="json", max_tokens=4000)
    assert fields(served) == fields(
        render_view(graph, "compute", fmt="json", snapshot_id=snapshot_id)
    )
    for view, fmt in (("compute", "txt"), ("summary", "json"), ("memory", "json")):
        assert stored_page(store, snapshot_id, view, fmt=fmt, max_tokens=4000) is None, (view, fmt)


def test_a_first_build_stores_the_first_pages_of_each_view_and_a_later_build_the_rest(
    store_dir,
):
    graph = small_capture_copies()
    store = Store(store_dir)
    snapshot_id = put_with_pages(store, graph)  # the first pages of each view
    first = render_view(graph, "compute", fmt="json", snapshot_id=snapshot_id)
    second = render_view(graph, "compute", fmt="json", cursor=first.next_cursor,
                         snapshot_id=snapshot_id)  # fmt: skip
    assert fields(
        stored_page(store, snapshot_id, "compute", fmt="json", max_tokens=4000)
    ) == fields(first)
    build_pages(store, snapshot_id, graph, limit=1)  # as far as asked already: nothing to do
    served = stored_page(
        store, snapshot_id, "compute", fmt="json", cursor=first.next_cursor, max_tokens=4000
    )
    assert fields(served) == fields(second)

    store = Store(store_dir)
    fresh = store.put(graph)
    build_pages(store, fresh, graph, limit=1)
    assert stored_page(store, fresh, "compute", fmt="json", max_tokens=4000) is not None
    later = render_view(graph, "compute", fmt="json", snapshot_id=fresh).next_cursor
    assert stored_page(store, fresh, "compute", fmt="json", cursor=later, max_tokens=4000) is None
    build_pages(store, fresh, graph, limit=None)  # resumes after the first page
    assert_served_as_rendered(store, fresh, graph)


def test_requests_no_page_was_stored_for_are_left_to_rendering(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    snapshot_id = put_with_pages(store, graph)
    assert stored_page(store, snapshot_id, "compute", max_tokens=4000) is not None
    for request in (
        {"filters": {"kind": "thread"}},
        {"max_tokens": 2000},
        {"max_tokens": "4000"},
        {"fmt": "mermaid", "view": "topology"},
        {"view": "entity", "entity": "proc:1895087"},
        {"depth": 2},
        {"cursor": "c1.not-a-cursor-of-this-snapshot"},
        {"view": "no such view"},
    ):
        arguments = {"view": "compute", "max_tokens": 4000, **request}
        view = arguments.pop("view")
        assert stored_page(store, snapshot_id, view, **arguments) is None, request


def test_deleting_a_snapshot_deletes_its_pages_and_a_build_for_it_stores_nothing(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    kept, doomed = put_with_pages(store, graph), put_with_pages(store, graph)
    store.delete(doomed)
    build_pages(store, doomed, graph, limit=None)  # e.g. a background build that lost a race
    db = sqlite3.connect(store_dir / "store.sqlite3")
    owners = {row[0] for row in db.execute("SELECT DISTINCT snapshot_id FROM pages")}
    assert owners == {kept}
    assert {row[0] for row in db.execute("SELECT DISTINCT snapshot_id FROM page_sets")} == {kept}


def test_a_store_made_before_pages_gains_them_and_serves_its_old_snapshots(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    old = Store(store_dir).put(graph)
    db = sqlite3.connect(store_dir / "store.sqlite3")
    db.execute("DROP TABLE pages")
    db.execute("DROP TABLE page_sets")
    db.commit()
    db.close()
    store = Store(store_dir)  # an older version's store: the tables are added
    assert stored_page(store, old, "compute", max_tokens=4000) is None  # rendered from the graph
    build_pages(store, old, graph)
    assert (
        stored_page(store, old, "compute", max_tokens=4000).text
        == render_view(graph, "compute", snapshot_id=old).text
    )


def test_a_read_only_store_serves_its_pages(small_disk):
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(small_disk.root / "store")
    snapshot_id = put_with_pages(store, graph)
    store.close()
    small_disk.make_read_only()
    reader = Store(small_disk.root / "store")
    assert reader.read_only
    served = stored_page(reader, snapshot_id, "memory", max_tokens=4000)
    assert served.text == render_view(graph, "memory", snapshot_id=snapshot_id).text
    build_pages(reader, snapshot_id, graph, limit=None)  # nothing to write to: nothing done


def test_a_monitor_cycle_stores_its_snapshot_and_its_pages_follow_when_built(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    report = ("bottleneck-identification", {"findings": []}, "# report")
    snapshot_id, _ = store.put_cycle(graph, "monitor", report, [])
    assert (
        stored_page(store, snapshot_id, "summary", max_tokens=4000) is None
    )  # a cycle stays cheap
    build_pages(store, snapshot_id, graph, only=("summary", "txt"))
    served = stored_page(store, snapshot_id, "summary", max_tokens=4000)
    assert fields(served) == fields(render_view(graph, "summary", snapshot_id=snapshot_id))


def test_a_page_that_cannot_be_built_leaves_the_snapshot_stored(store_dir, monkeypatch, caplog):
    from wp_mcp.converters import pages

    def broken(*_args):
        raise RuntimeError("renderer bug")
        yield

    monkeypatch.setattr(pages, "walk", broken)
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    snapshot_id = store.put(graph)
    build_pages_quietly(store, snapshot_id, graph)
    assert store.info(snapshot_id).nodes == 129
    assert (
        stored_page(store, snapshot_id, "summary", max_tokens=4000) is None
    )  # rendered when asked
    assert "pages of snapshot" in caplog.text and "renderer bug" in caplog.text
