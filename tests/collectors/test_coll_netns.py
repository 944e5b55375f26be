"""Two network namespaces joined by a veth pair, with nftables dropping ~5 % of the
sender's packets on arrival (this kernel has no netem): the snapshot shows the retransmissions on
that very flow, on its sockets and on the talks_to edge between the two processes."""

from __future__ import annotations

from collections.abc import Iterator

import netns_link
import pytest
from coll_helpers import needs_root
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.graph import ids

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow, needs_root()]

RECEIVER_IP, SENDER_IP, PORT = "10.77.0.1", "10.77.0.2", 5201


@pytest.fixture
def lossy_link() -> Iterator[dict]:
    with netns_link.lossy_link("wpmcp", RECEIVER_IP, SENDER_IP, PORT, settle_s=1.5) as link:
        yield link


def test_retransmissions_show_on_the_lossy_flow(lossy_link):
    graph = collect_snapshot(Context(window_s=1.0, ebpf="off"))
    statuses = {s.name: s for s in graph.meta.collectors}
    assert statuses["sockets"].status == "ok", statuses["sockets"]
    sender = ids.process(lossy_link["sender"])
    flow = [
        s
        for s in graph.successors(sender, "holds")
        if s.kind == "socket" and s.get("remote_addr") == RECEIVER_IP
    ]
    assert len(flow) == 1
    sock = flow[0]
    assert sock.remote_port == PORT and sock.local_addr == SENDER_IP
    assert sock.retrans_total > 0 and sock.bytes_sent > 0
    assert sock.window_s > 0 and sock.retrans_per_s is not None
    # both ends are on this host, in different namespaces: they pair up into one flow
    link = next(
        e
        for e in graph.out_edges(sender, "talks_to")
        if e.dst == ids.process(lossy_link["receiver"])
    )
    assert link.transport == "tcp" and link.retrans_total >= sock.retrans_total
    assert link.bytes_src_to_dst > 0
