"""Every rule of the 7-layer engine fires on a graph with its problem and stays quiet on the
same graph without it; rules whose data cannot exist here say why instead of passing."""

from __future__ import annotations

import pytest
from wp_mcp.graph import Graph
from wp_mcp.skills import run_skill
from wp_mcp.skills.bottleneck_identification import RULES, evaluate
from wp_mcp.skills.bottleneck_identification.trace import TRACE_RULE_IDS

from .builders import (
    GIB,
    accepts,
    device,
    device_ranks,
    loader,
    process,
    tcp_ranks,
    tcp_socket,
    thread,
    two_node_host,
)
from .test_job_rules import stalled_loaders, stalled_rank
from .test_wait_chain import blocked_log_pipe

# --------------------------------------------------------------------------- layer 1


def steal(pct):
    return lambda: two_node_host(cpu_steal_pct=pct, virtualized="kvm")


def busy(pct):
    return lambda: two_node_host(cpu_busy_pct=pct)


def a_process(**attrs):
    """A host running one process with these attributes (a rule about one process's value)."""

    def build():
        graph = two_node_host()
        process(graph, 300, **attrs)
        return graph

    return build


def driver_thread(cpu):
    def build():
        graph = two_node_host()
        device_ranks(graph, {0: (0, {0: 1.0}), 1: (1, {1: 1.0})})
        thread(graph, 200, 2000, name="python3", cpu_pct=cpu)
        return graph

    return build


def idle_gpu(util):
    def build():
        graph = two_node_host()
        device_ranks(graph, {0: (0, {0: 1.0}), 1: (1, {1: 1.0})})
        graph.nodes["gpu:0"].util_pct = util
        graph.nodes["gpu:1"].util_pct = 95.0
        return graph

    return build


def throttled(pct):
    def build():
        graph = two_node_host()
        graph.add("container", "ctr:abc", container_id="abc", cpu_throttled_pct=pct)
        return graph

    return build


# --------------------------------------------------------------------------- layer 2


def available(gib):
    return lambda: two_node_host(mem_total_bytes=64 * GIB, mem_available_bytes=int(gib * GIB))


def swap(used, faults=0.0):
    return lambda: two_node_host(
        swap_total_bytes=8 * GIB, swap_used_bytes=used, major_faults_per_s=faults
    )


def faults(rate):
    return lambda: two_node_host(major_faults_per_s=rate)


def psi(**values):
    return lambda: two_node_host(psi=values)


def node_memory(free_gib, rss_gib):
    def build():
        graph = two_node_host()
        graph.nodes["numa:1"].mem_free_bytes = int(free_gib * GIB)
        process(graph, 300, name="bigjob", rss_bytes=int(rss_gib * GIB),
                numa_cpu_share={"1": 1.0}, numa_page_share={"1": 0.9, "0": 0.1})  # fmt: skip
        return graph

    return build


# --------------------------------------------------------------------------- layer 3


def placement(share_on_device_node):
    def build():
        graph = two_node_host()
        rest = 1 - share_on_device_node
        device_ranks(graph, {0: (0, {0: share_on_device_node, 1: rest}), 1: (1, {1: 1.0})})
        return graph

    return build


def locality(value):
    def build():
        graph = two_node_host()
        away = 1 - value
        process(graph, 300, name="server", numa_cpu_share={"0": 1.0},
                numa_page_share={"0": value, "1": away}, rss_bytes=4 * GIB)  # fmt: skip
        return graph

    return build


def pcie(speed):
    def build():
        graph = two_node_host()
        device(graph, 0, 0, link_speed_gts=speed, link_width=16, link_max_speed_gts=16.0,
               link_max_width=16, pci_bus_id="0000:17:00.0")  # fmt: skip
        return graph

    return build


def path_class(klass):
    def build():
        graph = two_node_host()
        device_ranks(graph, {0: (0, {0: 1.0}), 1: (1, {1: 1.0})})
        graph.link("path", "gpu:0", "gpu:1", path_class=klass)
        return graph

    return build


def numa_node_value(value):
    def build():
        graph = two_node_host()
        device(graph, 0, value, cpu_affinity="0-3")
        return graph

    return build


def nic_node(node):
    def build():
        graph = two_node_host()
        device_ranks(graph, {0: (0, {0: 1.0}), 1: (1, {1: 1.0})})
        graph.add("nic", "nic:eth0", ifname="eth0", numa_node=node)
        graph.add("nic", "nic:eth1", ifname="eth1", numa_node=0)
        return graph

    return build


def balancing(enabled):
    def build():
        graph = two_node_host(numa_balancing=enabled)
        process(graph, 300, cpus_allowed="4-7")
        return graph

    return build


# --------------------------------------------------------------------------- layer 4


