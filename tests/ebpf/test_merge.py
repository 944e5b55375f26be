"""How eBPF records merge into a graph polling already filled (no BPF needed).

The records are what the programs' ``read`` returns; the graph holds what procfs, the
sockets collector and the ipc collector would have put there.
"""

from __future__ import annotations

from wp_mcp.collectors.ebpf import pipes, retrans, runqlat, sockbytes
from wp_mcp.collectors.ebpf.common import AF_INET, AF_UNIX
from wp_mcp.collectors.ebpf.program import Scope
from wp_mcp.collectors.ebpf.sockbytes import SocketRecord
from wp_mcp.graph import Graph

TCP, UDP = 6, 17


def tcp(ino, sk, laddr, lport, raddr, rport, by_pid):
    return SocketRecord(ino, sk, AF_INET, TCP, 1, laddr, lport, raddr, rport, by_pid=by_pid)


def polled_tcp_pair() -> Graph:
    """Client pid 10 (sock:100) connected to server pid 20 (sock:200), as polling sees it."""
    g = Graph()
    for pid in (10, 20):
        g.add("process", f"proc:{pid}", source="procfs", pid=pid, name=f"p{pid}")
    g.add("socket", "sock:100", source="sockets", proto="tcp", local_addr="127.0.0.1",
          local_port=40000, remote_addr="127.0.0.1", remote_port=5000, bytes_sent=900)  # fmt: skip
    g.add("socket", "sock:200", source="sockets", proto="tcp", local_addr="127.0.0.1",
          local_port=5000, remote_addr="127.0.0.1", remote_port=40000)  # fmt: skip
    g.link("holds", "proc:10", "sock:100", source="procfs")
    g.link("holds", "proc:20", "sock:200", source="procfs")
    g.link("talks_to", "proc:10", "proc:20", source="ipc", key="tcp", transport="tcp", bytes=950)
    return g


def test_tcp_bytes_land_on_the_polling_nodes_and_edge_both_kept():
    g = polled_tcp_pair()
    records = [
        tcp(100, 1, "127.0.0.1", 40000, "127.0.0.1", 5000, {10: [1000, 50, 3, 1]}),
        tcp(200, 2, "127.0.0.1", 5000, "127.0.0.1", 40000, {20: [50, 1000, 1, 9]}),
    ]
    sockbytes.merge(g, records, Scope(window_s=2.0))
    client = g.nodes["sock:100"]
    assert (client.get("bytes_sent"), client.get("ebpf_bytes_sent")) == (900, 1000)
    assert client.source["bytes_sent"] == "sockets"
    assert client.source["ebpf_bytes_sent"] == "ebpf"
    assert client.source["local_port"] == "sockets"  # identity stays with polling
    [edge] = list(g.edges("talks_to"))  # merged into the ipc edge, not a second one
    assert (edge.src, edge.dst, edge.get("bytes")) == ("proc:10", "proc:20", 950)
    assert edge.get("ebpf_bytes_src_to_dst") == 1000
    assert edge.get("ebpf_bytes_dst_to_src") == 50
    assert edge.get("ebpf_bytes") == 1050
    assert edge.get("ebpf_bytes_per_s") == 525.0
    assert g.nodes["proc:10"].get("ebpf_bytes_sent") == 1000
    assert g.nodes["proc:20"].get("ebpf_bytes_received") == 1000
    assert len(g.out_edges("proc:10", "holds")) == 1  # not duplicated


def test_processes_and_sockets_polling_missed_are_added():
    g = Graph()
    # a pid above the kernel's pid_max: no live process can lend its name
    records = [
        tcp(7, 1, "10.0.0.1", 41000, "10.0.0.2", 80, {4_999_999: [300, 0, 1, 0]}),
    ]
    records[0].comms[4_999_999] = "curl"
    sockbytes.merge(g, records, Scope(window_s=1.0))
    proc = g.nodes["proc:4999999"]
    assert proc.get("name") == "curl" and proc.source["pid"] == "ebpf"
    sock = g.nodes["sock:7"]
    assert (sock.get("remote_addr"), sock.get("remote_port")) == ("10.0.0.2", 80)
    assert [e.dst for e in g.out_edges("proc:4999999", "holds")] == ["sock:7"]
    assert not list(g.edges("talks_to"))  # the far end is not on this host


def test_pid_filter_keeps_only_processes_in_scope():
    g = polled_tcp_pair()
    records = [tcp(300, 3, "127.0.0.1", 1, "127.0.0.1", 2, {99: [5, 5, 1, 1]})]
    sockbytes.merge(g, records, Scope(window_s=1.0, pids={10}))
    assert "proc:99" not in g and "sock:300" not in g


def test_connected_udp_sender_pairs_with_a_bound_receiver():
    g = Graph()
    sender = SocketRecord(1, 1, AF_INET, UDP, 2, "127.0.0.1", 50000, "127.0.0.1", 6000,
                          by_pid={1: [4000, 0, 4, 0]})  # fmt: skip
    receiver = SocketRecord(2, 2, AF_INET, UDP, 2, "0.0.0.0", 6000, "0.0.0.0", 0,
                            by_pid={2: [0, 3000, 0, 3]})  # fmt: skip
    sockbytes.merge(g, [sender, receiver], Scope(window_s=1.0))
    [edge] = list(g.edges("talks_to"))
    assert (edge.src, edge.dst, edge.get("transport")) == ("proc:1", "proc:2", "udp")
    assert edge.get("ebpf_bytes_src_to_dst") == 4000


