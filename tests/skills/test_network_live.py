"""The network judgement on real links. L4.flow-retransmits on a real lossy loopback flow: a
TCP stream between two processes of this host, with nftables dropping 5 % of the packets
that arrive at the receiver's port; and on veth pairs between two network namespaces (names
with this test's pid, tests/collectors/netns_link.py): a tbf shaper, a small tcp_rmem, a
drop removed before the window and one started after clean traffic.

Loopback carries segments of up to 64 KiB, so a loss ratio guessed from bytes / 1448 ran
~40 times too low and the rule stayed quiet; it now divides the window's retransmissions by
the segments the kernel counted (tcp_info deltas).

The loopback nftables table is named after this test's pid and deleted afterwards; the port is one
the kernel gave the receiver, so no other traffic on loopback is touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.collectors.ipc import IpcCollector
from wp_mcp.collectors.nic import NicCollector
from wp_mcp.collectors.procfs import ProcfsCollector
from wp_mcp.collectors.sockets import SocketsCollector
from wp_mcp.graph import Graph, ids
from wp_mcp.skills.bottleneck_identification.network import LOSS_FLOOR, LOSS_MIN_RETRANS, flow_loss
from wp_mcp.skills.rule_engine import evaluate
from wp_require import unavailable

pytestmark = [pytest.mark.root, pytest.mark.slow]

RECEIVER = """
import socket
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
while conn.recv(1 << 16):
    pass
"""
SENDER = """
import socket, sys, time
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
chunk = b"d" * (1 << 16)
while True:
    conn.sendall(chunk)
    time.sleep(0.002)
"""
MSS_GUESS = 1448  # what the old estimate assumed a segment carries


def nft(*args: str) -> None:
    subprocess.run(["nft", *args], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def lossy_loopback_stream(loss_pct: int) -> Iterator[dict]:
    """A receiver and a sender on 127.0.0.1; ``loss_pct`` % of the packets arriving at the
    receiver's port dropped on input (a drop on output is re-sent without counting as a
    retransmission). Yields the two processes' pids and the port."""
    if os.geteuid() != 0 or not shutil.which("nft"):
        unavailable("needs root and nftables (.ci/setup.d/20-collectors.sh installs them)")
    table = f"wpmcp_loss{os.getpid()}"
    procs: list[subprocess.Popen] = []
    made = False
    try:
        receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE,
                                    text=True)  # fmt: skip
        procs.append(receiver)
        port = int(receiver.stdout.readline())
        nft("add", "table", "ip", table)
        made = True
        nft("add", "chain", "ip", table, "in", "{ type filter hook input priority 0 ; }")
        if loss_pct:
            nft("add", "rule", "ip", table, "in", "iif", "lo", "tcp", "dport", str(port),
                "numgen", "random", "mod", "100", "<", str(loss_pct), "counter", "drop")  # fmt: skip
        sender = subprocess.Popen([sys.executable, "-c", SENDER, str(port)])
        procs.append(sender)
        yield {"receiver": receiver.pid, "sender": sender.pid, "port": port}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)
        if made:
            subprocess.run(["nft", "delete", "table", "ip", table], capture_output=True,
                           timeout=30)  # fmt: skip


def test_five_percent_loss_on_a_loopback_flow_is_found_from_real_segment_counts():
    with lossy_loopback_stream(5) as flow:
        ctx = Context(window_s=2.0, pids={os.getpid()}, ebpf="off")
        graph = collect_snapshot(ctx, [ProcfsCollector(), SocketsCollector(), IpcCollector()])
    sender = ids.process(flow["sender"])
    (sock,) = [s for s in graph.successors(sender, "holds") if s.get("remote_port") == flow["port"]]
    loss = flow_loss(sock)
    assert loss is not None and loss.segments > 0
    retrans, segments = loss.real, loss.segments
    # loopback segments are far larger than an Ethernet MSS: bytes / 1448 would count many
    # times the segments really sent, and dilute the ratio below the rule's floor
    assert sock.get("window_bytes_sent") / MSS_GUESS > 10 * segments
    assert retrans / segments >= LOSS_FLOOR, (retrans, segments)
    findings = next(o.result for o in evaluate(graph) if o.rule.id == "L4.flow-retransmits")
    (finding,) = [f for f in findings if f.subject == sock.id]
    # two plain processes, not ranks: P1; the evidence names the sender and the receiver
    assert finding.priority == "P1" and ids.process(flow["sender"]) in finding.title
    holders = {i for ev in finding.evidence if ev.kind == "edge" for i in ev.ids}
    assert {sender, ids.process(flow["receiver"])} <= holders


# --------------------------------------------------------------------------- veth links


def _netns_link():
    """tests/collectors/netns_link.py: two namespaces over a veth pair, shapers, drops."""
    folder = str(Path(__file__).resolve().parents[1] / "collectors")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import netns_link

    return netns_link


RX_IP, TX_IP, PORT = "10.79.0.1", "10.79.0.2", 5203


def diagnose_link(link: dict, window_s: float = 2.0) -> tuple[Graph, dict[str, list]]:
    ctx = Context(window_s=window_s, ebpf="off", pids={link["sender"], link["receiver"]})
    collectors = [ProcfsCollector(), SocketsCollector(), NicCollector(), IpcCollector()]
    graph = collect_snapshot(ctx, collectors)
    return graph, {o.rule.id: o.result for o in evaluate(graph)}


def sender_socket(graph: Graph, link: dict):
    (sock,) = [s for s in graph.successors(ids.process(link["sender"]), "holds")
               if s.kind == "socket" and s.get("remote_addr") == RX_IP]  # fmt: skip
    return sock


def about(findings, subject: str) -> list:
    return [f for f in findings if f.subject == subject] if isinstance(findings, list) else []