def retrans(count, between_ranks=True, segments=8000):
    """A flow that retransmitted ``count`` of ``segments`` data segments over a 5 s window,
    after a long life of clean traffic (lifetime counters that would dilute the ratio)."""

    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph)
        owner = ranks[0] if between_ranks else process(graph, 400, name="curl")
        tcp_socket(graph, owner, 9001, local_addr="10.0.0.1", local_port=40000,
                   remote_addr="10.0.0.2", remote_port=29500, bytes_sent=10_000_000_000,
                   retrans_total=count, data_segs_out=50_000_000, window_s=5.0,
                   window_retrans=count, window_data_segs_out=segments)  # fmt: skip
        return graph

    return build


def rtt(value, remote="10.0.0.2"):
    def build():
        graph = two_node_host()
        tcp_socket(graph, process(graph, 300), 9001, rtt_ms=value, min_rtt_ms=0.2,
                   remote_addr=remote, remote_port=80)  # fmt: skip
        return graph

    return build


def limited(rwnd_pct, rcvbuf=4608):
    """Rank 0 streams to rank 1 over a veth pair whose receiving end's buffer is ``rcvbuf``;
    the sender waited for the peer's window ``rwnd_pct`` % of its busy time in the window."""

    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph)
        graph.add("nic", "nic:veth0@11", ifname="veth0", netns=11, netns_name="job-rx",
                  link_nic="nic:veth1@12")  # fmt: skip
        graph.add("nic", "nic:veth1@12", ifname="veth1", netns=12, netns_name="job-tx",
                  link_nic="nic:veth0@11")  # fmt: skip
        sender = tcp_socket(graph, ranks[1], 9002, local_addr="10.0.0.2", local_port=40000,
                            remote_addr="10.0.0.1", remote_port=29500, netns=12,
                            nic="nic:veth1@12", window_s=5.0, busy_time_ms=9000.0,
                            window_busy_pct=80.0, window_rwnd_limited_pct=rwnd_pct,
                            window_sndbuf_limited_pct=0.0, snd_wnd_bytes=2432, rtt_ms=2.0,
                            min_rtt_ms=0.05, send_bytes_per_s=1.2e6)  # fmt: skip
        receiver = tcp_socket(graph, ranks[0], 9001, local_addr="10.0.0.1", local_port=29500,
                              remote_addr="10.0.0.2", remote_port=40000, netns=11,
                              nic="nic:veth0@11", rcvbuf_bytes=rcvbuf, window_s=5.0,
                              busy_time_ms=10.0)  # fmt: skip
        graph.link("peer", sender, receiver)
        return graph

    return build


def shaped(sent_bytes_per_s, drops=0):
    """A tbf at 2 Mbit/s (250,000 B/s) on rank 1's veth end; the interface sent
    ``sent_bytes_per_s`` over the window, packets held over the rate."""

    def build():
        graph = limited(0.0)()
        graph.nodes["nic:veth1@12"].set("qdisc", "tbf")
        for name, value in (("qdisc_rate_bytes_per_s", 250_000.0), ("window_s", 5.0),
                            ("tx_bytes_per_s", float(sent_bytes_per_s)),
                            ("qdisc_backlog_bytes", 30_000), ("window_qdisc_overlimits", 900),
                            ("window_qdisc_drops", drops)):  # fmt: skip
            graph.nodes["nic:veth1@12"].set(name, value)
        return graph

    return build


def nic_counters(errors, drops):
    def build():
        graph = two_node_host()
        graph.add("nic", "nic:eth0", ifname="eth0", rx_errors=errors, tx_errors=0,
                  rx_dropped=drops, tx_dropped=0)  # fmt: skip
        return graph

    return build


def overflows(rate):
    return lambda: two_node_host(tcp_listen_overflows_per_s=rate)


def host_retrans(rate):
    return lambda: two_node_host(tcp_retrans_per_s=rate)


def backlog(queued):
    def build():
        graph = two_node_host()
        tcp_socket(graph, process(graph, 300), 9001, tx_queue=queued, remote_addr="10.0.0.2",
                   remote_port=80)  # fmt: skip
        return graph

    return build


def rdma_port(state):
    def build():
        graph = two_node_host()
        graph.add("rdma_device", "rdma:mlx5_0", ports=[{"port": 1, "state": state}])
        return graph

    return build


# --------------------------------------------------------------------------- layer 5


def disk(**attrs):
    def build():
        graph = two_node_host()
        graph.add("disk", "disk:nvme0n1", name="nvme0n1", **attrs)
        return graph

    return build


def iowait(pct):
    return lambda: two_node_host(cpu_iowait_pct=pct)


def d_state(state):
    def build():
        graph = two_node_host()
        process(graph, 300)
        thread(graph, 300, 300, state=state)
        return graph

    return build


# --------------------------------------------------------------------------- layer 6


