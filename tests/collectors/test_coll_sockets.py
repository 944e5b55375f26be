"""sock_diag over real sockets of this test process: TCP (IPv4 and dual-stack IPv6),
UDP, UNIX listeners, connections and socketpairs, with peers and TCP counters."""

from __future__ import annotations

import os
import socket
import time

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.sockets import SocketsCollector
from wp_mcp.graph import Graph, ids


def inode(sock: socket.socket) -> str:
    return ids.socket_inode(os.fstat(sock.fileno()).st_ino)


@pytest.fixture
def sockets(tmp_path):
    opened: dict[str, socket.socket] = {}
    v4 = socket.create_server(("127.0.0.1", 0))
    opened["v4_client"] = socket.create_connection(v4.getsockname())
    opened["v4_server"], _ = v4.accept()
    dual = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    opened["dual_client"] = socket.create_connection(("127.0.0.1", dual.getsockname()[1]))
    opened["dual_server"], _ = dual.accept()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "ctl.sock"))
    listener.listen()
    opened["unix_client"] = socket.socket(socket.AF_UNIX)
    opened["unix_client"].connect(str(tmp_path / "ctl.sock"))
    opened["unix_server"], _ = listener.accept()
    opened["pair_a"], opened["pair_b"] = socket.socketpair()
    udp_a, udp_b = (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
    )
    udp_a.bind(("127.0.0.1", 0))
    udp_b.bind(("127.0.0.1", 0))
    udp_a.connect(udp_b.getsockname())
    udp_b.connect(udp_a.getsockname())
    opened.update(v4=v4, dual=dual, listener=listener, udp_a=udp_a, udp_b=udp_b)
    yield opened
    for sock in opened.values():
        sock.close()


def test_sockets_peers_roles_and_counters(sockets):
    collector, ctx = SocketsCollector(), Context(window_s=0.3)
    collector.begin(ctx)
    sockets["v4_client"].sendall(b"a" * 100_000)
    received = 0
    while received < 100_000:
        received += len(sockets["v4_server"].recv(1 << 17))
    time.sleep(0.3)
    graph = Graph()
    outcome = collector.collect(graph, ctx)
    assert outcome.status == "ok", outcome

    client = graph.node(inode(sockets["v4_client"]))
    assert client.proto == "tcp" and client.state == "ESTABLISHED" and client.role == "client"
    assert client.bytes_sent >= 100_000 and client.window_bytes_sent >= 100_000
    assert client.send_bytes_per_s > 0 and client.window_s >= 0.3 and client.rtt_ms is not None
    assert [n.id for n in graph.successors(client.id, "peer")] == [inode(sockets["v4_server"])]

    # an IPv4 client of a dual-stack listener pairs with its v4-mapped accepted socket
    dual_server = graph.node(inode(sockets["dual_server"]))
    assert dual_server.family == "inet6" and dual_server.remote_addr == "127.0.0.1"
    assert dual_server.role == "server"
    assert graph.successors(inode(sockets["dual_client"]), "peer")[0].id == dual_server.id
    assert graph.node(inode(sockets["dual"])).state == "LISTEN"

    unix_server = graph.node(inode(sockets["unix_server"]))
    assert unix_server.proto == "unix" and unix_server.path.endswith("ctl.sock")
    assert graph.successors(inode(sockets["unix_client"]), "peer")[0].id == unix_server.id
    assert graph.node(inode(sockets["listener"])).state == "LISTEN"
    pair = {inode(sockets["pair_a"]), inode(sockets["pair_b"])}
    pair_edges = [e for e in graph.edges("peer") if {e.src, e.dst} == pair]
    assert len(pair_edges) == 1

    udp = graph.node(inode(sockets["udp_a"]))
    assert udp.proto == "udp" and udp.remote_port == sockets["udp_b"].getsockname()[1]
    assert graph.neighbours(udp.id) == {inode(sockets["udp_b"])}
