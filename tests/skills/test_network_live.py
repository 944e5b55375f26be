"""L4.flow-retransmits on a real lossy loopback flow: a TCP stream between two processes of
this host, with nftables dropping 5 % of the packets that arrive at the receiver's port.

Loopback carries segments of up to 64 KiB, so a loss ratio guessed from bytes / 1448 ran
~40 times too low and the rule stayed quiet; it now divides the window's retransmissions by
the segments the kernel counted (tcp_info deltas).

The nftables table is named after this test's pid and deleted afterwards; the port is one
the kernel gave the receiver, so no other traffic on loopback is touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.collectors.ipc import IpcCollector
from wp_mcp.collectors.procfs import ProcfsCollector
from wp_mcp.collectors.sockets import SocketsCollector
from wp_mcp.graph import ids
from wp_mcp.skills.bottleneck_identification.network import LOSS_FLOOR, flow_loss
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