def run_delay(delay):
    def build():
        graph = two_node_host()
        tcp_ranks(graph)
        thread(graph, 200, 200, name="python3", cpu_pct=80.0, run_delay_pct=delay)
        return graph

    return build


def preempted(rate):
    def build():
        graph = two_node_host()
        process(graph, 300)
        thread(graph, 300, 300, cpu_pct=90.0, invol_switches_per_s=rate)
        return graph

    return build


def load(value):
    return lambda: two_node_host(load1=value)


def hog(allowed):
    def build():
        graph = two_node_host()
        tcp_ranks(graph, cpus_allowed="4-5", cpu_pct=60.0)
        process(graph, 500, name="stress", cpu_pct=99.0, cpus_allowed=allowed)
        return graph

    return build


def imbalance(slow_cpu):
    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph)
        graph.nodes[ranks[0]].cpu_pct = 90.0
        graph.nodes[ranks[1]].cpu_pct = slow_cpu
        return graph

    return build


def stepping(last_share, late_share=0.4):
    """Two ranks with a step timeline: rank 1 arrives last in ``last_share`` of the steps."""

    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph, cpu_pct=50.0)
        job = {"step_job": "+".join(ranks), "step_rounds": 200, "steps_per_s": 20.0,
               "step_ms_p50": 50.0, "step_ms_p99": 60.0, "comm_share": 0.1}  # fmt: skip
        for rank, share in zip(ranks, (1 - last_share, last_share), strict=True):
            for name, value in {**job, "last_arrival_share": share, "wait_share": 0.0,
                                "late_share": late_share * share, "late_ms": 20.0}.items():  # fmt: skip
                graph.nodes[rank].set(name, value)
        return graph

    return build


def shared_pins(second):
    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph)
        graph.nodes[ranks[0]].cpus_allowed = "0-1"
        graph.nodes[ranks[1]].cpus_allowed = second
        return graph

    return build


# --------------------------------------------------------------------------- layer 7


def loaders(trainer_cpu, worker_cpu, wakeups):
    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph, count=2)
        for rank_index, rank in enumerate(ranks):
            graph.nodes[rank].cpu_pct = trainer_cpu
            for w in range(2):
                pid = 300 + 10 * rank_index + w
                loader(graph, pid, parent=200 + rank_index, cpu_pct=worker_cpu,
                       vol_switches_per_s=wakeups)  # fmt: skip
        return graph

    return build


def front_end(cpu):
    def build():
        graph = two_node_host()
        process(graph, 90, name="vllm", cmdline="vllm serve model")
        process(graph, 100, parent=90, name="engine", cmdline="python3 engine.py")
        for i in range(2):
            rank = process(graph, 200 + i, parent=100, cmdline="python3 worker.py")
            graph.link("uses_device", rank, device(graph, i, i))
        thread(graph, 90, 90, name="vllm", cpu_pct=cpu)
        accepts(graph, "proc:90", process(graph, 60, name="curl"), 8000, 900)
        graph.link("talks_to", "proc:90", "proc:100", transport="unix", bytes=1 << 20)
        return graph

    return build


def oversubscribed(workers_per_rank):
    def build():
        graph = two_node_host()
        tcp_ranks(graph, count=2)
        for rank_index in range(2):
            for w in range(workers_per_rank):
                loader(graph, 300 + 100 * rank_index + w, parent=200 + rank_index)
        return graph

    return build


def loader_node(worker_node):
    def build():
        graph = two_node_host()
        tcp_ranks(graph, count=2, numa_cpu_share={"0": 1.0})
        loader(graph, 300, parent=200, numa_cpu_share={str(worker_node): 1.0})
        return graph

    return build


def limited_cgroup(**attrs):
    """Two ranks in one cgroup with ``attrs`` (its limit and its counters over 5 s)."""

    def build():
        graph = two_node_host(cpus=8)
        ranks = tcp_ranks(graph, count=2, cpu_pct=20.0, rss_bytes=GIB)
        graph.add("cgroup", "cgroup:v2:/job", path="/job", hierarchy="v2",
                  directory="/sys/fs/cgroup/job", window_s=5.0, **attrs)  # fmt: skip
        for rank in ranks:
            graph.link("in_cgroup", rank, "cgroup:v2:/job")
        return graph

    return build


QUOTA = dict(cpu_quota_cpus=0.2, cpu_period_us=100_000, cpu_limit_file="cpu.max")
MEMORY_LIMIT = dict(memory_limit_bytes=256 << 20, memory_limit_file="memory.high",
                    memory_current_bytes=250 << 20)  # fmt: skip


def io_limit(read_bytes_per_s):
    return limited_cgroup(io_devices={"8:0": {"rbps_limit": 1 << 20,
                                              "read_bytes_per_s": read_bytes_per_s}})  # fmt: skip


