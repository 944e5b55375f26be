"""The network judgement on built graphs: a sender held back by a buffer gets the sysctl
that lifts it, sized from the bandwidth-delay product and set in the namespace of the end
that owns the buffer; a shaper holding a rank link's queue is the cause and RTT behind it
is not called CPU delay; joined cross-host flows are judged as network; NIC counters count
over the window. Live versions of these run on real veth/tc links in test_network_live.py."""

from __future__ import annotations

from wp_mcp.collectors.cluster import merge_hosts
from wp_mcp.graph import Graph, ids

from .builders import process, tcp_socket, two_node_host
from .test_skills_rules import limited, outcome, shaped


def test_a_small_receive_buffer_is_fixed_in_the_receiving_namespace_from_the_bdp():
    (finding,) = outcome(limited(45.0)(), "L4.window-limited")
    # the cause is the receiving end's buffer: its socket is the subject, the ranks named
    assert finding.subject == "sock:9001" and finding.priority == "P1"
    assert "proc:201" in finding.title and "proc:200" in finding.title
    assert "4,608 B" in finding.title and "45 %" in finding.title
    # 10 Gbit/s assumed for a veth (said so) × 2 ms: 2.5 MB; twice that, rounded up to a
    # power of two, above the kernel's 6 MiB default
    assert "bandwidth-delay product 2,500,000 B" in finding.action and "assumed" in finding.action
    assert (
        finding.command == 'ip netns exec job-rx sysctl -w net.ipv4.tcp_rmem="4096 131072 8388608"'
    )
    assert "per network namespace" in finding.action


def test_the_bdp_takes_a_shaper_s_rate_on_the_path_and_never_sizes_below_the_default():
    graph = limited(45.0)()
    graph.nodes["nic:veth1@12"].set("qdisc_rate_bytes_per_s", 250_000.0)
    graph.nodes["sock:9002"].set("rtt_ms", 200.0)
    (finding,) = outcome(graph, "L4.window-limited")
    assert "bandwidth-delay product 50,000 B (2.0 Mbit/s, the shaper's rate" in finding.action
    assert finding.command.endswith('tcp_rmem="4096 131072 6291456"')


def test_a_full_send_buffer_is_fixed_with_tcp_wmem_where_the_sender_lives():
    graph = limited(0.0)()
    sender = graph.nodes["sock:9002"]
    sender.set("window_sndbuf_limited_pct", 60.0)
    sender.set("sndbuf_bytes", 8192)
    (finding,) = outcome(graph, "L4.window-limited")
    assert finding.subject == "sock:9002" and "its send buffer (8,192 B)" in finding.title
    assert finding.command.startswith(
        'ip netns exec job-tx sysctl -w net.ipv4.tcp_wmem="4096 16384 '
    )


def test_a_large_receive_buffer_still_full_names_the_slow_reader_not_a_sysctl():
    (finding,) = outcome(limited(45.0, rcvbuf=16 << 20)(), "L4.window-limited")
    assert finding.subject == "proc:200" and "reads too slowly" in finding.title
    assert finding.command is None and "sysctl" not in finding.action


def test_an_idle_or_application_limited_flow_is_not_window_limited():
    graph = limited(90.0)()
    graph.nodes["sock:9002"].set("window_busy_pct", 3.0)
    assert outcome(graph, "L4.window-limited") == []


def test_a_shaper_at_its_ceiling_is_the_cause_named_on_the_interface_with_the_ranks():
    (finding,) = outcome(shaped(245_000)(), "L4.qdisc-limit")
    assert finding.subject == "nic:veth1@12" and finding.priority == "P1"
    assert "tbf" in finding.title and "2.0 Mbit/s" in finding.title and "98%" in finding.title
    assert "job-tx" in finding.title and "link between ranks" in finding.title
    named = {i for ev in finding.evidence for i in ev.ids}
    assert {"proc:200", "proc:201", "sock:9002"} <= named
    assert "tc -n job-tx qdisc del dev veth1 root" in finding.action
    # well under its rate the shaper holds nothing back; drops always count
    assert outcome(shaped(20_000)(), "L4.qdisc-limit") == []
    (dropping,) = outcome(shaped(20_000, drops=40)(), "L4.qdisc-limit")
    assert "dropped 40 packets" in dropping.title and dropping.priority == "P1"
    # an AQM's odd drop among many packets is how it signals, not loss
    graph = shaped(20_000, drops=40)()
    graph.nodes["nic:veth1@12"].set("qdiscs", [{"kind": "tbf", "parent": "root", "handle": "1:",
                                                "window_packets": 100_000}])  # fmt: skip
    assert outcome(graph, "L4.qdisc-limit") == []


