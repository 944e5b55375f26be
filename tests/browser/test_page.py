"""The HTML page (`wp-mcp show --format html`) in a real browser: headless Chromium opens the
self-contained file, draws every box where the picture puts it without overlaps, and the
controls (a finding's highlight, search, hover, fold and open) work."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest
from wp_mcp.converters.html import render_html
from wp_mcp.converters.picture import build_picture
from wp_mcp.skills import diagnose
from wp_synthetic import cluster_graph

RANKS = ("proc:1895087", "proc:1895088", "proc:1895089", "proc:1895090")
HEADER = {"x": 6, "y": 6}  # a box's own corner: clicking there folds or opens it


def write_page(graph, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text(render_html(build_picture(graph, diagnose(graph).findings)))
    return path


def rect_of(page, box_id: str) -> dict:
    """The on-screen bounding box of a drawn box's rectangle."""
    found = page.locator(f'g.box[data-id="{box_id}"] > rect')
    assert found.count() == 1, f"{box_id} drawn {found.count()} times"
    rect = found.bounding_box()
    assert rect and rect["width"] > 0 and rect["height"] > 0, f"{box_id} not on screen"
    return rect


def overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def inside(inner: dict, outer: dict) -> bool:
    return (
        outer["x"] <= inner["x"]
        and outer["y"] <= inner["y"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 0.5
    )


def ids_of(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.id)")


@pytest.fixture(scope="module")
def witty_page_path(witty, tmp_path_factory):
    return write_page(witty, tmp_path_factory.mktemp("page"), "witty.html")


def test_the_witty_page_draws_numa_boxes_npus_and_ranks_without_overlaps(
    open_page, witty_page_path, witty, screenshot
):
    opened = open_page(witty_page_path)
    page = opened.page
    assert opened.console == []
    numa = ids_of(page, 'g.box[data-kind="numa"]')
    npus = [i for i in ids_of(page, 'g.box[data-kind="device"]') if i.startswith("npu:")]
    assert sorted(numa) == [f"numa:{n}" for n in range(8)]
    assert sorted(npus) == [f"npu:{n}" for n in range(8)]
    assert set(RANKS) <= set(ids_of(page, 'g.box[data-kind="process"]'))
    rects = {i: rect_of(page, i) for i in [*numa, *npus, *RANKS]}
    for a, b in combinations(numa, 2):
        assert not overlap(rects[a], rects[b]), (a, b)
    for a, b in combinations([*npus, *RANKS], 2):
        assert not overlap(rects[a], rects[b]), (a, b)
    for npu in npus:  # each NPU inside its NUMA node's box
        assert inside(rects[npu], rects[f"numa:{witty.nodes[npu].get('numa_node')}"]), npu
    assert inside(rects["proc:1895090"], rects["numa:7"])  # where its CPU time runs
    screenshot(page, "witty-page.png")


def test_clicking_a_p0_highlights_its_subjects_only(open_page, witty_page_path, screenshot):
    page = open_page(witty_page_path).page
    first_p0 = page.locator("#findings li.P0").first
    title = first_p0.text_content()
    first_p0.click()
    highlighted = ids_of(page, "g.box.highlight")
    rank = next(r for r in RANKS if r in title)
    npu = title.split(" uses ")[1].split(" ")[0]
    assert sorted(highlighted) == sorted([rank, npu])
    assert page.locator(f'g.link.highlight[data-src="{rank}"][data-dst="{npu}"]').count() == 1
    screenshot(page, "witty-page-p0.png")
    first_p0.click()  # a second click clears it
    assert ids_of(page, "g.box.highlight") == []


def test_search_hover_and_folding(open_page, witty_page_path):
    page = open_page(witty_page_path).page
    page.fill("#search", "1895088")
    assert ids_of(page, "g.box.match") == ["proc:1895088"]
    assert page.text_content("#matches") == "1 found"
    page.hover('g.box[data-id="npu:3"] > rect')
    assert "pci_bus_id0000:82:00.0" in page.text_content("#detail")  # its attributes
    page.hover('g.box[data-id="proc:1895090"] > rect')  # a rank: its findings and evidence
    detail = page.text_content("#detail")
    assert "runs 94% of its CPU time on NUMA 7" in detail and "cpu_share={7:" in detail
    page.click('g.box[data-id="numa:4"] > rect', position=HEADER)  # fold NUMA 4: its NPUs disappear
    # (a locator wait: the page's CSP forbids the eval a wait_for_function string needs)
    page.locator('g.box[data-id="npu:2"]').wait_for(state="detached")
    assert "[+] 2 inside" in page.text_content('g.box[data-id="numa:4"]')
    # the P0 line of proc:1895089 now ends on the folded box
    assert page.locator('g.link[data-src="proc:1895089"][data-dst="npu:2"]').count() == 1


def test_a_cluster_page_opens_with_hosts_folded_and_a_host_opens_on_click(open_page, tmp_path):
    path = write_page(cluster_graph(8), tmp_path, "cluster.html")
    opened = open_page(path)
    page = opened.page
    assert opened.console == []
    hosts = ids_of(page, 'g.box[data-kind="host"]')
    assert len(hosts) == 8 and ids_of(page, 'g.box[data-kind="numa"]') == []
    # a folded host holding a P0 says so: its box is dashed in the P0 colour
    assert set(ids_of(page, "g.box.inner-P0")) <= set(hosts)
    assert ids_of(page, "g.box.inner-P0")
    for a, b in combinations(hosts, 2):
        assert not overlap(rect_of(page, a), rect_of(page, b))
    page.click(f'g.box[data-id="{hosts[0]}"] > rect', position=HEADER)
    page.wait_for_selector('g.box[data-kind="numa"]')
    assert {i.split("/")[0] for i in ids_of(page, 'g.box[data-kind="numa"]')} == {
        hosts[0].split("/")[0]
    }


def test_a_live_snapshot_page_draws_this_hosts_numa_boxes_without_overlaps(
    open_page, tmp_path, screenshot
):
    from wp_mcp.collectors import collect_snapshot
    from wp_mcp.collectors.base import Context

    graph = collect_snapshot(Context(window_s=1.0, ebpf="off"))
    opened = open_page(write_page(graph, tmp_path, "live.html"))
    page = opened.page
    assert opened.console == []
    numa = ids_of(page, 'g.box[data-kind="numa"]')
    assert len(numa) == len(list(graph.of_kind("numa_node"))) >= 1
    leaves = ids_of(page, 'g.box[data-kind="process"], g.box[data-kind="device"]')
    leaves += ids_of(page, 'g.box[data-kind="folded"]')
    rects = {i: rect_of(page, i) for i in leaves}
    for a, b in combinations(leaves, 2):
        assert not overlap(rects[a], rects[b]), (a, b)
    screenshot(page, "live-page.png")