# rule id → (graph where it must fire, graph where it must not)
CASES = {
    "L1.cpu-saturation": (busy(97.0), busy(60.0)),
    "L1.cpu-steal": (steal(12.0), steal(0.5)),
    "L1.driver-thread-saturated": (driver_thread(99.5), driver_thread(40.0)),
    "L1.accelerator-idle": (idle_gpu(5.0), idle_gpu(85.0)),
    "L1.container-throttled": (throttled(25.0), throttled(0.0)),
    "L1.cgroup-cpu-quota": (
        limited_cgroup(**QUOTA, cpu_throttled_periods_pct=95.0, cpu_usage_pct=20.0),
        limited_cgroup(**QUOTA, cpu_throttled_periods_pct=0.0, cpu_usage_pct=5.0),
    ),
    "L2.cgroup-memory-limit": (
        limited_cgroup(**MEMORY_LIMIT, memory_major_faults_per_s=900.0, memory_high_events=40),
        limited_cgroup(**MEMORY_LIMIT, memory_major_faults_per_s=0.0, memory_high_events=0),
    ),
    "L5.cgroup-io-limit": (io_limit(1_000_000.0), io_limit(10_000.0)),
    "L2.mem-available-low": (available(2.0), available(40.0)),
    "L2.swapping": (swap(GIB, faults=50.0), swap(0)),
    "L2.major-faults": (faults(500.0), faults(2.0)),
    "L2.psi-memory": (psi(memory_some_avg10=30.0), psi(memory_some_avg10=0.5)),
    "L2.numa-node-exhausted": (node_memory(1.0, 20.0), node_memory(16.0, 20.0)),
    "L3.device-numa-mismatch": (placement(0.1), placement(0.95)),
    "L3.remote-memory": (locality(0.1), locality(0.95)),
    "L3.pcie-downtrained": (pcie(2.5), pcie(16.0)),
    "L3.cross-socket-path": (path_class("SYS"), path_class("PIX")),
    "L3.device-numa-unknown": (numa_node_value(-1), numa_node_value(0)),
    "L3.nic-far-from-ranks": (nic_node(0), nic_node(1)),
    "L3.numa-balancing-with-binding": (balancing(True), balancing(False)),
    "L4.flow-retransmits": (retrans(400), retrans(0)),
    "L4.window-limited": (limited(45.0), limited(2.0)),
    "L4.qdisc-limit": (shaped(245_000), shaped(20_000)),
    "L4.rtt-inflation": (rtt(25.0), rtt(0.3)),
    "L6.same-host-rtt": (rtt(25.0, remote="127.0.0.1"), rtt(0.3, remote="127.0.0.1")),
    "L4.nic-errors": (nic_counters(12, 0), nic_counters(0, 0)),
    "L4.listen-overflows": (overflows(3.0), overflows(0.0)),
    "L4.host-retransmits": (host_retrans(80.0), host_retrans(0.2)),
    "L4.send-backlog": (backlog(16 << 20), backlog(0)),
    "L4.rdma-port-down": (rdma_port("DOWN"), rdma_port("ACTIVE")),
    "L5.disk-util": (disk(util_pct=99.0), disk(util_pct=10.0)),
    "L5.disk-await": (disk(await_ms=150.0), disk(await_ms=0.4)),
    "L5.iowait": (iowait(35.0), iowait(0.5)),
    "L5.d-state": (d_state("D"), d_state("S")),
    "L5.psi-io": (psi(io_some_avg10=40.0), psi(io_some_avg10=0.0)),
    "L5.disk-queue": (disk(queue_depth=128.0), disk(queue_depth=1.0)),
    "L6.run-queue-delay": (run_delay(30.0), run_delay(0.5)),
    "L6.involuntary-switches": (preempted(900.0), preempted(3.0)),
    "L6.load-over-cpus": (load(20.0), load(1.0)),
    "L6.psi-cpu": (psi(cpu_some_avg10=50.0), psi(cpu_some_avg10=1.0)),
    "L6.cpu-hog-on-rank-cpus": (hog("5"), hog("0-1")),
    "L6.rank-imbalance": (imbalance(20.0), imbalance(85.0)),
    "L6.straggler": (stepping(0.95), stepping(0.5)),
    "L6.ranks-share-cpus": (shared_pins("1-2"), shared_pins("2-3")),
    "L6.rank-stalled": (stalled_rank("T"), stalled_rank(None)),
    "L6.wait-chain": (blocked_log_pipe(0.7), blocked_log_pipe(0.05)),
    "L7.dataloader-saturated": (loaders(20.0, 99.0, 1.0), loaders(95.0, 99.0, 1.0)),
    "L7.dataloader-stalled": (stalled_loaders(True), stalled_loaders(False)),
    "L7.frontend-saturated": (front_end(100.0), front_end(30.0)),
    "L7.loader-oversubscribed": (oversubscribed(12), oversubscribed(2)),
    "L7.data-path-cross-numa": (loader_node(1), loader_node(0)),
}
# rules whose data no collector in this repo produces: they must say so, never pass
NEEDS_PMU_OR_TRACE = {
    "L1.ipc-low": "PMU",
    "L2.memory-bandwidth": "PMU",
    "L3.interconnect-bandwidth": "PMU",
    # fed by an imported training trace (tests/skills/test_trace_rules.py)
    **dict.fromkeys(TRACE_RULE_IDS, "trace"),
    # cross-host rules need a cluster graph (tests/collectors/test_cluster_rules.py)
    **dict.fromkeys(
        (
            "L1.cluster-straggler",
            "L3.cluster-placement-outlier",
            "L3.cluster-pairs-across-hosts",
            "L4.cluster-lossy-host",
        ),
        "cluster graph",
    ),
}