def test_a_shaper_on_the_link_is_its_ceiling_and_its_queue_is_not_cpu_delay():
    """A tbf at 2 Mbit/s on the sender's veth end: the shaper is the finding's subject, and
    the RTT its queue adds is network queueing on that flow, never scheduling delay."""
    rate = ("qdisc", "add", "root", "tbf", "rate", "2mbit", "burst", "16kb", "latency", "400ms")
    link_cm = _netns_link().streaming_link("wps", RX_IP, TX_IP, PORT, sender_tc=(rate,))
    with link_cm as link:
        graph, results = diagnose_link(link)
    sock = sender_socket(graph, link)
    (shaper,) = about(results["L4.qdisc-limit"], sock.get("nic"))
    assert "tbf" in shaper.title and "2.0 Mbit/s" in shaper.title
    assert link["namespaces"]["tx"] in shaper.title and ids.process(link["sender"]) in shaper.title
    assert f"tc -n {link['namespaces']['tx']} qdisc del dev {link['ends']['tx']}" in shaper.action
    assert about(results["L6.same-host-rtt"], sock.id) == []
    (queued,) = about(results["L4.rtt-inflation"], sock.id)
    assert "tbf qdisc" in queued.title


def test_a_small_receive_buffer_is_fixed_with_tcp_rmem_in_the_receivers_namespace():
    with _netns_link().streaming_link(
        "wpb", RX_IP, TX_IP, PORT, receiver_sysctls=("net.ipv4.tcp_rmem=4096 4096 4096",),
        receiver_script=_netns_link().SLOW_RECEIVER,
    ) as link:  # fmt: skip
        graph, results = diagnose_link(link)
    sock = sender_socket(graph, link)
    (receiver,) = [
        p.id for p in graph.successors(sock.id, "peer") + graph.predecessors(sock.id, "peer")
    ]
    (limited,) = about(results["L4.window-limited"], receiver)
    assert "receive window" in limited.title and ids.process(link["sender"]) in limited.title
    namespace = link["namespaces"]["rx"]
    assert limited.command.startswith(
        f'ip netns exec {namespace} sysctl -w net.ipv4.tcp_rmem="4096 131072 '
    )
    assert "bandwidth-delay product" in limited.action


def test_loss_is_judged_in_the_window_a_removed_drop_is_clean_a_fresh_one_is_found():
    """The same connection: 10 % dropped for two seconds, then the drop removed before the
    window (its lifetime counters keep the loss, the window has none); later, after clean
    traffic, the drop again (the window has it, whatever the clean life before)."""
    netns_link = _netns_link()
    with netns_link.streaming_link("wpl", RX_IP, TX_IP, PORT) as link:
        with netns_link.receiver_drops(link["namespaces"]["rx"], TX_IP, 10):
            time.sleep(2.0)
        time.sleep(1.5)  # the last recoveries of that loss end before the window
        graph, results = diagnose_link(link)
        before = sender_socket(graph, link)
        assert before.get("retrans_total") > LOSS_MIN_RETRANS  # it did lose, before
        assert about(results["L4.flow-retransmits"], before.id) == []
        time.sleep(2.0)  # clean traffic
        with netns_link.receiver_drops(link["namespaces"]["rx"], TX_IP, 10):
            time.sleep(0.5)
            graph, results = diagnose_link(link)
    sock = sender_socket(graph, link)
    (finding,) = about(results["L4.flow-retransmits"], sock.id)
    assert finding.value >= LOSS_FLOOR * 100 and "window" in finding.title


def test_a_clean_loopback_stream_and_idle_sockets_give_no_network_p0_p1():
    """Loopback between two processes, with nothing dropping: segments of 64 KiB, delayed
    ACKs on a busy CPU, idle listeners — no L4 finding at P0/P1."""
    with lossy_loopback_stream(0) as flow:
        ctx = Context(window_s=2.0, pids={flow["sender"], flow["receiver"]}, ebpf="off")
        graph = collect_snapshot(ctx, [ProcfsCollector(), SocketsCollector(), NicCollector(),
                                       IpcCollector()])  # fmt: skip
    serious = [f for o in evaluate(graph) if o.rule.layer == 4 and isinstance(o.result, list)
               for f in o.result if f.priority in ("P0", "P1")]  # fmt: skip
    assert serious == []


def test_a_cpu_starved_loopback_stream_is_no_network_loss():
    """Sender and receiver share CPU 0 with two busy loops that outrank them: ACKs come
    late, timers and probes fire, and what they resend the peer had already (DSACKs). The
    link loses nothing: no L4 finding at P0/P1; the starvation is layer 6's to name."""
    hogs: list[subprocess.Popen] = []
    try:
        with lossy_loopback_stream(0) as flow:
            for pid in (flow["sender"], flow["receiver"]):
                os.sched_setaffinity(pid, {0})
            for _ in range(2):
                hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                             preexec_fn=lambda: (os.sched_setaffinity(0, {0}),
                                                                 os.nice(-5))))  # fmt: skip
            time.sleep(1.0)
            ctx = Context(window_s=2.0, pids={flow["sender"], flow["receiver"]}, ebpf="off")
            graph = collect_snapshot(ctx, [ProcfsCollector(), SocketsCollector(), NicCollector(),
                                           IpcCollector()])  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    sender = ids.process(flow["sender"])
    (sock,) = [s for s in graph.successors(sender, "holds") if s.get("remote_port") == flow["port"]]
    assert sock.get("window_data_segs_out") > 0  # it did send, starved
    serious = [f for o in evaluate(graph) if o.rule.layer == 4 and isinstance(o.result, list)
               for f in o.result if f.priority in ("P0", "P1")]  # fmt: skip
    assert serious == [], [f.title for f in serious]
