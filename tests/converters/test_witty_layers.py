"""On the witty-profiler capture: small by construction, complete for what the rules read.

The capture (vLLM TP=4 on an 8-NPU, 8-NUMA-node host) is ~115,000 cl100k tokens of JSON; the
seven layers together must cost at most 5 % of that while keeping every fact the rules use.
"""

from __future__ import annotations

import re

import pytest
from view_pages import pages
from wp_mcp.converters import VIEWS, count_tokens, render_view
from wp_mcp.converters.text import fmt_count, fmt_per_node

LAYERS = ("compute", "memory", "interconnect", "network", "storage", "control", "data")


@pytest.fixture(scope="module")
def layer_texts(witty) -> dict[str, str]:
    return {layer: "\n".join(p.text for p in pages(witty, layer)) for layer in LAYERS}


def test_summary_fits_300_tokens_and_prices_every_layer(witty):
    page = render_view(witty, "summary")
    assert page.tokens <= 300
    for layer in LAYERS:
        assert re.search(rf"^{layer} \d[\d.K]*tok \(\d+\)", page.text, re.M), layer
    assert "nodes 129" in page.text


def test_first_page_of_every_view_fits_the_default_budget(witty):
    for view in VIEWS:
        options = {"entity": "proc:1895087"} if view == "entity" else {}
        page = render_view(witty, view, **options)
        assert page.tokens <= 4000, view
        assert page.tokens == count_tokens(page.text)


def test_all_layers_all_pages_cost_at_most_5_percent_of_the_raw_file(witty_path, layer_texts):
    raw_tokens = count_tokens(witty_path.read_text())
    total = sum(count_tokens(text) for text in layer_texts.values())
    assert raw_tokens > 100_000
    assert total <= 0.05 * raw_tokens, (total, raw_tokens)


def test_interconnect_has_the_npu_to_numa_map(witty, layer_texts):
    text = layer_texts["interconnect"]
    for npu in witty.of_kind("npu"):
        assert re.search(rf"^{npu.id} numa={npu.numa_node} cpus={npu.cpu_affinity} ", text, re.M)
    # The capture's own story: NPU 0 and 1 sit on NUMA node 6.
    assert re.search(r"^npu:0 numa=6 cpus=144-167 pci=0000:C1:00.0 users=proc:1895087$", text, re.M)


def test_interconnect_has_each_workers_cpu_and_page_distribution_and_locality(witty, layer_texts):
    text = layer_texts["interconnect"]
    workers = [p for p in witty.of_kind("process") if witty.out_edges(p.id, "uses_device")]
    assert len(workers) == 4
    for worker in workers:
        line = next(line for line in text.splitlines() if line.startswith(worker.id + " "))
        assert f"cpu{fmt_per_node(worker.numa_cpu_share)}" in line
        assert f"mem{fmt_per_node(worker.numa_page_share)}" in line
        assert f"loc={worker.numa_locality:.2f}" in line
    # Every worker runs away from its NPU's node: the line says so.
    placements = re.findall(
        r"^proc:\S+ \S+ dev=npu:\d@\d REMOTE\((cpu|cpu\+mem)≠dev\) ", text, re.M
    )
    assert len(placements) == 4
    assert 'proc:1895087 "python3" dev=npu:0@6 REMOTE(cpu≠dev) cpu{7:69%,5:30%' in text


def test_compute_has_per_thread_cpu_placement_and_switches(witty, layer_texts):
    text = layer_texts["compute"]
    for thread in witty.of_kind("thread"):
        line = next(line for line in text.splitlines() if line.strip().startswith(thread.id + " "))
        vol, invol = fmt_count(thread.vol_ctxt_switches), fmt_count(thread.invol_ctxt_switches)
        assert f"sw_total={vol}/{invol}" in line
        if thread.cpus_used:
            assert f"cpus={thread.cpus_used}" in line


def test_network_has_the_flows_with_their_sizes(witty, layer_texts):
    text = layer_texts["network"]
    flow = next(witty.edges("talks_to"))
    assert (
        f'{flow.src} "vllm" → {flow.dst} "vllm" tcp bytes=906K rate=129K/s window=7.01s flows=44'
        in text
    )
    # The 44 client sockets are one line with their total and per-socket range.
    assert re.search(r"^44× socket alike tcp 127\.0\.0\.1:\d+\.\.\d+ sent=906K\(", text, re.M)


def test_memory_has_numa_free_memory_and_resident_pages(witty, layer_texts):
    text = layer_texts["memory"]
    assert "numa:6 free=57G/126G" in text
    for process in witty.of_kind("process"):
        assert f"{process.id} " in text


def test_control_says_which_workers_share_a_cpu_set(layer_texts):
    text = layer_texts["control"]
    assert (
        'proc:1895087 "python3" allowed=168-191 thr_allowed=0-23,120-143 '
        "shares_cpus_with=proc:1895090" in text
    )  # its acl/release threads are pinned to nodes 0 and 5, not where the process shows


def test_the_same_snapshot_renders_the_same_text(witty_path):
    from wp_mcp.graph.witty import load_witty

    first, second = load_witty(witty_path), load_witty(witty_path)
    for view in VIEWS:
        options = {"entity": "npu:0"} if view == "entity" else {}
        assert render_view(first, view, **options).text == render_view(second, view, **options).text