def outcome(graph: Graph, rule_id: str):
    return next(o.result for o in evaluate(graph) if o.rule.id == rule_id)


def test_every_rule_has_a_firing_and_a_quiet_case():
    assert {r.id for r in RULES} == set(CASES) | set(NEEDS_PMU_OR_TRACE)


def test_each_layer_has_at_least_four_rules_our_collectors_can_feed():
    for layer in range(1, 8):
        assert sum(1 for rule_id in CASES if rule_id.startswith(f"L{layer}.")) >= 4


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_on_its_problem(rule_id):
    fire, _ = CASES[rule_id]
    findings = outcome(fire(), rule_id)
    assert isinstance(findings, list) and findings, f"{rule_id} did not fire: {findings}"
    for finding in findings:
        assert finding.rule_id == rule_id and finding.layer == int(rule_id[1])
        assert finding.priority in ("P0", "P1", "P2")
        assert finding.evidence and all(ev.ids for ev in finding.evidence)
        assert finding.action and finding.threshold and finding.threshold_source
        assert finding.threshold_kind in ("published", "proposed")
        assert 0 < finding.confidence <= 1


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_is_quiet_without_its_problem(rule_id):
    _, clean = CASES[rule_id]
    assert outcome(clean(), rule_id) == []


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_without_its_data_is_not_evaluable_rather_than_clean(rule_id):
    reason = outcome(Graph(), rule_id)
    assert isinstance(reason, str) and reason


@pytest.mark.parametrize("rule_id", sorted(NEEDS_PMU_OR_TRACE))
def test_pmu_and_trace_rules_say_what_they_need(rule_id):
    reason = outcome(two_node_host(), rule_id)
    assert isinstance(reason, str)
    assert NEEDS_PMU_OR_TRACE[rule_id] in reason


def test_a_timeline_judges_stragglers_instead_of_cpu_shares():
    """With a step timeline the rank arriving last is the straggler, the rank that waits (and
    burns less CPU) is not, and L6.rank-imbalance's guess from CPU shares gives way."""
    graph = stepping(0.95)()
    ranks = sorted(n.id for n in graph.of_kind("process") if n.get("step_job"))
    graph.nodes[ranks[1]].cpu_pct = 90.0  # the late rank computes; rank 0 idles at its waits
    graph.nodes[ranks[0]].cpu_pct = 20.0
    (found,) = outcome(graph, "L6.straggler")
    assert found.subject == ranks[1] and found.impact_basis == "measured"
    assert found.impact_share == 0.38 and found.priority == "P0"
    assert "superseded by L6.straggler" in outcome(graph, "L6.rank-imbalance")
    assert isinstance(outcome(imbalance(20.0)(), "L6.rank-imbalance"), list)


def test_correct_placement_gets_no_cross_numa_finding():
    graph = placement(1.0)()
    report = run_skill("bottleneck-identification", graph)
    assert not [f for f in report.findings if f.layer == 3]
    topology = run_skill("dataflow-topology-restore", graph)
    assert topology.findings == []


def test_device_from_the_wrong_node_is_p0_and_mildly_off_is_p1():
    (wrong,) = outcome(placement(0.1)(), "L3.device-numa-mismatch")
    (mild,) = outcome(placement(0.6)(), "L3.device-numa-mismatch")
    assert (wrong.priority, mild.priority) == ("P0", "P1")
    assert wrong.command == "taskset -a -c -p 0-3 200 && migratepages 200 all 0"
    assert "numactl --physcpubind=0-3 --membind=0" in wrong.action


def test_firmware_numa_minus_one_lowers_confidence():
    graph = placement(0.1)()
    graph.nodes["gpu:0"].numa_node = -1
    graph.nodes["gpu:0"].cpu_affinity = "0-3"
    (finding,) = outcome(graph, "L3.device-numa-mismatch")
    certain = outcome(placement(0.1)(), "L3.device-numa-mismatch")[0]
    assert finding.confidence < certain.confidence
    assert finding.evidence[0].values["how"] == "cpu_affinity"


