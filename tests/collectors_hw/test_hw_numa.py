"""NUMA placement: nodes, CPU and page shares per process, locality.

A dual-socket host is built as a sysfs/procfs tree from a real ``numactl -H`` capture;
captured ``numa_maps`` and ``numactl -H`` outputs test the parsers; a real process on this
(one-node) machine checks the live path.
"""

from __future__ import annotations

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.numa import (
    NumaCollector,
    locality,
    parse_lscpu_numa,
    parse_numa_maps,
    parse_numactl_hardware,
    parse_sched_numa_faults,
)
from wp_mcp.graph import Graph

from .conftest import FakeProc, FakeSys, fixture_text

XEON = "numa_lscpu/numactl-H-xeon8468-2node-interleaved.txt"


def dual_socket(fake_sys: FakeSys) -> None:
    """The Della H100 host: 2 nodes, even CPUs on node 0, odd CPUs on node 1."""
    for node, info in parse_numactl_hardware(fixture_text(XEON)).items():
        cpulist = ",".join(map(str, info.cpus))
        fake_sys.numa_node(node, cpulist, list(info.distances.values()))


def test_numactl_capture_with_interleaved_cpus_and_distances():
    nodes = parse_numactl_hardware(fixture_text(XEON))
    assert sorted(nodes) == [0, 1]
    assert nodes[0].cpus[:3] == [0, 2, 4] and len(nodes[0].cpus) == 48
    assert nodes[1].cpus[-1] == 95
    assert nodes[0].mem_total_bytes == 515020 * 2**20
    assert nodes[1].mem_free_bytes == 489964 * 2**20
    assert nodes[0].distances == {0: 10, 1: 21}


def test_numactl_capture_with_memoryless_nodes():
    nodes = parse_numactl_hardware(
        fixture_text("numa_lscpu/numactl-hardware-epyc7401-8node-memoryless-no-distances.txt")
    )
    assert len(nodes) == 8
    assert [n for n, info in nodes.items() if info.mem_total_bytes] == [1, 5]
    assert nodes[4].cpus[:2] == [1, 9]
    assert all(not info.distances for info in nodes.values())


def test_numactl_distance_table_with_three_digit_distances():
    nodes = parse_numactl_hardware(
        fixture_text("numa_lscpu/numactl-distances-only-phytium-ft2500-16node.txt")
    )
    assert len(nodes) == 16
    assert nodes[0].distances[8] == 100
    assert nodes[10].distances == {**{n: 100 for n in range(8)}, 8: 40, 9: 30, 10: 10,
                                   11: 20, 12: 40, 13: 50, 14: 20, 15: 30}  # fmt: skip


@pytest.mark.parametrize(
    ("capture", "expected"),
    [
        # node ids 0, 2, 3 (no node 1) with util-linux's strided lists
        ("lscpu-utillinux-expected-xeonX7550-4s-3numa-stride.txt",
         {0: (32, 0, 62), 2: (16, 1, 61), 3: (16, 3, 63)}),
        # a node without CPUs (trailing spaces only)
        ("lscpu-utillinux-expected-power7-64cpu-2numa.txt", {0: (64, 0, 63), 1: (0, None, None)}),
        # the grouped layout of util-linux >= 2.38
        ("lscpu-amd-epyc9374f-2s-2numa-new-format.txt", {0: (32, 0, 31), 1: (32, 32, 63)}),
        # even/odd interleaving as comma lists
        ("lscpu-xeon8468-2s-2numa-interleaved-old-format.txt", {0: (48, 0, 94), 1: (48, 1, 95)}),
        ("dgx-a100-lscpu-grep-numa-8nodes.txt", {7: (32, 112, 255)}),
    ],
)  # fmt: skip
def test_lscpu_numa_lines(capture, expected):
    nodes = parse_lscpu_numa(fixture_text(f"numa_lscpu/{capture}"))
    for node, (count, first, last) in expected.items():
        cpus = nodes[node].cpus
        assert (len(cpus), cpus[0] if cpus else None, cpus[-1] if cpus else None) == (
            count,
            first,
            last,
        )
    if "X7550" in capture:
        assert sorted(nodes) == [0, 2, 3] and nodes[2].cpus[:3] == [1, 5, 9]


