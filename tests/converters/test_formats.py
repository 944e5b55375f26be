"""JSON is a slice in the native schema; Mermaid and DOT render topology and flows only."""

from __future__ import annotations

import json

import pytest
from view_pages import pages
from wp_mcp.converters import ViewError, render_view, search
from wp_mcp.graph.model import edge_from_dict, node_from_dict


def test_json_pages_are_native_nodes_and_edges(witty):
    all_pages = pages(witty, "interconnect", fmt="json", max_tokens=1500)
    assert len(all_pages) > 1
    seen = []
    for page in all_pages:
        doc = json.loads(page.text)
        assert doc["format"] == "wp-graph" and doc["view"] == "interconnect"
        assert doc["page"] == page.page and doc["items_on_page"] == page.item_count
        assert doc["pages"] == page.pages and doc["pages_exact"] is page.pages_exact
        for item in doc["items"]:
            for node in item.get("nodes", []):
                seen.append(node_from_dict(node).id)
            for edge in item.get("edges", []):
                edge_from_dict(edge)
        assert page.tokens <= 1500
    npu0 = next(n for p in all_pages for i in json.loads(p.text)["items"] for n in i.get("nodes", [])
                if n["id"] == "npu:0")  # fmt: skip
    assert npu0["numa_node"] == 6 and npu0["cpu_affinity"] == "144-167"
    assert "proc:1895087" in seen


def test_json_groups_list_every_member(witty):
    doc = json.loads(render_view(witty, "network", fmt="json").text)
    group = next(i["group"] for i in doc["items"] if "group" in i)
    assert group["count"] == 44 and len(group["ids"]) == 44


def test_json_summary_is_small_json(witty):
    page = render_view(witty, "summary", fmt="json")
    doc = json.loads(page.text)
    assert page.tokens <= 300
    assert set(doc["layers"]) == {
        "compute", "memory", "interconnect", "network", "storage", "control", "data"
    }  # fmt: skip


@pytest.mark.parametrize("view", ["topology", "flows"])
def test_mermaid_and_dot_render_topology_and_flows(witty, view):
    mermaid = render_view(witty, view, fmt="mermaid").text
    assert "graph LR" in mermaid.splitlines()
    dot = render_view(witty, view, fmt="dot").text
    assert "digraph wp {" in dot.splitlines() and "}" in dot.splitlines()
    if view == "flows":
        assert '-->|"tcp 906K"|' in mermaid
        assert '[label="tcp 906K"]' in dot
    else:
        assert 'label="npu:0 numa=6 pci=0000:C1:00.0 users=proc:1895087"' in dot


def test_diagrams_are_bounded_like_text(cluster):
    for page in pages(cluster, "topology", fmt="mermaid", max_tokens=1000):
        assert page.tokens <= 1000


def test_diagrams_of_other_views_point_to_txt_or_json(witty):
    with pytest.raises(ViewError, match="use format txt or json for compute"):
        render_view(witty, "compute", fmt="mermaid")
    with pytest.raises(ViewError, match="formats: txt, json, mermaid, dot"):
        render_view(witty, "compute", fmt="yaml")


def test_entity_view_shows_one_node_in_full_with_its_neighbours(witty):
    page = render_view(witty, "entity", entity="npu:0")
    lines = page.text.splitlines()
    assert lines[2] == "npu:0 kind=npu"
    assert '  pci_bus_id="0000:C1:00.0"' in lines
    assert "  numa_node=6" in lines
    assert any(line.startswith("  → local_to numa:6 ") for line in lines)
    assert any(line.startswith('  ← uses_device proc:1895087 "python3"') for line in lines)
    deeper = render_view(witty, "entity", entity="npu:0", depth=2)
    assert deeper.total_items > page.total_items
    assert any(line.startswith("    → ") for line in deeper.text.splitlines())


def test_search_finds_by_name_id_and_address(witty):
    assert search(witty, "WatchdogMonitor").ids == ("thr:1894593",)
    assert search(witty, "npu:3").ids[0] == "npu:3"
    assert "sock:tcp:127.0.0.1:34740" in search(witty, "127.0.0.1:34740").ids
    nothing = search(witty, "no-such-thing")
    assert nothing.total_items == 0 and "no match" in nothing.text