def test_vm_and_partial_coverage_lower_confidence():
    from wp_mcp.graph import CollectorStatus

    bare = outcome(retrans(400)(), "L4.flow-retransmits")[0].confidence
    graph = retrans(400)()
    graph.nodes["host"].virtualized = "kvm"
    graph.meta.collectors.append(CollectorStatus(name="sockets", status="partial", reason="x"))
    assert outcome(graph, "L4.flow-retransmits")[0].confidence < bare


def test_retransmits_between_ranks_are_p0_elsewhere_p1():
    (ranks,) = outcome(retrans(400)(), "L4.flow-retransmits")
    (other,) = outcome(retrans(400, between_ranks=False)(), "L4.flow-retransmits")
    assert (ranks.priority, other.priority) == ("P0", "P1")


def test_unpinned_busy_process_near_ranks_is_only_a_hint():
    (finding,) = outcome(hog("0-7")(), "L6.cpu-hog-on-rank-cpus")
    assert finding.priority == "P2"
    (pinned,) = outcome(hog("5")(), "L6.cpu-hog-on-rank-cpus")
    assert pinned.priority == "P0"
    assert pinned.command == "taskset -a -c -p 0-3,6-7 500"


def test_a_static_snapshot_never_judges_loss_from_lifetime_counters():
    """Counters since a connection opened say what it lost once (a drop removed minutes
    ago), not what it loses now: without a window the rule says so."""
    graph = two_node_host()
    graph.meta.window_s = None
    tcp_socket(graph, process(graph, 1), 6, retrans_total=13, data_segs_out=15)
    result = outcome(graph, "L4.flow-retransmits")
    assert isinstance(result, str) and "window" in result and "lifetime" in result


def test_flow_loss_is_judged_over_the_window_never_diluted_by_lifetime_counters():
    """400 of 8,000 segments in the window is 5 %, though 400 of the connection's 50 million
    is nothing: the window decides, and a link between ranks losing 5 % is a P0."""
    (finding,) = outcome(retrans(400)(), "L4.flow-retransmits")
    assert finding.value == 5.0 and finding.priority == "P0"
    assert "400 of 8000" in finding.title and "window" in finding.title
    (other,) = outcome(retrans(400, between_ranks=False)(), "L4.flow-retransmits")
    assert other.priority == "P1"


def windowed_flow(window_retrans, window_segments, life_retrans=0, life_segments=0, **window):
    """A rank's flow to its peer, counted over a 3 s window and over its life."""
    graph = two_node_host()
    ranks = tcp_ranks(graph)
    tcp_socket(graph, ranks[1], 9002, local_addr="10.0.0.2", local_port=33980,
               remote_addr="10.0.0.1", remote_port=29500, window_s=3.0,
               window_retrans=window_retrans, window_data_segs_out=window_segments,
               retrans_total=life_retrans + window_retrans,
               data_segs_out=life_segments + window_segments, **window)  # fmt: skip
    return graph


def test_a_loss_removed_before_the_window_gives_no_finding():
    """Minutes of 10 % loss, then the drop removed: its life says 10 %, the window says 0."""
    graph = windowed_flow(0, 9000, life_retrans=30_000, life_segments=300_000)
    assert outcome(graph, "L4.flow-retransmits") == []
    (result,) = [o for o in evaluate(graph) if o.rule.id == "L4.flow-retransmits"]
    assert not result.skipped


def test_the_same_loss_after_minutes_of_clean_traffic_is_found():
    """Ten minutes of clean traffic (50 million segments) dilute nothing: 5 % in the window."""
    (finding,) = outcome(windowed_flow(450, 9000, 0, 50_000_000), "L4.flow-retransmits")
    assert finding.value == 5.0 and finding.priority == "P0"


def test_too_few_segments_in_the_window_is_not_evaluable_with_the_count():
    """2 retransmissions in 19 segments: no ratio can be told from so few, whatever the
    connection's life says; the rule says it could not judge that flow, and how many.
    Unless the few say it beyond chance."""
    graph = windowed_flow(2, 19, life_retrans=79, life_segments=290)
    reason = outcome(graph, "L4.flow-retransmits")
    assert isinstance(reason, str) and "sock:9002" in reason
    assert "fewer than 100 data segments" in reason and "2 retransmission" in reason
    # beside a flow that was judged, the thin one is a subject the rule could not judge
    tcp_socket(graph, process(graph, 500), 9003, window_s=3.0, window_retrans=0,
               window_data_segs_out=5000, retrans_total=0)  # fmt: skip
    assert outcome(graph, "L4.flow-retransmits") == []
    (result,) = [o for o in evaluate(graph) if o.rule.id == "L4.flow-retransmits"]
    assert list(result.skipped.values()) == [["sock:9002"]]
    # 3 of 15 is as thin, but no link losing 0.5 % drops that many of so few: a flow in
    # RTO backoff on a lossy link, judged
    (sparse,) = outcome(windowed_flow(9, 21), "L4.flow-retransmits")
    assert sparse.value == round(9 / 21 * 100, 2) and sparse.priority == "P0"