def test_unix_sockets_pair_through_their_peer_pointer():
    g = Graph()
    a = SocketRecord(11, 0xA, AF_UNIX, 0, 1, peer=0xB, by_pid={1: [10, 0, 1, 0]})
    b = SocketRecord(12, 0xB, AF_UNIX, 0, 1, peer=0xA, by_pid={2: [0, 10, 0, 1]})
    sockbytes.merge(g, [a, b], Scope(window_s=1.0))
    [edge] = list(g.edges("talks_to"))
    assert (edge.src, edge.dst, edge.get("transport")) == ("proc:1", "proc:2", "unix")
    assert g.nodes["sock:11"].get("unix_type") == "stream"


def test_a_reused_struct_sock_does_not_join_unrelated_unix_sockets():
    """Socket 13 (process 3) was given the freed struct sock of socket 12 during the window
    and points at nothing of 11's: only the pair that names each other joins."""
    g = Graph()
    a = SocketRecord(11, 0xA, AF_UNIX, 0, 1, peer=0xB, by_pid={1: [10, 0, 1, 0]})
    b = SocketRecord(12, 0xB, AF_UNIX, 0, 1, peer=0xA, by_pid={2: [0, 10, 0, 1]})
    reused = SocketRecord(13, 0xB, AF_UNIX, 0, 1, peer=0xC, by_pid={3: [0, 10, 0, 1]})
    stranger = SocketRecord(14, 0xD, AF_UNIX, 0, 1, peer=0xB, by_pid={4: [10, 0, 1, 0]})
    sockbytes.merge(g, [a, b, reused, stranger], Scope(window_s=1.0))
    assert [(e.src, e.dst) for e in g.edges("talks_to")] == [("proc:1", "proc:2")]


def test_thread_records_become_thread_attributes_under_their_process():
    g = Graph()
    g.add("process", "proc:5", source="procfs", pid=5)
    g.add("thread", "thr:6", source="procfs", tid=6, pid=5)
    g.link("has_thread", "proc:5", "thr:6")
    record = runqlat.ThreadRecord(6, 5, "worker", 500_000_000, 20_000_000, 100, 1_000_000, 120, 90)
    woken_by = {6: {7: 3_000_000, 8: 500_000}}  # thread 7 ended 3 ms of its sleep, 8 0.5 ms
    runqlat.merge(g, runqlat.Wakers([record], woken_by), Scope(window_s=2.0))
    node = g.nodes["thr:6"]
    assert node.get("ebpf_woken_by") == {"thr:7": 3.0, "thr:8": 0.5}
    assert node.get("ebpf_run_delay_ms") == 500.0
    assert node.get("ebpf_run_delay_pct") == 25.0
    assert node.get("ebpf_run_delay_max_ms") == 20.0
    assert node.get("ebpf_off_cpu_ms") == 1.0
    assert len(g.in_edges("thr:6", "has_thread")) == 1


def test_pipe_bytes_fill_the_unmeasured_polling_link_split_by_what_each_reader_read():
    g = Graph()
    for pid in (1, 2, 3):
        g.add("process", f"proc:{pid}", source="procfs", pid=pid)
    g.add("pipe", "pipe:9", source="procfs", inode=9)
    g.link("talks_to", "proc:1", "proc:2", source="ipc", key="pipe", transport="pipe",
           measured=False)  # fmt: skip
    record = pipes.PipeRecord(9, by_pid={1: [900, 0, 9, 0], 2: [0, 600, 0, 6], 3: [0, 300, 0, 3]})
    pipes.merge(g, [record], Scope(window_s=3.0))
    assert g.nodes["pipe:9"].get("ebpf_bytes_written") == 900
    to_2 = next(e for e in g.out_edges("proc:1", "talks_to") if e.dst == "proc:2")
    to_3 = next(e for e in g.out_edges("proc:1", "talks_to") if e.dst == "proc:3")
    assert (to_2.get("ebpf_bytes_src_to_dst"), to_3.get("ebpf_bytes_src_to_dst")) == (600, 300)
    assert to_2.source["measured"] == "ipc"  # polling's edge, now with eBPF's figures
    assert {e.src for e in g.in_edges("pipe:9", "holds")} == {"proc:1", "proc:2", "proc:3"}


def test_retransmissions_go_to_the_process_that_uses_the_socket_not_its_forked_child():
    """A rank and its DataLoader worker both hold the rank's socket (inherited across fork);
    the rank sent the bytes, so the flow's retransmissions are the rank's."""
    g = Graph()
    g.add("process", "proc:1", pid=1)
    g.add("process", "proc:2", pid=2, ppid=1)
    g.link("parent_of", "proc:1", "proc:2")
    g.add("socket", "sock:7", proto="tcp", inode=7)
    for holder in ("proc:1", "proc:2"):
        g.link("holds", holder, "sock:7")
    record = SocketRecord(7, 0x7, AF_INET, 6, 1, "127.0.0.1", 40000, "127.0.0.1", 5000,
                          by_pid={1: [9000, 0, 3, 0]})  # fmt: skip
    sockbytes.merge(g, [record], Scope(window_s=1.0))
    flow = retrans.RetransRecord(7, 5, "127.0.0.1", 40000, "127.0.0.1", 5000)
    retrans.merge(g, [flow], Scope(window_s=1.0))
    assert g.nodes["proc:1"].get("ebpf_retrans") == 5
    assert g.nodes["proc:2"].get("ebpf_retrans") is None
