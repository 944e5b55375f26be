"""Where a device lives (firmware first, then local_to, then its CPU affinity); whose a thread
is; a node's host and NUMA neighbours; a process's devices, peers and ancestors."""

from __future__ import annotations

from wp_mcp.graph import Graph
from wp_mcp.graph.query import (
    accelerators_of,
    ancestors,
    device_numa_node,
    host_prefix,
    hosts_by_prefix,
    numa_distance,
    numa_nodes,
    talks,
    thread_owners,
)


def _host() -> Graph:
    graph = Graph()
    graph.add("numa_node", "numa:0", numa_id=0, cpulist="0-23")
    graph.add("numa_node", "numa:1", numa_id=1, cpulist="24-47")
    return graph


def test_firmware_numa_node_is_certain():
    graph = _host()
    gpu = graph.add("gpu", "gpu:0", index=0, numa_node=1)
    assert device_numa_node(graph, gpu) == (1, "numa_node", True)


def test_local_to_edge_when_firmware_is_silent():
    graph = _host()
    npu = graph.add("npu", "npu:0", index=0)
    graph.link("local_to", "npu:0", "numa:0")
    assert device_numa_node(graph, npu) == (0, "local_to", True)


def test_minus_one_falls_back_to_affinity_and_is_uncertain():
    graph = _host()
    gpu = graph.add("gpu", "gpu:1", index=1, numa_node=-1, cpu_affinity="24-35")
    assert device_numa_node(graph, gpu) == (1, "cpu_affinity", False)


def test_affinity_only_counts_the_devices_own_host():
    graph = _host()
    graph.add("numa_node", "h2/numa:5", numa_id=5, cpulist="0-47")
    gpu = graph.add("gpu", "h2/gpu:0", index=0, cpu_affinity="0-3")
    assert device_numa_node(graph, gpu) == (5, "cpu_affinity", True)


def test_nothing_known():
    graph = _host()
    assert device_numa_node(graph, graph.add("gpu", "gpu:2", index=2)) == (None, "unknown", False)


def test_a_thread_belongs_to_the_process_of_its_first_has_thread_edge_else_its_pid():
    graph = Graph()
    for pid in (1, 2, 3):
        graph.add("process", f"proc:{pid}", pid=pid)
    graph.add("container", "ctr:a", container_id="a")
    graph.add("thread", "thr:10", tid=10, pid=1)
    graph.add("thread", "thr:11", tid=11, pid=1)  # no edge: its pid names proc:1
    graph.add("thread", "thr:12", tid=12, pid=9)  # no edge, no such process: no owner
    graph.add("thread", "thr:13", tid=13, pid=1)
    graph.link("has_thread", "ctr:a", "thr:10")  # not a process: not an owner
    graph.link("has_thread", "proc:3", "thr:10")  # two processes claim it: the first edge wins
    graph.link("has_thread", "proc:2", "thr:10")
    graph.link("has_thread", "proc:2", "thr:13")
    owner, threads = thread_owners(graph)
    assert owner == {"thr:10": "proc:3", "thr:11": "proc:1", "thr:13": "proc:2"}
    assert list(owner) == ["thr:10", "thr:11", "thr:13"]  # the threads' order
    assert {p: [t.id for t in found] for p, found in threads.items()} == {
        "proc:3": ["thr:10"],
        "proc:1": ["thr:11"],
        "proc:2": ["thr:13"],
    }


def test_nodes_are_grouped_by_the_host_their_id_names():
    graph = _host()
    graph.add("host", "host", hostname="a")
    graph.add("host", "h2/host", hostname="b")
    graph.add("numa_node", "h2/numa:0", numa_id=0, cpulist="0-7", distances={"0": 10, "1": 21})
    assert host_prefix("h2/proc:4") == "h2" and host_prefix("proc:4") == ""
    assert {p: h.get("hostname") for p, h in hosts_by_prefix(graph).items()} == {"": "a", "h2": "b"}
    nodes = numa_nodes(graph)
    assert sorted(nodes[""]) == [0, 1] and nodes["h2"][0].id == "h2/numa:0"
    assert numa_distance(nodes["h2"][0], 1) == 21
    assert numa_distance(nodes[""][0], 1) is None and numa_distance(None, 1) is None


def test_a_process_sees_its_accelerators_peers_and_ancestors():
    graph = _host()
    for pid, ppid in ((1, None), (10, 1), (11, 10), (12, 10)):
        graph.add("process", f"proc:{pid}", pid=pid, ppid=ppid)
    graph.add("gpu", "gpu:0", index=0)
    graph.add("nic", "nic:eth0", name="eth0")
    graph.link("uses_device", "proc:11", "gpu:0")
    graph.link("uses_device", "proc:11", "nic:eth0")
    graph.link("talks_to", "proc:11", "proc:12", transport="tcp")
    graph.link("talks_to", "proc:1", "proc:11", transport="unix")
    assert [d.id for d in accelerators_of(graph, "proc:11")] == ["gpu:0"]
    assert [(peer, e.get("transport")) for peer, e in talks(graph, "proc:11")] == [
        ("proc:12", "tcp"),
        ("proc:1", "unix"),
    ]
    assert ancestors(graph, "proc:11") == {"proc:10", "proc:1"}  # by ppid: no parent_of edges