def test_retransmissions_answered_by_dsacks_or_reordering_are_not_loss():
    """A CPU-starved receiver acks late: 105 retransmissions, each answered by a DSACK (the
    peer had the segment already), are no loss; neither are those a reordering explains."""
    assert outcome(windowed_flow(105, 2000, window_dsack_dups=105), "L4.flow-retransmits") == []
    assert outcome(windowed_flow(60, 2000, window_reord_seen=60), "L4.flow-retransmits") == []
    # what the DSACKs do not answer is real loss, and only that counts
    (finding,) = outcome(windowed_flow(105, 2000, window_dsack_dups=5), "L4.flow-retransmits")
    assert finding.value == 5.0 and "100 of 2000" in finding.title
    assert "5 more answered by DSACKs" in finding.title


def test_a_lossy_connection_between_two_local_ranks_is_one_finding_naming_the_worse_end():
    graph = two_node_host()
    ranks = tcp_ranks(graph)
    window = {"window_s": 5.0, "retrans_total": 0}
    a = tcp_socket(graph, ranks[0], 1, local_addr="127.0.0.1", local_port=40000,
                   remote_addr="127.0.0.1", remote_port=29500, window_retrans=40,
                   window_data_segs_out=1000, **window)  # fmt: skip
    b = tcp_socket(graph, ranks[1], 2, local_addr="127.0.0.1", local_port=29500,
                   remote_addr="127.0.0.1", remote_port=40000, window_retrans=90,
                   window_data_segs_out=1000, **window)  # fmt: skip
    graph.link("peer", a, b)
    (finding,) = outcome(graph, "L4.flow-retransmits")
    assert finding.subject == b and finding.value == 9.0 and finding.priority == "P0"
    other = [ev for ev in finding.evidence if ev.note == "the other end"]
    assert other[0].ids == [a] and other[0].values["window_retrans"] == 40


def test_a_flow_idle_over_the_window_is_judged_clean_not_skipped():
    graph = two_node_host()
    tcp_socket(graph, process(graph, 1), 6, retrans_total=500, data_segs_out=9000,
               window_s=5.0, window_retrans=0, window_data_segs_out=0)  # fmt: skip
    assert outcome(graph, "L4.flow-retransmits") == []
    (result,) = [o for o in evaluate(graph) if o.rule.id == "L4.flow-retransmits"]
    assert not result.skipped


def test_flow_loss_without_segment_counts_is_not_guessed_from_bytes():
    """An imported socket with bytes and retransmissions but no segment counts: the rule
    says it cannot judge, rather than dividing bytes by an assumed MSS."""
    graph = two_node_host()
    tcp_socket(graph, process(graph, 1), 6, retrans_total=500, bytes_sent=10_000_000)
    result = outcome(graph, "L4.flow-retransmits")
    assert isinstance(result, str) and "segment counts" in result and "sock:6" in result


def test_same_host_rtt_is_scheduling_delay_not_network_queueing():
    """A loopback flow whose RTT is 20 ms over a 0.003 ms floor: no network finding; the
    control plane names it scheduling delay, as evidence (P2), and never advises qdiscs."""
    graph = two_node_host()
    tcp_socket(graph, process(graph, 300), 9001, rtt_ms=20.0, min_rtt_ms=0.003,
               local_addr="127.0.0.1", remote_addr="127.0.0.1", remote_port=29500)  # fmt: skip
    assert outcome(graph, "L4.rtt-inflation") == []
    (finding,) = outcome(graph, "L6.same-host-rtt")
    assert finding.layer == 6 and finding.priority == "P2"
    assert "scheduling" in finding.title and "qdisc" not in finding.action


def test_a_source_skipped_for_lack_of_hardware_does_not_lower_confidence():
    from wp_mcp.graph import CollectorStatus

    bare = outcome(retrans(400)(), "L4.flow-retransmits")[0].confidence
    graph = retrans(400)()
    graph.meta.collectors.append(CollectorStatus(name="gpu", status="skipped", reason="no GPU"))
    assert outcome(graph, "L4.flow-retransmits")[0].confidence == bare


def test_a_plan_that_would_create_a_finding_is_not_offered():
    """Binding the misplaced rank to node 0 would put it on the CPUs a busy process is
    pinned to: re-diagnosis of the planned copy finds that, so no command is printed."""
    graph = placement(0.1)()
    process(graph, 300, name="indexer", cpus_allowed="0-3", cpu_pct=80.0)
    report = run_skill("bottleneck-identification", graph)
    finding = report.finding("L3.device-numa-mismatch@proc:200")
    assert finding.command is None
    assert finding.verified.startswith("not offered:")
    assert "L6.cpu-hog-on-rank-cpus@proc:300" in finding.verified
    assert "taskset" not in report.to_markdown(section="Fix plan")