def test_numa_maps_captures():
    drepper = parse_numa_maps(fixture_text("numa_maps_sysfs/numa_maps-drepper-4node-N0-N3.txt"))
    assert set(drepper) <= {0, 1, 2, 3}
    assert drepper[2] == 2 * 4096  # only libc's "N2=2" lands on node 2
    weighted = parse_numa_maps(
        fixture_text("numa_maps_sysfs/numa_maps-weighted-interleave-2node-5to1.txt")
    )
    assert weighted[0] / weighted[1] == pytest.approx(5.0, rel=0.01)
    runner = parse_numa_maps(
        fixture_text("numa_maps_sysfs/proc-self-numa_maps-gha-runner-1node.txt")
    )
    assert list(runner) == [0]


def test_sched_numa_faults_per_node():
    text = (
        "numa_faults node=0 task_private=5 task_shared=1 group_private=0 group_shared=0\n"
        "numa_faults node=1 task_private=30 task_shared=4 group_private=0 group_shared=0\n"
    )
    assert parse_sched_numa_faults(text) == {0: 6, 1: 34}


def test_locality_is_the_probability_of_matching_nodes():
    assert locality({0: 1.0}, {0: 1.0}) == 1.0
    assert locality({0: 0.75, 1: 0.25}, {0: 0.25, 1: 0.75}) == pytest.approx(0.375)
    assert locality({0: 1.0}, {1: 1.0}) == 0.0


def test_dual_socket_process_split_across_nodes(fake_proc: FakeProc, fake_sys: FakeSys):
    dual_socket(fake_sys)
    ctx = Context(proc_root=fake_proc.root, sys_root=fake_sys.root)
    collector = NumaCollector()
    assert collector.probe(ctx) is None
    fake_proc.task(10, 10, cpu_s=1.0, cpu=0)
    fake_proc.task(10, 11, cpu_s=1.0, cpu=1)
    fake_proc.process_files(
        10, numa_maps="7f00 default anon=400 N0=100 N1=300 kernelpagesize_kB=4\n"
    )
    first = collector.sample(ctx)
    # over the window: thread 10 runs 3 s on CPU 4 (node 0), thread 11 runs 1 s on CPU 7 (node 1)
    fake_proc.task(10, 10, cpu_s=4.0, cpu=4)
    fake_proc.task(10, 11, cpu_s=2.0, cpu=7)
    graph = Graph()
    outcome = collector.emit(graph, ctx, first, collector.sample(ctx), 4.0)
    assert outcome.status == "ok"

    node0, node1 = graph.node("numa:0"), graph.node("numa:1")
    assert node0.cpulist.startswith("0,2,4") and node1.cpulist.endswith("93,95")
    assert node0.distances == {"0": 10, "1": 21}
    assert node1.mem_total_bytes == 1024 * 2**20

    proc = graph.node("proc:10")
    assert proc.numa_cpu_share == {"0": 0.75, "1": 0.25}
    assert proc.numa_page_share == {"0": 0.25, "1": 0.75}
    assert proc.numa_pages == {"0": 100, "1": 300}
    assert proc.numa_locality == pytest.approx(0.375)
    assert proc.numa_cpu_basis == "cpu_time"
    cpu_on = {e.dst: e for e in graph.out_edges("proc:10", "cpu_on")}
    assert cpu_on["numa:0"].share == 0.75 and cpu_on["numa:0"].cpu_time_s == 3.0
    mem_on = {e.dst: e for e in graph.out_edges("proc:10", "mem_on")}
    assert mem_on["numa:1"].share == 0.75 and mem_on["numa:1"].pages == 300
    assert graph.node("thr:11").numa_cpu_time == {"1": 1.0}
    assert graph.node("thr:10").cpus_used == "0,4"  # seen on CPU 0, then CPU 4


