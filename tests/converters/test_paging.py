"""Paging: every page within its budget, every entity exactly once, cursors that refuse misuse."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from view_pages import pages
from wp_mcp.converters import ViewError, count_tokens, render_view
from wp_synthetic import cluster_graph

# What each view must list (one line per entity, or inside one aggregated line).
ENTITY_KINDS = {
    "compute": ("host", "gpu", "npu", "process", "thread"),
    "interconnect": ("numa_node", "gpu", "npu", "nic", "rdma_device", "pci_bridge", "process"),
    "topology": ("numa_node", "gpu", "npu", "container", "process"),
    "data": ("pipe", "shm", "mqueue"),
}


def expected(graph, view) -> Counter:
    wanted = Counter(n.id for kind in ENTITY_KINDS[view] for n in graph.of_kind(kind))
    if view == "data":
        wanted.update(s.id for s in graph.of_kind("socket") if s.proto == "unix")
    return wanted


@pytest.mark.parametrize("view", sorted(ENTITY_KINDS))
def test_paging_visits_every_entity_exactly_once(cluster, view):
    seen = Counter(i for page in pages(cluster, view) for i in page.ids)
    assert seen == expected(cluster, view)


def test_network_lists_every_nic_and_every_non_unix_socket_once(cluster):
    seen = Counter(i for page in pages(cluster, "network") for i in page.ids)
    sockets = [s.id for s in cluster.of_kind("socket") if s.proto != "unix"]
    assert {i: n for i, n in seen.items() if i.split("/")[-1].startswith("sock:")} == Counter(
        sockets
    )
    assert all(seen[n.id] == 1 for n in cluster.of_kind("nic"))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    view=st.sampled_from(
        ["compute", "memory", "interconnect", "network", "data", "topology", "flows"]
    ),
    budget=st.integers(min_value=300, max_value=8000),
    fmt=st.sampled_from(["txt", "json"]),
)
def test_no_page_exceeds_its_budget_and_pages_cover_all_items(cluster, view, budget, fmt):
    all_pages = pages(cluster, view, max_tokens=budget, fmt=fmt)
    for number, page in enumerate(all_pages, start=1):
        assert page.tokens <= budget
        assert page.tokens == count_tokens(page.text)
        assert page.page == number
    assert sum(p.item_count for p in all_pages) == all_pages[0].total_items
    assert [p.first_item for p in all_pages] == sorted({p.first_item for p in all_pages})


def test_exact_page_counts_for_small_views(witty):
    all_pages = pages(witty, "compute", max_tokens=300)
    assert len(all_pages) > 3
    assert all(p.pages == len(all_pages) and p.pages_exact for p in all_pages)
    assert f"page 2/{len(all_pages)} " in all_pages[1].text


def test_the_text_says_what_is_left_and_how_to_get_it(witty):
    first = render_view(witty, "compute", max_tokens=400)
    last_line = first.text.splitlines()[-1]
    assert last_line.startswith(f"#more {first.total_items - first.item_count} items")
    assert f"cursor={first.next_cursor} " in last_line
    assert "narrow with filters" in last_line
    final = pages(witty, "compute", max_tokens=400)[-1]
    assert final.text.splitlines()[-1] == "#end" and final.next_cursor is None


def test_filters_narrow_by_kind_pid_family_name_and_metric(witty):
    threads = render_view(witty, "compute", filters={"kind": "thread", "name": "release*"})
    assert threads.total_items == 4
    assert all(line.strip().startswith("thr:") for line in threads.text.splitlines()[2:-1])
    family = render_view(witty, "interconnect", filters={"pid": 1895087})
    # The worker, its ancestors (python3 launcher, vllm, bash, shim, containerd, dockerd) and
    # the NPU it uses.
    assert sorted(family.ids) == sorted(
        ["npu:0", "proc:1895087", "proc:1894856", "proc:1894499", "proc:1893833",
         "proc:1893666", "proc:6928", "proc:6808"]
    )  # fmt: skip
    sized = render_view(witty, "network", filters={"min_bytes": "1M"})
    assert sized.total_items == 0
    assert render_view(witty, "network", filters={"min_bytes": "900K"}).total_items == 2


def test_bad_filters_and_budgets_say_what_is_accepted(witty):
    with pytest.raises(ViewError, match="unknown filter"):
        render_view(witty, "compute", filters={"colour": "red"})
    with pytest.raises(ViewError, match="wants a number"):
        render_view(witty, "compute", filters={"min_cpu": "lots"})
    with pytest.raises(ViewError, match="max_tokens must be a number"):
        render_view(witty, "compute", max_tokens="many")
    capped = render_view(witty, "compute", max_tokens=50_000)
    assert capped.max_tokens == 8000 and "max_tokens capped at 8000" in capped.text


def test_a_cursor_continues_exactly_where_the_page_ended(witty):
    first = render_view(witty, "compute", max_tokens=400)
    second = render_view(witty, "compute", max_tokens=400, cursor=first.next_cursor)
    assert second.first_item == first.first_item + first.item_count
    assert second.page == 2


def test_cursors_from_elsewhere_are_refused_with_what_to_do(witty, cluster):
    cursor = render_view(witty, "compute", max_tokens=400).next_cursor
    with pytest.raises(ViewError, match="another snapshot"):
        render_view(cluster, "compute", cursor=cursor)
    with pytest.raises(ViewError, match="belongs to view 'compute'"):
        render_view(witty, "memory", cursor=cursor)
    with pytest.raises(ViewError, match="other filters"):
        render_view(witty, "compute", cursor=cursor, filters={"kind": "thread"})
    with pytest.raises(ViewError, match="format 'txt'"):
        render_view(witty, "compute", cursor=cursor, fmt="json")
    with pytest.raises(ViewError, match="damaged"):
        render_view(witty, "compute", cursor=cursor[:-3] + "AAA")
    with pytest.raises(ViewError, match="not a wp-mcp cursor"):
        render_view(witty, "compute", cursor="hello")


def test_unknown_views_and_entities_say_what_to_call(witty):
    with pytest.raises(ViewError, match="views: summary"):
        render_view(witty, "cpu")
    with pytest.raises(ViewError, match="search"):
        render_view(witty, "entity", entity="proc:1")
    with pytest.raises(ViewError, match="needs entity"):
        render_view(witty, "entity")


@pytest.mark.slow
def test_largest_synthetic_graph_pages_within_budget_and_visit_everything_once():
    graph = cluster_graph(640)
    assert graph.edge_count >= 1_000_000
    for view in ("compute", "interconnect", "topology", "data"):
        seen: Counter = Counter()
        for page in pages(graph, view):
            assert page.tokens <= 4000
            seen.update(page.ids)
        assert seen == expected(graph, view)


def test_prepare_builds_views_ahead_without_changing_them(witty_path):
    from wp_mcp.converters import prepare
    from wp_mcp.converters.index import index_for
    from wp_mcp.graph.witty import load_witty

    graph = load_witty(witty_path)
    prepare(graph)
    assert index_for(graph)._items.keys() >= {"compute", "interconnect", "topology", "flows"}
    fresh = load_witty(witty_path)
    for view in ("compute", "interconnect", "topology"):
        assert render_view(graph, view).text == render_view(fresh, view).text


def test_entity_pages_follow_their_cursor_even_for_long_ids():
    from wp_mcp.graph.graph import Graph

    graph = Graph()
    long_id = "shm:posix:/" + "a" * 5000
    graph.add("shm", long_id, shm_type="posix")
    for pid in range(100, 400):
        graph.add("process", f"proc:{pid}", pid=pid, name="worker")
        graph.link("holds", f"proc:{pid}", long_id)
    all_pages = pages(graph, "entity", entity=long_id, max_tokens=500)
    assert len(all_pages) > 3
    assert sum(p.item_count for p in all_pages) == all_pages[0].total_items
    with pytest.raises(ViewError, match="other filters/entity/depth"):
        render_view(graph, "entity", entity="proc:100", cursor=all_pages[0].next_cursor)


def test_a_dropped_graph_is_freed_with_its_view_index(witty_path):
    import gc
    import weakref

    from wp_mcp.graph.witty import load_witty

    graph = load_witty(witty_path)
    render_view(graph, "compute")
    alive = weakref.ref(graph)
    del graph
    gc.collect()
    assert alive() is None
