"""Socket and pipe bytes: known byte counts between known processes, as eBPF sees them.

Each test starts a real receiver and sender process, moves a known number of bytes while
the eBPF programs are attached, and checks the figures per process (the sender's and the
receiver's pid), per socket (``sock:<inode>``) and per flow (the ``talks_to`` edge
between the two processes) against what the peers themselves counted, within 1 %.
"""

from __future__ import annotations

import os
import socket

import pytest

from .conftest import Peer, Window, flow_bytes

pytestmark = [pytest.mark.usefixtures("ebpf"), pytest.mark.ebpf]


def within_1pct(measured: float | None, expected: float) -> bool:
    return measured is not None and abs(measured - expected) <= 0.01 * expected


def socket_of(graph, pid: int, proto: str):
    """The one socket of ``proto`` the process moved bytes on."""
    sockets = [
        graph.nodes[e.dst]
        for e in graph.out_edges(f"proc:{pid}", "holds")
        if graph.nodes[e.dst].get("proto") == proto
        and graph.nodes[e.dst].get("ebpf_bytes_sent", 0)
        + graph.nodes[e.dst].get("ebpf_bytes_received", 0)
    ]
    assert len(sockets) == 1, sockets
    return sockets[0]


def check_pair(graph, sender: Peer, receiver: Peer, proto: str, sent: int, received: int):
    proc_s, proc_r = graph.nodes[f"proc:{sender.pid}"], graph.nodes[f"proc:{receiver.pid}"]
    assert within_1pct(proc_s.get("ebpf_bytes_sent"), sent)
    assert within_1pct(proc_r.get("ebpf_bytes_received"), received)
    assert within_1pct(socket_of(graph, sender.pid, proto).get("ebpf_bytes_sent"), sent)
    assert within_1pct(socket_of(graph, receiver.pid, proto).get("ebpf_bytes_received"), received)
    assert within_1pct(flow_bytes(graph, sender.pid, receiver.pid, proto), sent)
    assert proc_s.source["ebpf_bytes_sent"] == "ebpf"


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_tcp_bytes_per_process_socket_and_flow(peers, host):
    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    size = 20_000_000
    with Window() as window:
        receiver = Peer("tcp-recv", "--host", host)
        peers.append(receiver)
        port = str(receiver.hello["port"])
        sender = Peer("tcp-send", "--host", host, "--port", port, "--bytes", str(size))
        peers.append(sender)
        assert sender.finish()["sent"] == size
        received = receiver.finish()["received"]
        graph = window.collect()
    assert received == size
    check_pair(graph, sender, receiver, "tcp", size, size)
    sock = socket_of(graph, sender.pid, "tcp")
    assert (sock.get("remote_addr"), sock.get("remote_port")) == (host, int(port))
    assert sock.get("family") == ("inet6" if ":" in host else "inet")


def test_udp_bytes_per_process_socket_and_flow(peers):
    count, size = 4000, 1200
    with Window() as window:
        receiver = Peer("udp-recv")
        peers.append(receiver)
        port = str(receiver.hello["port"])
        sender = Peer("udp-send", "--port", port, "--count", str(count), "--size", str(size))
        peers.append(sender)
        sent = sender.finish()["sent"]
        received = receiver.finish()["received"] + len(b"end")  # the end marker is data too
        graph = window.collect()
    assert sent == count * size + 3
    check_pair(graph, sender, receiver, "udp", sent, received)


def test_unix_bytes_per_process_socket_and_flow(peers, tmp_path):
    size = 10_000_000
    path = str(tmp_path / "peer.sock")
    with Window() as window:
        receiver = Peer("unix-recv", "--path", path)
        peers.append(receiver)
        sender = Peer("unix-send", "--path", path, "--bytes", str(size))
        peers.append(sender)
        assert sender.finish()["sent"] == size
        received = receiver.finish()["received"]
        graph = window.collect()
    assert received == size
    check_pair(graph, sender, receiver, "unix", size, size)
    assert socket_of(graph, sender.pid, "unix").get("unix_type") == "stream"


def test_short_lived_processes_are_added_with_their_sockets(peers):
    """Both peers exited before collection: eBPF still knows who moved the bytes."""
    with Window() as window:
        receiver = Peer("tcp-recv")
        peers.append(receiver)
        sender = Peer("tcp-send", "--port", str(receiver.hello["port"]), "--bytes", "100000")
        peers.append(sender)
        sender.finish()
        receiver.finish()
        graph = window.collect()
    node = graph.nodes[f"proc:{sender.pid}"]
    assert node.get("name") == "python" or node.get("name", "").startswith("python")
    assert node.source["pid"] == "ebpf"
    assert window.outcome.status == "ok"


def test_pipe_bytes_per_process_pipe_and_flow(peers):
    size = 10_000_000
    read_end, write_end = os.pipe()
    inode = os.fstat(read_end).st_ino
    with Window() as window:
        reader = Peer("pipe-read", pass_fd=read_end)
        writer = Peer("pipe-write", "--bytes", str(size), pass_fd=write_end)
        peers.extend([reader, writer])
        os.close(read_end)
        os.close(write_end)  # the writer's copy is the last: its close ends the reader
        assert writer.finish()["sent"] == size
        assert reader.finish()["received"] == size
        graph = window.collect()
    pipe = graph.nodes[f"pipe:{inode}"]
    assert (pipe.get("ebpf_bytes_written"), pipe.get("ebpf_bytes_read")) == (size, size)
    # per process: this pipe plus the JSON lines the peer writes to its stdout (a pipe too)
    assert within_1pct(graph.nodes[f"proc:{writer.pid}"].get("ebpf_pipe_bytes_written"), size)
    assert within_1pct(graph.nodes[f"proc:{reader.pid}"].get("ebpf_pipe_bytes_read"), size)
    assert flow_bytes(graph, writer.pid, reader.pid, "pipe") == size