def test_a_plan_that_re_diagnoses_clean_says_so():
    report = run_skill("bottleneck-identification", placement(0.1)())
    finding = report.finding("L3.device-numa-mismatch@proc:200")
    assert finding.command == "taskset -a -c -p 0-3 200 && migratepages 200 all 0"
    assert finding.verified == (
        "verified: re-diagnosis of a copy with the plan applied is clean "
        "(0 P0/P1; 1 finding resolved, none created)"
    )


def test_a_ranks_data_loaders_move_with_it():
    """Loaders forked before the fix do not inherit it: the plan moves them too, or the
    re-diagnosed copy would find them a socket away from their trainer."""
    graph = placement(0.1)()
    loader(graph, 400, parent=200, numa_cpu_share={"1": 1.0})
    report = run_skill("bottleneck-identification", graph)
    finding = report.finding("L3.device-numa-mismatch@proc:200")
    assert finding.command == (
        "taskset -a -c -p 0-3 200 && migratepages 200 all 0 && "
        "taskset -a -c -p 0-3 400 && migratepages 400 all 0"
    )
    assert "its data loaders proc:400 move with it" in finding.action
    assert finding.verified.startswith("verified:") and "hints" not in finding.verified


def test_ranks_of_two_hosts_never_share_cpus():
    """CPU 3 of one host is not CPU 3 of another: the plan pins ranks of 2 hosts to the same
    numbers, and nothing may call that an overlap."""
    from wp_mcp.skills.analysis import Analysis
    from wp_mcp.skills.plan import applied
    from wp_synthetic import cluster_graph

    graph = cluster_graph(2)
    fixed = applied(graph, Analysis(graph), Analysis(graph).bindings)
    shared = outcome(fixed, "L6.ranks-share-cpus")
    pairs = [f.subject.split("+") for f in shared] if isinstance(shared, list) else []
    assert all(a.split("/")[0] == b.split("/")[0] for a, b in pairs), pairs
    placed = run_skill("bottleneck-identification", graph).findings
    misplaced = [f for f in placed if f.rule_id == "L3.device-numa-mismatch"]
    assert misplaced and all(f.verified.startswith("verified:") for f in misplaced)


def test_a_rule_that_could_not_judge_every_subject_is_not_clean():
    graph = placement(0.9)()
    loader(graph, 400, parent=200, numa_cpu_share={"0": 1.0})
    loader(graph, 401, parent=200)  # no per-node CPU share
    report = run_skill("bottleneck-identification", graph, layers=[7])
    (layer7,) = report.sections[:1]
    assert not any("L7.data-path-cross-numa" in item for item in layer7.clean)
    (partial,) = [i for i in layer7.not_evaluable if i["rule_id"] == "L7.data-path-cross-numa"]
    assert partial["reason"] == ("not evaluated for proc:401: no per-node CPU share for the loader")


def test_a_cgroup_memory_limit_names_who_faults_and_who_holds_the_memory():
    graph = limited_cgroup(**MEMORY_LIMIT, memory_major_faults_per_s=900.0, memory_high_events=4)()
    graph.nodes["proc:201"].major_faults_per_s = 40.0
    graph.add("process", "proc:900", pid=900, name="hog", rss_bytes=4 * GIB)
    graph.link("in_cgroup", "proc:900", "cgroup:v2:/job")
    (finding,) = outcome(graph, "L2.cgroup-memory-limit")
    assert finding.subject == "cgroup:v2:/job" and finding.priority == "P1"
    assert "900 pages/s read back from disk at 98 % of it, by proc:201" in finding.title
    assert finding.title.endswith("the largest resident: proc:900 (hog) (4096 MiB)")
    assert finding.command == "echo 536870912 > /sys/fs/cgroup/job/memory.high"


def test_cgroup_cpu_and_io_limits_are_the_subject_and_their_fix_changes_the_setting():
    graph = limited_cgroup(**QUOTA, cpu_throttled_periods_pct=95.0, cpu_usage_pct=20.0)()
    (quota,) = outcome(graph, "L1.cgroup-cpu-quota")
    assert quota.subject == "cgroup:v2:/job" and quota.priority == "P0"
    assert quota.command == "echo '800000 100000' > /sys/fs/cgroup/job/cpu.max"  # 8 CPUs
    assert {"proc:200", "proc:201"} <= set(quota.evidence[1].ids)  # the victims: evidence
    (io,) = outcome(io_limit(1_000_000.0)(), "L5.cgroup-io-limit")
    assert io.subject == "cgroup:v2:/job" and "95 % of it" in io.title
    assert io.command == "echo '8:0 rbps=max' > /sys/fs/cgroup/job/io.max"
