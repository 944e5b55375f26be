"""Cluster views: the summary of a cluster graph says what the cluster is (ranks per host,
nodes that did not collect, clock skew, cross-host traffic and its loss, the worst hosts)
within 300 tokens, and every view drills down to one host with the ``host`` filter."""

from __future__ import annotations

import json

import pytest
from view_pages import pages
from wp_mcp.collectors.cluster import merge_hosts
from wp_mcp.converters import VIEWS, ViewError, render_view, view_items
from wp_mcp.converters.cluster import host_signs
from wp_mcp.converters.facts import Facts
from wp_mcp.graph import Graph, Meta, ids
from wp_synthetic import cluster_graph

MB = 1 << 20


def node(name: str, octet: int, *, connects_to: int | None, retrans: int = 0,
         offset_s: float = 0.0, run_delay: float = 2.0) -> Graph:  # fmt: skip
    """One node's own graph: ranks 2·octet and 2·octet+1 (pids 10, 11), a server socket on
    port 5000, and rank pid 10 connected to ``connects_to``'s server, sending 10 MiB."""
    graph = Graph(Meta(hosts=[name], window_s=1.0, started_at=1000.0))
    graph.meta.clock = {"offset_s": offset_s, "uncertainty_s": 0.0001}
    graph.add("host", ids.host(), hostname=name)
    for local in (0, 1):
        graph.add("process", ids.process(10 + local), pid=10 + local, name="python",
                  rank=2 * octet + local, local_rank=local, world_size=4,
                  run_delay_pct=run_delay if local else 2.0)  # fmt: skip
    ip = f"10.0.0.{octet}"
    sockets = [{"local_addr": ip, "local_port": 5000, "state": "LISTEN"}]
    if connects_to is not None:
        sockets.append({"local_addr": ip, "local_port": 40000, "remote_addr": f"10.0.0.{connects_to}",
                        "remote_port": 5000, "bytes_sent": 10 * MB, "retrans_total": retrans,
                        "data_segs_out": 10 * MB // 1448 + retrans})  # fmt: skip
    else:  # the server side of the one connection
        sockets.append({"local_addr": ip, "local_port": 5000, "remote_addr": "10.0.0.0",
                        "remote_port": 40000, "bytes_received": 10 * MB})  # fmt: skip
    for index, attrs in enumerate(sockets):
        graph.add("socket", ids.socket_inode(100 + index), proto="tcp", **attrs)
        graph.link("holds", ids.process(10), ids.socket_inode(100 + index))
    return graph


def two_nodes_and_a_missing_one() -> Graph:
    """h0 sends to h1 over a lossy link; h1's clock is 3 ms ahead and its rank 3 waits for a
    CPU; h2 never answered."""
    return merge_hosts(
        {"h0": node("h0", 0, connects_to=1, retrans=300),
         "h1": node("h1", 1, connects_to=None, offset_s=0.003, run_delay=40.0)},
        missing={"h2": "timed out after 60 s"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def small_cluster() -> Graph:
    return two_nodes_and_a_missing_one()


def test_the_cluster_summary_says_ranks_missing_nodes_skew_loss_and_worst_hosts(small_cluster):
    text = render_view(small_cluster, "summary").text
    assert "cluster: 4 ranks (2/host) | not collected 1: h2 | clock skew 3.0ms" in text
    assert "cross-host: 1 flows" in text and "worst: h0 loss 4.0%, h1 rank 3 run-delay 40%" in text
    assert "timed out after 60 s" in text  # the reason, on the coverage line
    assert text.splitlines()[-1] == (
        "#end more: views hosts topology, filter host=H; one entity by id; search for ids"
    )


def test_the_json_summary_carries_the_same_cluster_facts(small_cluster):
    cluster = json.loads(render_view(small_cluster, "summary", fmt="json").text)["cluster"]
    assert cluster["ranks"] == 4 and cluster["ranks_per_host"] == [2]
    assert cluster["unfinished"] == {"h2": "failed: timed out after 60 s"}
    assert cluster["skew_s"] == 0.003 and cluster["cross_host_flows"] == 1
    assert cluster["worst"][0] == "h0 loss 4.0%"


def test_a_single_host_summary_has_no_cluster_lines():
    text = render_view(node("h0", 0, connects_to=1), "summary").text
    assert "cluster:" not in text and "cross-host:" not in text and "host=H" not in text


def test_the_host_filter_keeps_that_hosts_items_and_its_cross_host_flows(small_cluster):
    compute = view_items(small_cluster, "compute", filters={"host": "h1"})
    assert compute and all(
        ids.split_host(i)[0] == "h1" for item in compute for i in (*item.ids, *item.procs)
    )
    (flow,) = view_items(small_cluster, "flows", filters={"host": "h1"})
    assert {flow.edges[0].src, flow.edges[0].dst} == {"h0/proc:10", "h1/proc:10"}
    page = render_view(small_cluster, "compute", filters={"host": "h1"})
    assert "host=h1" in page.text.splitlines()[0]  # the header says what was narrowed


def test_every_view_accepts_the_host_filter(small_cluster):
    for view in VIEWS:
        options = {"entity": "h1/proc:10"} if view == "entity" else {}
        page = render_view(small_cluster, view, filters={"host": "h1"}, **options)
        # only flows (and the entity's edges) reach the other host
        assert "h0/" not in page.text or view in ("network", "flows", "entity"), view


def test_the_summary_of_one_host_counts_only_that_host(small_cluster):
    text = render_view(small_cluster, "summary", filters={"host": "h1"}).text
    assert "hosts=1" in text and "hosts: h1" in text and "cluster:" not in text
    assert "nodes 5 " in text  # its host, two ranks, two sockets


def test_host_globs_and_lists_name_several_hosts(small_cluster):
    both = view_items(small_cluster, "compute", filters={"host": "h*"})
    assert len(both) == len(view_items(small_cluster, "compute"))
    assert len(view_items(small_cluster, "compute", filters={"host": "h0,h1"})) == len(both)


def test_an_unknown_host_is_one_line_naming_the_hosts(small_cluster):
    with pytest.raises(ViewError) as error:
        render_view(small_cluster, "compute", filters={"host": "h9" + "x" * 500})
    message = str(error.value)
    assert "\n" not in message and len(message) < 200 and "its hosts: h0 h1" in message


def test_a_single_host_graph_is_all_its_one_host():
    graph = node("solo", 0, connects_to=1)
    assert len(view_items(graph, "compute", filters={"host": "solo"})) == len(
        view_items(graph, "compute")
    )


def test_the_summary_of_128_hosts_by_8_devices_fits_300_tokens_and_names_the_worst():
    graph = cluster_graph(128, 8)
    ranks = (p for p in graph.of_kind("process") if graph.out_edges(p.id, "uses_device"))
    for index, proc in enumerate(ranks):
        proc.rank, proc.run_delay_pct = index, 60.0 if index == 700 else 2.0
    for edge in graph.edges("talks_to"):
        src, dst = ids.split_host(edge.src)[0], ids.split_host(edge.dst)[0]
        if src != dst:
            edge.cross_host, edge.src_bytes_sent, edge.dst_bytes_sent = True, 100 * MB, 100 * MB
            edge.src_retrans_total = 5000 if src == "h42" else 0
            edge.src_data_segs_out = edge.dst_data_segs_out = 100 * MB // 1448
    page = render_view(graph, "summary")
    assert page.tokens <= 300
    assert "worst: h42 loss" in page.text and "rank 700 run-delay 60%" in page.text


def test_the_hosts_view_lists_every_host_worst_first_and_the_missing_on_top(small_cluster):
    lines = render_view(small_cluster, "hosts").text.splitlines()[2:-1]
    assert lines == [
        "h2 not collected (failed: timed out after 60 s)",
        "h0 ranks=2 (0-1) xhost-sent=10M loss=3.98% run-max=2%",
        "h1 ranks=2 (2-3) xhost-sent=0B loss=0.00% run-max=40%",
    ]


def test_the_hosts_view_filters_on_host_metrics(small_cluster):
    (slow,) = view_items(small_cluster, "hosts", filters={"min_run": 20})
    assert slow.name == "h1" and slow.ids == ("h1/host",)
    (lossy,) = view_items(small_cluster, "hosts", filters={"min_retrans": 1})
    assert lossy.name == "h0"


def ranked_cluster(hosts: int, run_delay: dict[str, float]) -> Graph:
    """The synthetic cluster with its device users marked as ranks; each host's ranks wait
    ``run_delay[host]`` % for a CPU (2 % when not given)."""
    graph = cluster_graph(hosts, 2)
    users = (p for p in graph.of_kind("process") if graph.out_edges(p.id, "uses_device"))
    for index, proc in enumerate(users):
        proc.rank = index
        proc.run_delay_pct = run_delay.get(ids.split_host(proc.id)[0], 2.0)
    return graph


def test_quiet_hosts_fold_into_one_line_after_those_that_stand_out():
    graph = ranked_cluster(128, {"h7": 50.0})
    for device in graph.of_kind("gpu"):  # every link trained fully, every rank on its node
        device.link_speed_gts = device.link_max_speed_gts
    for proc in graph.of_kind("process"):
        for device in graph.successors(proc.id, "uses_device"):
            proc.numa_cpu_share = {str(device.numa_node): 1.0}
    lines = render_view(graph, "hosts").text.splitlines()[2:-1]
    assert lines[0].startswith("h7 ranks=2 (14-15)") and "run-max=50%" in lines[0]
    assert lines[1:] == [
        "127× host ranks=2 quiet (loss<0.5% run-max<10% loc≥0.8, no off-node rank or "
        "downtrained link) h0..6,8..127"
    ]


def test_hosts_with_misplaced_ranks_or_downtrained_links_stand_out_before_the_quiet():
    graph = ranked_cluster(16, {})
    off_node = {h for h, sign in host_signs(Facts(graph)).items() if sign.off_node}
    downtrained = {ids.split_host(d.id)[0] for d in graph.of_kind("gpu")
                   if d.link_speed_gts < d.link_max_speed_gts}  # fmt: skip
    lines = render_view(graph, "hosts").text.splitlines()[2:-1]
    standing = [line.split()[0] for line in lines if "quiet" not in line]
    assert off_node and set(standing) == off_node | downtrained
    assert "quiet" in lines[-1] and all("off-node=" in lines[i] or "downtrained=" in lines[i]
                                        for i in range(len(standing)))  # fmt: skip
    assert not any("quiet" in line for line in lines[: len(standing)])


def test_the_summary_counts_every_flow_between_two_hosts_with_its_bytes():
    graph = cluster_graph(8, 2)  # built whole: no edge carries the merge's cross_host mark
    between = [e for e in graph.edges("talks_to")
               if ids.split_host(e.src)[0] != ids.split_host(e.dst)[0]]  # fmt: skip
    text = render_view(graph, "summary").text
    assert between and f"cross-host: {len(between):,} flows " in text
    assert "cross-host: 0 flows" not in text and " 0B loss" not in text


def test_the_hosts_view_pages_128_hosts_that_all_stand_out_within_budget():
    graph = ranked_cluster(128, {f"h{i}": 20.0 + i / 10 for i in range(128)})
    seen = [page for page in pages(graph, "hosts")]
    assert all(page.tokens <= 4000 for page in seen)
    assert sum(page.item_count for page in seen) == 128
