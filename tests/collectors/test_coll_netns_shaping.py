"""The kernel's own reasons for a slow network, seen in the graph on real links: a sender
and a receiver in two network namespaces joined by a veth pair, with a ``tbf`` or ``htb``
shaper on the sender's end, or a small ``tcp_rmem`` in the receiver's namespace.

What is checked: the interfaces of the namespaces the job lives in are found (they are not
the collector's own), each with its qdisc, its parameters and its counters over the
window; the sender's socket names its interface; ``tcp_info``'s limited times and the
socket memory show the receive window that holds the sender back.
"""

from __future__ import annotations

import os

import netns_link
import pytest
from coll_helpers import needs_root
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.collectors.nic import NicCollector
from wp_mcp.collectors.procfs import ProcfsCollector
from wp_mcp.collectors.sockets import SocketsCollector
from wp_mcp.graph import Graph, ids

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow, needs_root()]

RECEIVER_IP, SENDER_IP, PORT = "10.78.0.1", "10.78.0.2", 5202


def collect(link: dict) -> Graph:
    ctx = Context(window_s=1.5, ebpf="off", pids={link["sender"], link["receiver"]})
    collectors = [ProcfsCollector(), SocketsCollector(), NicCollector()]
    graph = collect_snapshot(ctx, collectors)
    statuses = {s.name: s for s in graph.meta.collectors}
    assert statuses["nic"].status == "ok", statuses["nic"]
    return graph


def netns_of(pid: int) -> int:
    link = os.readlink(f"/proc/{pid}/ns/net")
    return int(link[link.index("[") + 1 : -1])


def flow_socket(graph: Graph, pid: int, remote_addr: str):
    found = [
        s
        for s in graph.successors(ids.process(pid), "holds")
        if s.kind == "socket" and s.get("remote_addr") == remote_addr
    ]
    assert len(found) == 1, found
    return found[0]


def server_socket(graph: Graph, pid: int):
    return next(
        s
        for s in graph.successors(ids.process(pid), "holds")
        if s.kind == "socket" and s.get("state") == "ESTABLISHED"
    )


def test_a_tbf_shaper_shows_its_queue_on_the_senders_interface():
    rate = ("qdisc", "add", "root", "tbf", "rate", "2mbit", "burst", "16kb", "latency", "400ms")
    with netns_link.streaming_link("wpq", RECEIVER_IP, SENDER_IP, PORT, sender_tc=(rate,)) as link:
        graph = collect(link)
    sock = flow_socket(graph, link["sender"], RECEIVER_IP)
    # the socket names the interface of its own namespace, and that interface is in the graph
    assert sock.ifname == link["ends"]["tx"]
    nic = graph.node(sock.nic)
    assert nic.ifname == link["ends"]["tx"]
    assert nic.netns == sock.get("netns") != netns_of(os.getpid())
    assert nic.netns_name == link["namespaces"]["tx"] and nic.link_kind == "veth"
    # the shaper: its kind and rate, a queue and packets held back over the window
    assert nic.qdisc == "tbf" and nic.qdisc_rate_bytes_per_s == 2_000_000 / 8
    (tbf,) = [q for q in nic.qdiscs if q["kind"] == "tbf"]
    assert tbf["parent"] == "root" and tbf["limit_bytes"] > 0
    assert nic.get("window_qdisc_overlimits") > 0 and tbf["window_packets"] > 0
    assert nic.qdisc_backlog_bytes > 0 or tbf["backlog_packets"] > 0
    # what left the interface is about what the shaper lets through, and not much more
    assert 0 < nic.tx_bytes_per_s < 1.5 * nic.qdisc_rate_bytes_per_s
    # the veth's other end, in the receiver's namespace, is the node it links to, and back
    receiver_end = graph.node(nic.link_nic)
    assert receiver_end.ifname == link["ends"]["rx"] and receiver_end.link_nic == nic.id
    receiver_netns = graph.node(ids.process(link["receiver"])).get("netns")
    assert receiver_end.netns == receiver_netns != nic.netns and receiver_end.qdisc != "tbf"
    # the loopback of that namespace is its own node, apart from the host's
    assert ids.nic(f"lo@{nic.netns}") in graph


def test_htb_classes_carry_their_rates_and_the_interface_its_ceiling():
    commands = (
        ("qdisc", "add", "root", "handle", "1:", "htb", "default", "10"),
        ("class", "add", "parent", "1:", "classid", "1:1", "htb", "rate", "4mbit", "ceil", "4mbit"),
        ("class", "add", "parent", "1:1", "classid", "1:10", "htb", "rate", "1mbit", "ceil", "3mbit"),
    )  # fmt: skip
    with netns_link.streaming_link("wph", RECEIVER_IP, SENDER_IP, PORT, sender_tc=commands) as link:
        graph = collect(link)
    nic = graph.node(flow_socket(graph, link["sender"], RECEIVER_IP).nic)
    assert nic.qdisc == "htb" and nic.qdisc_rate_bytes_per_s == 4_000_000 / 8
    (htb,) = [q for q in nic.qdiscs if q["kind"] == "htb"]
    assert htb["handle"] == "1:" and htb["default_class"] == "10"
    classes = {c["handle"]: c for c in htb["classes"]}
    assert classes["1:1"]["parent"] == "root" and classes["1:10"]["parent"] == "1:1"
    assert classes["1:10"]["rate_bytes_per_s"] == 1_000_000 / 8
    assert classes["1:10"]["ceil_bytes_per_s"] == 3_000_000 / 8
    # the traffic went through the default class, held to its ceil
    assert classes["1:10"]["window_bytes"] > 0 and classes["1:10"]["window_overlimits"] >= 0
    assert 0 < classes["1:10"]["bytes_per_s"] < 1.5 * classes["1:10"]["ceil_bytes_per_s"]


def test_a_small_receive_buffer_shows_as_receive_window_limited_time():
    with netns_link.streaming_link(
        "wpw", RECEIVER_IP, SENDER_IP, PORT, receiver_sysctls=("net.ipv4.tcp_rmem=4096 4096 4096",),
        receiver_script=netns_link.SLOW_RECEIVER,
    ) as link:  # fmt: skip
        graph = collect(link)
    sender = flow_socket(graph, link["sender"], RECEIVER_IP)
    receiver = server_socket(graph, link["receiver"])
    # the receiver's buffer is what its namespace's tcp_rmem allows, far below the default
    assert receiver.rcvbuf_bytes <= 16384
    assert sender.snd_wnd_bytes <= 16384 and sender.rcv_space_bytes > 0
    # the sender spent most of its busy time waiting for the peer's window, in the window
    assert sender.get("window_busy_ms") > 0
    assert sender.get("window_rwnd_limited_pct") > 20 and sender.rwnd_limited_pct > 20
    assert sender.get("window_sndbuf_limited_pct") < sender.get("window_rwnd_limited_pct")
    assert sender.busy_time_ms >= sender.rwnd_limited_ms > 0