def test_rtt_behind_a_queued_shaper_is_network_queueing_not_cpu_delay():
    """Ranks in two namespaces of one host over a veth with a tbf: the RTT is the shaper's
    queue. L6.same-host-rtt must not explain it away, L4.rtt-inflation must not skip it."""
    graph = shaped(245_000)()
    graph.nodes["sock:9002"].set("rtt_ms", 180.0)
    assert outcome(graph, "L6.same-host-rtt") == []
    (finding,) = outcome(graph, "L4.rtt-inflation")
    assert finding.subject == "sock:9002" and "tbf qdisc on nic:veth1@12" in finding.title
    assert "L4.qdisc-limit" in finding.action and finding.priority == "P2"
    # the same flow with no queue on its path: scheduling delay
    for name in ("window_qdisc_overlimits", "qdisc_backlog_bytes"):
        graph.nodes["nic:veth1@12"].set(name, 0)
    assert outcome(graph, "L4.rtt-inflation") == []
    (delay,) = outcome(graph, "L6.same-host-rtt")
    assert delay.subject == "sock:9002"


def host(name: str, ip: str, peer_ip: str, serves: bool, **flow) -> Graph:
    """One host of a pair: rank process 10 with one TCP connection to the other host."""
    graph = Graph()
    graph.meta.hosts, graph.meta.window_s = [name], 5.0
    graph.add("host", ids.host(), hostname=name)
    graph.add("process", ids.process(10), pid=10, rank=0 if serves else 1, world_size=2)
    ports = (29500, 40000) if serves else (40000, 29500)
    graph.add("socket", ids.socket_inode(100), proto="tcp", state="ESTABLISHED",
              local_addr=ip, local_port=ports[0], remote_addr=peer_ip, remote_port=ports[1],
              window_s=5.0, **flow)  # fmt: skip
    graph.add("socket", ids.socket_inode(101), proto="tcp", state="LISTEN", local_addr=ip,
              local_port=29500) if serves else None  # fmt: skip
    graph.link("holds", ids.process(10), ids.socket_inode(100))
    return graph


def test_a_joined_cross_host_flow_is_judged_as_network_not_as_one_host():
    """In a cluster graph the two ends of a connection are joined by a cross-host peer
    edge: that is no same-host flow, so its RTT is network queueing and its loss counts."""
    graph = merge_hosts({
        "a": host("a", "10.0.0.1", "10.0.0.2", True, rtt_ms=0.3, min_rtt_ms=0.1,
                  window_retrans=0, window_data_segs_out=10, retrans_total=0),
        "b": host("b", "10.0.0.2", "10.0.0.1", False, rtt_ms=40.0, min_rtt_ms=0.2,
                  window_retrans=300, window_data_segs_out=6000, retrans_total=300),
    })  # fmt: skip
    assert any(e.get("cross_host") for e in graph.edges("peer"))
    assert outcome(graph, "L6.same-host-rtt") == []
    (rtt,) = outcome(graph, "L4.rtt-inflation")
    assert rtt.subject == "b/sock:100" and "b/proc:10" in rtt.title
    (loss,) = outcome(graph, "L4.flow-retransmits")
    assert loss.subject == "b/sock:100" and loss.value == 5.0


def test_nic_errors_count_over_the_window_not_since_boot():
    graph = two_node_host()
    graph.add("nic", "nic:eth0", ifname="eth0", window_s=5.0, rx_errors=900, rx_dropped=40,
              rx_errors_per_s=0.0, tx_errors_per_s=0.0, rx_dropped_per_s=0.0,
              tx_dropped_per_s=0.0)  # fmt: skip
    assert outcome(graph, "L4.nic-errors") == []
    graph.nodes["nic:eth0"].set("rx_errors_per_s", 2.0)
    (finding,) = outcome(graph, "L4.nic-errors")
    assert (
        finding.subject == "nic:eth0" and "10 errors, 0 drops in the 5.0 s window" in finding.title
    )


