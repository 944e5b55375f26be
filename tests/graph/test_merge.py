"""merge_hosts as a pure function over small host graphs: what it refuses, what it records
for hosts that returned nothing, when it must not join two sockets, how it reads clocks."""

from __future__ import annotations

import itertools

import pytest
from wp_mcp.collectors.cluster import host_label, merge_hosts
from wp_mcp.collectors.cluster.merge import unique_labels
from wp_mcp.collectors.cluster.node import clock_offset
from wp_mcp.graph import CollectorStatus, Graph, UserError, ids


def host_graph(hostname: str, sockets: list[dict], ranks: dict[int, int] | None = None) -> Graph:
    """One host: a host node, process 100 (+ 101…) each holding one of ``sockets``."""
    graph = Graph()
    graph.meta.hosts = [hostname]
    graph.meta.started_at = 1000.0
    graph.add("host", ids.host(), hostname=hostname)
    for index, attrs in enumerate(sockets):
        pid = 100 + index
        graph.add("process", ids.process(pid), pid=pid)
        graph.add("socket", ids.socket_inode(5000 + index), proto="tcp", **attrs)
        graph.link("holds", ids.process(pid), ids.socket_inode(5000 + index))
    for pid, rank in (ranks or {}).items():
        graph.add("process", ids.process(pid), pid=pid, rank=rank, world_size=3)
    return graph


def tcp(local: str, lport: int, remote: str, rport: int, **counters: int) -> dict:
    return {"local_addr": local, "local_port": lport, "remote_addr": remote,
            "remote_port": rport, "state": "ESTABLISHED", **counters}  # fmt: skip


def test_host_names_become_id_prefixes_without_separators():
    assert host_label("node-1.example") == "node-1.example"
    assert host_label("rack/7:gpu\nhost") == "rack-7-gpu-host"
    assert len(host_label("x" * 500)) == 63
    with pytest.raises(UserError, match="no letters or digits"):
        host_label("///")


def test_two_hosts_with_the_same_name_are_refused():
    one = host_graph("n", [])
    with pytest.raises(UserError, match="share the name 'n-1'"):
        merge_hosts({"n-1": one, "n/1": host_graph("n", [])})


def test_a_graph_already_prefixed_is_refused():
    merged = merge_hosts({"a": host_graph("a", [])})
    with pytest.raises(UserError, match="already holds host-prefixed ids"):
        merge_hosts({"x": merged})


def test_inputs_are_left_untouched():
    a = host_graph("a", [tcp("10.0.0.1", 4000, "10.0.0.2", 80, bytes_sent=10)])
    b = host_graph("b", [tcp("10.0.0.2", 80, "10.0.0.1", 4000, bytes_received=10)])
    before = (set(a.nodes), a.edge_count, set(b.nodes), b.edge_count)
    merge_hosts({"a": a, "b": b})
    assert before == (set(a.nodes), a.edge_count, set(b.nodes), b.edge_count)
    assert a.node(ids.socket_inode(5000)).get("role") is None


def test_a_connection_is_joined_from_the_end_that_connected_to_the_listener():
    # the server's host comes first: without its listener the pair's order would be a guess
    listener = {"local_addr": "10.0.0.2", "local_port": 80, "state": "LISTEN"}
    a = host_graph("a", [tcp("10.0.0.2", 80, "10.0.0.1", 4000, bytes_received=650), listener])
    b = host_graph("b", [tcp("10.0.0.1", 4000, "10.0.0.2", 80, bytes_sent=700, retrans_total=3)])
    merged = merge_hosts({"a": a, "b": b})
    (link,) = merged.edges("talks_to")
    assert (link.src, link.dst) == ("b/proc:100", "a/proc:100")
    assert (link.src_bytes_sent, link.dst_bytes_received, link.src_retrans_total) == (700, 650, 3)
    assert merged.meta.cluster["flows"] == {
        "cross_host_peers": 1, "cross_host_talks_to": 1, "ambiguous_sockets": 0,
    }  # fmt: skip


