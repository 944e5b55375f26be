"""A real snapshot with every registered collector: eBPF's figures sit next to polling's on
the same socket nodes and the same talks_to edge."""

from __future__ import annotations

import threading

import pytest
from wp_mcp.collectors import collect_snapshot
from wp_mcp.collectors.base import Context
from wp_mcp.graph import Graph

from .conftest import Peer, bpf_prog_fds

pytestmark = [pytest.mark.usefixtures("ebpf"), pytest.mark.ebpf, pytest.mark.slow]  # 10-20 s each


def test_ebpf_merges_into_the_polling_graph(peers):
    size = 2_000_000
    baseline = bpf_prog_fds()
    receiver = Peer("tcp-recv")
    peers.append(receiver)
    port = str(receiver.hello["port"])
    attached = threading.Event()
    # long enough for the sender to start and finish inside it even on a loaded machine
    ctx = Context(window_s=15.0, ebpf="on")
    ctx.progress = lambda name, phase, detail: (
        attached.set() if (name, phase) == ("ebpf", "attached") else None
    )
    result: dict[str, Graph] = {}
    worker = threading.Thread(target=lambda: result.update(graph=collect_snapshot(ctx)))
    worker.start()
    try:
        assert attached.wait(300)
        sender = Peer("tcp-send", "--port", port, "--bytes", str(size), "--hold", stdin=True)
        peers.append(sender)
        assert sender.line()["sent"] == size  # all bytes written, connection still open
        ctx.pids = {sender.pid, receiver.pid}  # read when the collectors run, after the window
    finally:
        worker.join(600)
    sender.finish()
    assert receiver.finish()["received"] == size
    graph = result["graph"]

    statuses = {s.name: s.status for s in graph.meta.collectors}
    assert statuses["ebpf"] == "ok", graph.meta.collectors
    assert graph.meta.capabilities["ebpf"]["usable"] is True
    assert bpf_prog_fds() == baseline

    [sock] = [
        graph.nodes[e.dst]
        for e in graph.out_edges(f"proc:{sender.pid}", "holds")
        if graph.nodes[e.dst].get("remote_port") == int(port)
    ]
    assert sock.source["local_port"] == "sockets"  # polling's identity kept
    assert sock.get("ebpf_bytes_sent") == size
    assert sock.get("bytes_sent") is not None  # polling's own counter stays for comparison
    links = [
        e
        for e in graph.edges("talks_to")
        if {e.src, e.dst} == {f"proc:{sender.pid}", f"proc:{receiver.pid}"}
    ]
    assert len(links) == 1, links  # one edge per pair and transport, shared by both sources
    [link] = links
    forward = link.src == f"proc:{sender.pid}"
    ebpf_sent = link.get("ebpf_bytes_src_to_dst" if forward else "ebpf_bytes_dst_to_src")
    assert ebpf_sent == size
    assert link.source["flows"] == "ipc"  # the edge polling made, eBPF's figures added
    assert link.get("bytes_src_to_dst" if forward else "bytes_dst_to_src") is not None