def test_a_busy_lossless_loopback_flow_and_an_idle_one_are_clean():
    graph = two_node_host()
    owner = process(graph, 1)
    tcp_socket(graph, owner, 5, local_addr="127.0.0.1", remote_addr="127.0.0.1", window_s=5.0,
               window_retrans=0, window_data_segs_out=0, retrans_total=0)  # fmt: skip
    tcp_socket(graph, owner, 6, local_addr="127.0.0.1", remote_addr="127.0.0.1", window_s=5.0,
               window_retrans=2, window_data_segs_out=90_000, retrans_total=2)  # fmt: skip
    assert outcome(graph, "L4.flow-retransmits") == []


def pair(b_window: tuple[int, int], b_life: tuple[int, int]) -> Graph:
    """Hosts a and b, one rank each, one connection; b's side retransmitted ``b_window``
    (retransmissions, data segments) in the window and ``b_life`` since it opened."""
    return merge_hosts({
        "a": host("a", "10.0.0.1", "10.0.0.2", True, window_retrans=0, window_data_segs_out=5000,
                  retrans_total=0, data_segs_out=9_000_000),
        "b": host("b", "10.0.0.2", "10.0.0.1", False, window_retrans=b_window[0],
                  window_data_segs_out=b_window[1], retrans_total=b_life[0],
                  data_segs_out=b_life[1]),
    })  # fmt: skip


def test_cluster_loss_is_judged_on_each_connection_s_window_not_its_life():
    """A fresh 5 % loss after a long clean life is found on the host that sends into it; a
    loss removed before the window, however large over the life, is not."""
    (fresh,) = outcome(pair((300, 6000), (300, 50_000_000)), "L4.cluster-lossy-host")
    assert fresh.subject == "host:b" and fresh.priority == "P0"
    assert outcome(pair((0, 6000), (900_000, 9_000_000)), "L4.cluster-lossy-host") == []


def test_a_flow_between_two_addresses_of_one_namespace_never_crosses_its_interfaces():
    """The launcher's store on rank 0's own address: that traffic goes over the namespace's
    loopback, not the shaped veth that holds the address."""
    graph = shaped(245_000)()
    store = process(graph, 100)
    a = tcp_socket(graph, store, 9010, local_addr="10.0.0.1", local_port=29400,
                   remote_addr="10.0.0.1", remote_port=41000, netns=11, nic="nic:veth0@11",
                   rtt_ms=6.0, min_rtt_ms=0.01)  # fmt: skip
    b = tcp_socket(graph, "proc:200", 9011, local_addr="10.0.0.1", local_port=41000,
                   remote_addr="10.0.0.1", remote_port=29400, netns=11, nic="nic:veth0@11",
                   rtt_ms=0.02, min_rtt_ms=0.01)  # fmt: skip
    graph.link("peer", b, a)
    assert about_subject(outcome(graph, "L4.rtt-inflation"), a) == []
    assert about_subject(outcome(graph, "L6.same-host-rtt"), a) != []
    (shaper,) = outcome(graph, "L4.qdisc-limit")
    assert a not in {i for ev in shaper.evidence for i in ev.ids}


def about_subject(findings, subject):
    return [f for f in findings if f.subject == subject]


def test_a_buffer_in_the_host_s_own_namespace_is_set_there_one_elsewhere_through_its_owner():
    graph = limited(45.0)()
    # the receiver in the collector's own namespace (its interface's id has no @netns)
    graph.add("nic", "nic:eth0", ifname="eth0", netns=11)
    graph.nodes["sock:9001"].set("nic", "nic:eth0")
    (finding,) = outcome(graph, "L4.window-limited")
    assert finding.command.startswith('sysctl -w net.ipv4.tcp_rmem="4096 131072 ')
    assert "in the host's namespace" in finding.action
    # in a namespace no `ip netns` name knows: entered through the socket's owner
    graph.nodes["sock:9001"].set("netns", 99)
    (finding,) = outcome(graph, "L4.window-limited")
    assert finding.command.startswith("nsenter -t 200 -n sysctl -w net.ipv4.tcp_rmem=")