def test_a_four_tuple_seen_on_two_hosts_joins_nothing():
    # two hosts reuse one private address (per-host bridges): the far end cannot be told
    a = host_graph("a", [tcp("172.17.0.2", 4000, "10.0.0.9", 80)])
    b = host_graph("b", [tcp("172.17.0.2", 4000, "10.0.0.9", 80)])
    c = host_graph("c", [tcp("10.0.0.9", 80, "172.17.0.2", 4000)])
    merged = merge_hosts({"a": a, "b": b, "c": c})
    assert list(merged.edges("talks_to")) == []
    assert merged.meta.cluster["flows"]["ambiguous_sockets"] == 2


def test_loopback_connections_never_cross_hosts():
    a = host_graph("a", [tcp("127.0.0.1", 4000, "127.0.0.1", 80)])
    b = host_graph("b", [tcp("127.0.0.1", 80, "127.0.0.1", 4000)])
    assert list(merge_hosts({"a": a, "b": b}).edges("talks_to")) == []


def test_hosts_that_returned_nothing_are_named_with_their_reason():
    merged = merge_hosts({"a": host_graph("a", [])}, missing={"b": "node died"})
    assert merged.meta.hosts == ["a"]
    assert merged.meta.cluster["missing"] == {"b": "node died"}
    (status,) = [s for s in merged.meta.collectors if s.status == "failed"]
    assert (status.name, status.host, status.reason) == ("b/collection", "b", "node died")


def test_collector_statuses_name_their_host():
    a = host_graph("a", [])
    a.meta.collectors = [CollectorStatus(name="sockets", status="partial", reason="no netns")]
    (status,) = merge_hosts({"a": a}).meta.collectors
    assert (status.name, status.host, status.reason) == ("a/sockets", "a", "no netns")


def test_ranks_name_duplicates_and_the_missing():
    a = host_graph("a", [], ranks={7: 0, 8: 1})
    b = host_graph("b", [], ranks={7: 1})
    ranks = merge_hosts({"a": a, "b": b}).meta.cluster["ranks"]
    assert ranks["world_size"] == 3 and ranks["missing"] == [2]
    assert ranks["duplicates"] == {"1": ["a/proc:8", "b/proc:7"]}
    assert ranks["hosts"] == {"a": 2, "b": 1}


def test_a_launcher_with_its_workers_rank_is_not_a_duplicate():
    a = host_graph("a", [], ranks={7: 0, 8: 0})
    a.link("parent_of", ids.process(7), ids.process(8))  # torchrun → worker, same env
    ranks = merge_hosts({"a": a}).meta.cluster["ranks"]
    assert ranks["by_rank"] == {"0": "a/proc:8"} and "duplicates" not in ranks


def test_clock_offset_brackets_a_remote_clock_between_two_local_readings(monkeypatch):
    ticks = itertools.count()
    local = lambda: 1000.0 + next(ticks) * 0.010  # noqa: E731  # 10 ms per reading
    monkeypatch.setattr("wp_mcp.collectors.cluster.node.time.time", local)
    reading = clock_offset(lambda: local() + 2.5, samples=4)
    assert reading == {"offset_s": 2.5, "uncertainty_s": 0.01, "samples": 4}


def test_skew_is_the_spread_of_offsets_and_corrects_window_starts():
    a, b = host_graph("a", []), host_graph("b", [])
    a.meta.clock = {"offset_s": 0.0, "uncertainty_s": 0.001}
    b.meta.clock = {"offset_s": 0.25, "uncertainty_s": 0.002}
    b.meta.started_at = 1000.25  # b's clock is ahead: its window opened at the same instant
    clock = merge_hosts({"a": a, "b": b}).meta.cluster["clock"]
    assert clock["skew_s"] == 0.25 and clock["uncertainty_s"] == 0.002
    assert clock["window_start_spread_s"] == 0.0


def test_without_clock_readings_the_skew_says_it_was_not_measured():
    clock = merge_hosts({"a": host_graph("a", [])}).meta.cluster["clock"]
    assert clock == {"measured": False, "reason": "no host graph carries a clock reading"}


def test_node_labels_are_distinct_whatever_the_host_names():
    assert unique_labels([["vm", "vm-10.0.0.1"], ["vm", "vm-10.0.0.2"], ["a/b"], ["a:b"]]) == [
        "vm", "vm-10.0.0.2", "a-b", "a-b-2",
    ]  # fmt: skip
    # a name with nothing to keep falls back to the next choice, then to its position
    assert unique_labels([["///", "n7"], ["\\n"]]) == ["n7", "n"]
    assert unique_labels([["///"]]) == ["node0"]
