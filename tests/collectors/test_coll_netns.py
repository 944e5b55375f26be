"""Two network namespaces joined by a veth pair, with nftables dropping ~5 % of the
sender's packets on arrival (this kernel has no netem): the snapshot shows the retransmissions on
that very flow, on its sockets and on the talks_to edge between the two processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from coll_helpers import needs_root
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.graph import ids
from wp_require import unavailable

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow, needs_root()]

RECEIVER_IP, SENDER_IP, PORT = "10.77.0.1", "10.77.0.2", 5201

RECEIVER = f"""
import socket
server = socket.create_server(("{RECEIVER_IP}", {PORT}))
print("listening", flush=True)
conn, _ = server.accept()
while conn.recv(1 << 16):
    pass
"""
SENDER = f"""
import socket, time
conn = socket.create_connection(("{RECEIVER_IP}", {PORT}))
chunk = b"d" * (1 << 16)
while True:
    conn.sendall(chunk)
    time.sleep(0.002)
"""


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@pytest.fixture
def lossy_link() -> Iterator[dict]:
    if not (shutil.which("ip") and shutil.which("nft")):
        unavailable("needs iproute2 and nftables (.ci/setup.d/20-collectors.sh installs them)")
    tag = f"wpmcp{os.getpid() % 100000}"
    rx_ns, tx_ns = f"{tag}rx", f"{tag}tx"
    procs: list[subprocess.Popen] = []
    try:
        sh("ip", "netns", "add", rx_ns)
        sh("ip", "netns", "add", tx_ns)
        sh("ip", "link", "add", f"{tag}a", "netns", rx_ns, "type", "veth", "peer", "name",
           f"{tag}b", "netns", tx_ns)  # fmt: skip
        sh("ip", "-n", rx_ns, "addr", "add", f"{RECEIVER_IP}/24", "dev", f"{tag}a")
        sh("ip", "-n", tx_ns, "addr", "add", f"{SENDER_IP}/24", "dev", f"{tag}b")
        for ns, dev in ((rx_ns, f"{tag}a"), (tx_ns, f"{tag}b")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        # drop on arrival: a drop in the sender's own output path is reported to TCP as a
        # local send failure and re-sent without counting as a retransmission
        nft = ("ip", "netns", "exec", rx_ns, "nft")
        sh(*nft, "add", "table", "ip", "wpmcp")
        sh(*nft, "add chain ip wpmcp inp { type filter hook input priority 0 ; }")
        sh(*nft, "add", "rule", "ip", "wpmcp", "inp", "ip", "saddr", SENDER_IP, "numgen",
           "random", "mod", "100", "<", "5", "counter", "drop")  # fmt: skip
        receiver = subprocess.Popen(["ip", "netns", "exec", rx_ns, sys.executable, "-c", RECEIVER],
                                    stdout=subprocess.PIPE, text=True)  # fmt: skip
        procs.append(receiver)
        assert receiver.stdout.readline().strip() == "listening"
        sender = subprocess.Popen(["ip", "netns", "exec", tx_ns, sys.executable, "-c", SENDER])
        procs.append(sender)
        time.sleep(1.5)  # let loss and retransmissions happen
        yield {"receiver": receiver.pid, "sender": sender.pid}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for ns in (tx_ns, rx_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


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
