"""The cross-host rules on small cluster graphs built through merge_hosts: which host or rank
they name, when they stay quiet, and why they cannot judge a single host."""

from __future__ import annotations

from wp_mcp.collectors.cluster import merge_hosts
from wp_mcp.graph import Graph, ids
from wp_mcp.skills.bottleneck_identification import evaluate

MB = 1 << 20
SEGMENT = 1448  # the data carried per segment on the Ethernet links these hosts model


def node(name: str, ip: str, peers: dict[str, int], retrans: int = 0,
         run_delay: float = 2.0, sent: int = 10 * MB, locality: float = 0.95) -> Graph:  # fmt: skip
    """One host running rank process 10 that sends ``sent`` bytes to each peer ip (port 5000
    + its last octet), retransmitting ``retrans`` segments on each, and serves port 5000 +
    its own."""
    graph = Graph()
    graph.meta.hosts, graph.meta.window_s = [name], 1.0
    graph.add("host", ids.host(), hostname=name)
    graph.add("process", ids.process(10), pid=10, rank=int(ip.rsplit(".", 1)[1]),
              world_size=3, run_delay_pct=run_delay, numa_locality=locality)  # fmt: skip
    own = 5000 + int(ip.rsplit(".", 1)[1])
    sockets = [{"local_addr": ip, "local_port": own, "state": "LISTEN"}]
    for peer_ip, sport in peers.items():
        sockets.append({"local_addr": ip, "local_port": sport, "remote_addr": peer_ip,
                        "remote_port": 5000 + int(peer_ip.rsplit(".", 1)[1]),
                        "bytes_sent": sent, "retrans_total": retrans,
                        "data_segs_out": sent // SEGMENT + retrans})  # fmt: skip
    for peer_ip, cport in _accepted(ip).items():
        sockets.append({"local_addr": ip, "local_port": own, "remote_addr": peer_ip,
                        "remote_port": cport, "bytes_received": 10 * MB})  # fmt: skip
    for index, attrs in enumerate(sockets):
        graph.add("socket", ids.socket_inode(100 + index), proto="tcp", **attrs)
        graph.link("holds", ids.process(10), ids.socket_inode(100 + index))
    return graph


# a ring: .0 → .1 → .2 → .0, each connecting from port 40000 + its own octet
IPS = {"h0": "10.0.0.0", "h1": "10.0.0.1", "h2": "10.0.0.2"}
RING = {"10.0.0.0": "10.0.0.1", "10.0.0.1": "10.0.0.2", "10.0.0.2": "10.0.0.0"}


def _accepted(ip: str) -> dict[str, int]:
    return {src: 40000 + int(src[-1]) for src, dst in RING.items() if dst == ip}


def ring(lossy: str | None = None, slow: str | None = None, chatty: str | None = None,
         unbound: str | None = None) -> Graph:  # fmt: skip
    """Three hosts in a ring; ``chatty`` sends only 10 KB with one retransmission;
    ``unbound``'s rank runs mostly away from its memory."""
    return merge_hosts({
        name: node(name, ip, {RING[ip]: 40000 + int(ip[-1])},
                   retrans=60 if name == lossy else (1 if name == chatty else 0),
                   run_delay=45.0 if name == slow else 2.0,
                   sent=10_000 if name == chatty else 10 * MB,
                   locality=0.4 if name == unbound else 0.95)
        for name, ip in IPS.items()
    })  # fmt: skip


def results(graph: Graph) -> dict:
    return {o.rule.id: o.result for o in evaluate(graph)}


def test_the_ring_is_joined_across_hosts():
    graph = ring()
    assert graph.meta.cluster["flows"]["cross_host_talks_to"] == 3


def test_the_host_sending_into_a_lossy_link_is_named():
    (finding,) = results(ring(lossy="h1"))["L4.cluster-lossy-host"]
    assert finding.subject == "host:h1" and finding.priority == "P0"
    assert finding.evidence[0].values["segments_retransmitted"] == 60


def test_a_host_that_sent_little_is_no_baseline():
    # h0's one retransmission in 7 segments is 12 %: as a baseline it would hide h1's loss
    (finding,) = results(ring(lossy="h1", chatty="h0"))["L4.cluster-lossy-host"]
    assert finding.subject == "host:h1"


def test_clean_hosts_raise_nothing():
    found = results(ring())
    assert found["L4.cluster-lossy-host"] == [] and found["L1.cluster-straggler"] == []
    assert found["L3.cluster-placement-outlier"] == []


def test_the_rank_waiting_for_cpu_is_the_straggler():
    (finding,) = results(ring(slow="h2"))["L1.cluster-straggler"]
    assert finding.subject == "h2/proc:10" and "rank 2 on h2" in finding.title


def test_the_host_placing_its_ranks_differently_is_named():
    (finding,) = results(ring(unbound="h0"))["L3.cluster-placement-outlier"]
    assert finding.subject == "host:h0" and finding.value == 0.4
    assert results(ring())["L3.cluster-placement-outlier"] == []


def test_a_single_host_graph_is_not_evaluable():
    single = node("h0", "10.0.0.0", {"10.0.0.1": 40000})
    found = results(single)
    assert "single-host graph" in found["L4.cluster-lossy-host"]
    assert "single-host graph" in found["L1.cluster-straggler"]
    assert "single-host graph" in found["L3.cluster-placement-outlier"]
    assert "single-host graph" in found["L3.cluster-pairs-across-hosts"]


GIB = 1 << 30
INTERLEAVED = {0: "h0/proc:10", 2: "h0/proc:11", 1: "h1/proc:10", 3: "h1/proc:11"}
BLOCKS = {0: "h0/proc:10", 1: "h0/proc:11", 2: "h1/proc:10", 3: "h1/proc:11"}


def paired(pairs: list[tuple[int, int]], where: dict[int, str], moved: int = GIB) -> Graph:
    """One 4-rank job on two hosts, ranks placed ``where``; each (rank, rank) in ``pairs``
    exchanges ``moved`` bytes across hosts (half each way, as each sender counted)."""
    graph = Graph()
    graph.meta.hosts, graph.meta.window_s = ["h0", "h1"], 1.0
    for rank, proc in where.items():
        graph.add("process", proc, pid=int(proc[-2:]), rank=rank, world_size=4,
                  master_addr="10.0.0.0", master_port=29500)  # fmt: skip
    for a, b in pairs:
        graph.link("talks_to", where[a], where[b], transport="tcp", cross_host=True,
                   src_bytes_sent=moved // 2, dst_bytes_sent=moved // 2)  # fmt: skip
    return graph


def test_ranks_of_one_block_split_between_two_hosts_are_named_with_the_swap():
    # ranks 0,1 and 2,3 belong together (2 per host); an interleaved order splits both pairs
    (finding,) = results(paired([(0, 1), (2, 3)], INTERLEAVED))["L3.cluster-pairs-across-hosts"]
    assert finding.subject == "hosts:h0,h1" and finding.value == 2
    assert finding.evidence[0].values["pairs"] == ["rank 0@h0↔rank 1@h1", "rank 2@h0↔rank 3@h1"]
    assert "swapping rank 1 (h1) with rank 2 (h0)" in finding.action


def test_data_parallel_traffic_between_blocks_is_quiet():
    # ranks 0,1 on h0 and 2,3 on h1: rank r with r + 2 is what data parallelism exchanges
    assert results(paired([(0, 2), (1, 3)], BLOCKS))["L3.cluster-pairs-across-hosts"] == []


def test_one_split_pair_has_nothing_to_swap_with():
    assert results(paired([(0, 1)], INTERLEAVED))["L3.cluster-pairs-across-hosts"] == []


def test_little_traffic_between_split_pairs_is_quiet():
    found = results(paired([(0, 1), (2, 3)], INTERLEAVED, moved=1 << 20))
    assert found["L3.cluster-pairs-across-hosts"] == []


def test_ranks_of_different_jobs_are_not_paired():
    graph = paired([(0, 1), (2, 3)], INTERLEAVED)
    graph.node("h1/proc:11").world_size = 8
    assert results(graph)["L3.cluster-pairs-across-hosts"] == []