def test_idle_kernel_threads_are_not_placed(fake_proc, fake_sys):
    dual_socket(fake_sys)
    fake_proc.task(2, 2, comm="kthreadd", cpu_s=1.0, cpu=3)
    fake_proc.process_files(2, numa_maps="")
    ctx = Context(proc_root=fake_proc.root, sys_root=fake_sys.root)
    collector = NumaCollector()
    collector.probe(ctx)
    first = collector.sample(ctx)
    graph = Graph()
    collector.emit(graph, ctx, first, collector.sample(ctx), 1.0)
    assert graph.out_edges("proc:2", "cpu_on") == []


def test_idle_process_placement_counts_one_vote_per_thread(fake_proc, fake_sys):
    dual_socket(fake_sys)
    ctx = Context(proc_root=fake_proc.root, sys_root=fake_sys.root)
    for tid, cpu in ((20, 2), (21, 3), (22, 5), (23, 9)):
        fake_proc.task(20, tid, cpu_s=5.0, cpu=cpu)
    fake_proc.process_files(20, numa_maps="7f00 default anon=10 N1=10\n")
    collector = NumaCollector()
    collector.probe(ctx)
    first = collector.sample(ctx)
    graph = Graph()
    collector.emit(graph, ctx, first, collector.sample(ctx), 1.0)
    proc = graph.node("proc:20")
    assert proc.numa_cpu_basis == "placement"
    assert proc.numa_cpu_share == {"0": 0.25, "1": 0.75}
    assert proc.numa_locality == pytest.approx(0.75)


def test_balancing_hint_fault_locality_from_vmstat(fake_proc, fake_sys):
    dual_socket(fake_sys)
    fake_proc.write("sys/kernel/numa_balancing", "1\n")
    ctx = Context(proc_root=fake_proc.root, sys_root=fake_sys.root)
    collector = NumaCollector()
    collector.probe(ctx)
    fake_proc.host(numa_hint_faults=100, numa_hint_faults_local=50)
    first = collector.sample(ctx)
    fake_proc.host(numa_hint_faults=300, numa_hint_faults_local=100)
    graph = Graph()
    collector.emit(graph, ctx, first, collector.sample(ctx), 2.0)
    host = graph.node("host")
    assert host.numa_balancing is True
    assert host.numa_hint_faults_per_s == 100.0
    assert host.numa_hint_locality == 0.25
    assert graph.meta.capabilities["numa_balancing"] is True


def test_balancing_fault_counts_per_process_from_sched(fake_proc, fake_sys):
    dual_socket(fake_sys)
    fake_proc.write("sys/kernel/numa_balancing", "1\n")
    fake_proc.task(30, 30, cpu_s=1.0, cpu=0)
    fake_proc.process_files(30, numa_maps="7f00 default anon=4 N0=4\n")
    fake_proc.write(
        "30/sched",
        "numa_faults node=0 task_private=10 task_shared=2 group_private=0 group_shared=0\n"
        "numa_faults node=1 task_private=30 task_shared=0 group_private=0 group_shared=0\n",
    )
    ctx = Context(proc_root=fake_proc.root, sys_root=fake_sys.root)
    collector = NumaCollector()
    collector.probe(ctx)
    first = collector.sample(ctx)
    graph = Graph()
    collector.emit(graph, ctx, first, collector.sample(ctx), 1.0)
    assert graph.node("proc:30").numa_faults == {"0": 12, "1": 30}


def test_kernel_without_numa_is_skipped_with_a_reason(fake_sys):
    reason = NumaCollector().probe(Context(sys_root=fake_sys.root))
    assert reason and "no NUMA nodes" in reason


def test_real_process_on_this_one_node_machine(spawn):
    proc = spawn(
        """
        import time
        block = bytearray(64 * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        print("ready", flush=True)
        end = time.time() + 600
        while time.time() < end:
            pass
        """
    )
    graph = Graph()
    NumaCollector().collect(graph, Context(window_s=0.5, pids={proc.pid}))
    node = graph.node(f"proc:{proc.pid}")
    assert node.numa_cpu_share == {"0": 1.0}
    assert node.numa_cpu_basis == "cpu_time"
    assert node.numa_locality == 1.0
    assert node.numa_pages["0"] >= 64 * 2**20 // 4096
    assert graph.node("numa:0").cpulist == "0-1"
