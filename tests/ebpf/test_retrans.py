"""Retransmissions counted by eBPF on a lossy flow between two network namespaces.

~5 % of the sender's packets are lost between the namespaces (nftables; this kernel has
no netem), so TCP must retransmit. Every retransmitted skb fires ``tcp:tcp_retransmit_skb``;
one skb may carry several segments, so eBPF's count is at least one and at most the
sender's own ``tcpi_total_retrans``.
"""

from __future__ import annotations

import pytest

from .conftest import Peer, Window, flow_bytes

pytestmark = [pytest.mark.usefixtures("ebpf"), pytest.mark.ebpf, pytest.mark.netns]


def test_lossy_flow_between_namespaces_shows_retransmissions(peers, lossy_netns):
    size = 5_000_000
    host = lossy_netns["receiver_addr"]
    with Window() as window:
        receiver = Peer("tcp-recv", "--host", host, netns=lossy_netns["receiver"])
        peers.append(receiver)
        port = str(receiver.hello["port"])
        sender = Peer(
            "tcp-send", "--host", host, "--port", port, "--bytes", str(size),
            netns=lossy_netns["sender"],
        )  # fmt: skip
        peers.append(sender)
        report = sender.finish()
        assert receiver.finish()["received"] == size
        graph = window.collect()

    assert report["total_retrans"] > 0  # the drop rule worked
    [sock] = [
        graph.nodes[e.dst]
        for e in graph.out_edges(f"proc:{sender.pid}", "holds")
        if graph.nodes[e.dst].get("remote_port") == int(port)
    ]
    assert sock.get("remote_addr") == host
    assert 0 < sock.get("ebpf_retrans") <= report["total_retrans"]
    assert sock.source["ebpf_retrans"] == "ebpf"
    assert graph.nodes[f"proc:{sender.pid}"].get("ebpf_retrans") == sock.get("ebpf_retrans")
    links = [
        e
        for e in graph.out_edges(f"proc:{sender.pid}", "talks_to")
        + graph.in_edges(f"proc:{sender.pid}", "talks_to")
        if {e.src, e.dst} == {f"proc:{sender.pid}", f"proc:{receiver.pid}"}
    ]
    assert len(links) == 1
    assert links[0].get("ebpf_retrans") == sock.get("ebpf_retrans")
    assert flow_bytes(graph, sender.pid, receiver.pid, "tcp") == size
