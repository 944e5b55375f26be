"""The witty-profiler fixture imports with every fact its capture holds (vLLM TP=4, 8 NPUs)."""

from __future__ import annotations

import gc
import re

import orjson
import pytest
from wp_mcp.graph import formats, witty
from wp_mcp.graph.errors import FormatError
from wp_mcp.graph.formats import load_any
from wp_testdata import WITTY_GRAPH

WORKERS = {1895087: "npu:0", 1895088: "npu:1", 1895089: "npu:2", 1895090: "npu:3"}


@pytest.fixture(scope="module")
def graph():
    return witty.load_witty(WITTY_GRAPH)


def test_every_entity_becomes_a_node(graph):
    assert graph.kinds() == {
        "container": 1, "npu": 8, "numa_node": 8, "numa_set": 15, "process": 12,
        "socket": 44, "thread": 41,
    }  # fmt: skip


@pytest.mark.parametrize(
    "npu, numa",
    [(0, 6), (1, 6), (2, 4), (3, 4), (4, 0), (5, 0), (6, 2), (7, 2)],
)
def test_npu_numa_nodes(graph, npu, numa):
    node = graph.node(f"npu:{npu}")
    assert node.numa_node == numa
    assert [e.dst for e in graph.out_edges(node.id, "local_to")] == [f"numa:{numa}"]
    assert node.cpu_affinity == graph.node(f"numa:{numa}").cpulist


def test_npu_pci_bus_ids_and_affinity(graph):
    assert graph.node("npu:0").pci_bus_id == "0000:C1:00.0"
    assert graph.node("npu:0").cpu_affinity == "144-167"
    assert graph.node("npu:4").pci_bus_id == "0000:01:00.0"


def test_each_worker_uses_one_npu(graph):
    for pid, npu in WORKERS.items():
        assert [d.id for d in graph.successors(f"proc:{pid}", "uses_device")] == [npu]
        assert graph.node(f"proc:{pid}").name == "python3"


def test_process_tree_from_dockerd_to_the_workers(graph):
    chain = [
        "proc:6808",
        "proc:6928",
        "proc:1893666",
        "proc:1893833",
        "proc:1894499",
        "proc:1894856",
    ]
    for parent, child in zip(chain, chain[1:], strict=False):
        assert [p.id for p in graph.predecessors(child, "parent_of")] == [parent]
    assert graph.node("proc:6808").name == "dockerd"
    children = {c.id for c in graph.successors("proc:1894856", "parent_of")}
    assert children == {f"proc:{pid}" for pid in WORKERS}
    assert graph.process_family(1895087) >= set(chain)


def test_container_membership(graph):
    container = graph.node("ctr:cac9af6a")
    assert container.runtime == "docker" and container.name == "docker-cac9af6aa1ee"
    members = {e.src for e in graph.in_edges(container.id, "in_container")}
    assert members == {
        "proc:1893833", "proc:1894499", "proc:1894856", "proc:1895087", "proc:1895088",
        "proc:1895089", "proc:1895090", "proc:3821705", "proc:3821739",
    }  # fmt: skip
    assert graph.node("proc:1895087").container_id == "cac9af6a"
    assert graph.node("proc:6808").container_id is None  # dockerd runs on the host


def test_worker_numa_distributions(graph):
    worker = graph.node("proc:1895087")  # uses NPU 0 on node 6, runs on nodes 7 and 5
    assert worker.numa_cpu_share["7"] == pytest.approx(0.6883, abs=1e-4)
    assert worker.numa_cpu_share["5"] == pytest.approx(0.3009, abs=1e-4)
    assert sum(worker.numa_cpu_share.values()) == pytest.approx(1.0, abs=1e-3)
    assert worker.numa_page_share["6"] == pytest.approx(0.7747, abs=1e-4)
    assert (
        worker.numa_locality_cosine == pytest.approx(0.0636, abs=1e-3)
        or worker.numa_locality_cosine < 0.2
    )
    assert worker.numa_locality < 0.1
    cpu_on = {e.dst: e.share for e in graph.out_edges(worker.id, "cpu_on")}
    assert cpu_on["numa:7"] == pytest.approx(0.6883, abs=1e-4)
    mem_on = {e.dst: e.pages for e in graph.out_edges(worker.id, "mem_on")}
    assert mem_on["numa:6"] > 0
    # every worker runs its CPUs mostly on a node other than its NPU's
    for pid, npu in WORKERS.items():
        process = graph.node(f"proc:{pid}")
        busiest = max(process.numa_cpu_share, key=process.numa_cpu_share.get)
        assert int(busiest) != graph.node(npu).numa_node


def test_thread_cpu_and_switch_data(graph):
    threads = graph.of_kind("thread")
    assert all(t.vol_ctxt_switches is not None for t in threads)
    busiest = max(threads, key=lambda t: t.vol_ctxt_switches)
    assert (busiest.id, busiest.pid, busiest.vol_ctxt_switches) == (
        "thr:1895542",
        1895090,
        53384175392,
    )
    (seen,) = [t for t in threads if t.vol_ctxt_switches == 1147615]
    assert seen.cpus_used == "174,178-180" and seen.invol_ctxt_switches == 814
    assert seen.get("witty_process") is None  # the embedded copy is the process entity itself


def test_numa_nodes_carry_cpulists_and_distances(graph):
    node0 = graph.node("numa:0")
    assert node0.cpulist == "0-23"
    assert node0.distances == {
        "0": 10,
        "1": 11,
        "2": 24,
        "3": 25,
        "4": 24,
        "5": 25,
        "6": 24,
        "7": 25,
    }
    assert node0.mem_total_bytes == 131507688 * 1024
    assert node0.numa_stats["numa_hit"] == 664496298


def test_socket_flows_become_a_process_link(graph):
    (link,) = list(graph.edges("talks_to"))
    assert (link.src, link.dst, link.transport) == ("proc:1894499", "proc:3821739", "tcp")
    assert link.flows == 44
    sizes = [graph.node(e.dst).bytes_sent for e in graph.edges("sends_to")]
    assert link.bytes == sum(sizes) and 30006 in sizes
    assert link.window_s > 0 and link.bytes_per_s == pytest.approx(
        link.bytes / link.window_s, rel=1e-3
    )


def test_a_flow_size_that_is_no_number_counts_no_bytes():
    """A file's odd value is kept as it came, and counts for nothing (it raised ValueError)."""
    doc = orjson.loads(WITTY_GRAPH.read_bytes())
    flows = [e["data_flow"] for e in doc["edges"] if e["edge_type"] == "SendToSocketEdge"]
    flows[0]["data_size"] = "lots"
    (link,) = witty.from_witty(doc).edges("talks_to")
    assert link.flows == 44
    assert link.bytes == sum(flow["data_size"] for flow in flows[1:])


def test_export_gives_back_every_field():
    original = orjson.loads(WITTY_GRAPH.read_bytes())
    exported = witty.to_witty(witty.load_witty(WITTY_GRAPH))
    assert _canon(exported["nodes"]) == _canon(original["nodes"])
    assert _canon(exported["edges"]) == _canon(original["edges"])


def test_wrapped_form_is_accepted_and_kept(tmp_path):
    original = orjson.loads(WITTY_GRAPH.read_bytes())
    wrapped = {"env": {"host": "atlas-1"}, "content": original}
    path = tmp_path / "wrapped.json"
    path.write_bytes(orjson.dumps(wrapped))
    graph = load_any(path)
    assert graph.node("npu:3").numa_node == 4
    assert witty.to_witty(graph)["env"] == {"host": "atlas-1"}


def test_unknown_types_are_kept_with_all_fields():
    doc = {
        "nodes": [{"entity_namespace": "local", "entity_type": "FpgaEntity", "details": {}, "slot": 3}],
        "edges": [
            {
                "edge_type": "WiredToEdge", "weight": 2.5, "lanes": 16,
                "source_node": {"entity_namespace": "local", "entity_type": "FpgaEntity", "details": {}, "slot": 3},
                "target_node": {"entity_namespace": "local", "entity_type": "NumaEntity", "details": {}, "numa_id": 1},
            }
        ],
    }  # fmt: skip
    graph = witty.from_witty(doc)
    (fpga,) = graph.of_kind("witty_entity")
    assert fpga.get("slot") == 3 and fpga.get("entity_type") == "FpgaEntity"
    (edge,) = list(graph.edges("witty_edge"))
    assert edge.get("lanes") == 16 and edge.get("edge_type") == "WiredToEdge"
    back = witty.to_witty(graph)
    assert _canon(back["edges"]) == _canon(doc["edges"])
    assert doc["nodes"][0] in back["nodes"]


def _process(pid, ppid=1):
    return {"entity_type": "ProcessEntity", "pid": pid, "ppid": ppid, "name": "python3"}


def _numa(numa_id):
    return {"entity_type": "NumaEntity", "numa_id": numa_id, "cpu_set": "0-3"}


def _access(pid, numa_id, **fields):
    return {"edge_type": "AffinitativeToNuma", "source_node": _process(pid),
            "target_node": _numa(numa_id), **fields}  # fmt: skip


def test_an_edge_repeated_between_the_same_pair_is_kept_as_a_twin():
    doc = {"nodes": [], "edges": [_access(7, 0, weight=1.0), _access(7, 0, weight=2.0)]}
    edges = list(witty.from_witty(doc).edges("affine_to"))
    assert [(e.get("key"), e.get("weight")) for e in edges] == [(None, 1.0), ("2", 2.0)]


def test_a_stale_copy_of_an_entity_read_before_is_not_read_again():
    stale = _access(7, 0)
    stale["source_node"] = {**_process(7), "name": "renamed later"}
    doc = {"nodes": [_process(7)], "edges": [stale]}
    assert witty.from_witty(doc).node("proc:7").get("name") == "python3"


@pytest.mark.parametrize(
    "edges, place",
    [
        ([_access(7, 0), ["not an edge"]], "edges[1]: expected an edge object, got list"),
        ([_access(7, 0), {"source_node": _process(7)}], "edges[1]: edge has no 'edge_type'"),
        ([_access(7, 0), _access(8, 0, source_node=None)], "edges[1]: AffinitativeToNuma has no"),
        ([_access(7, 0), _access(8, 0, target_node={"numa_id": 1})], "edges[1].target_node: "),
        ([_access(7, 0), _access(-8, 0)], "edges[1].source_node: pid: input should be greater"),
    ],
)
def test_a_refused_file_names_the_element_where_it_is_wrong(edges, place):
    """The place of the edge, or of the first copy of the entity that is wrong."""
    with pytest.raises(FormatError, match=re.escape(f"<witty>: {place}")):
        witty.from_witty({"nodes": [], "edges": edges})


def test_a_file_large_by_its_size_is_imported_out_of_the_collectors_passes(monkeypatch):
    """The pass the collector would make over every new object when it runs again is saved
    (the size hint says 'large' for the 398 KB capture when a byte counts as an element)."""
    monkeypatch.setattr(formats, "BYTES_PER_ELEMENT_HINT", 1)
    try:
        graph = load_any(WITTY_GRAPH)
        walked = {id(thing) for thing in gc.get_objects()}  # every generation a pass walks
        assert gc.get_freeze_count() > 0
        assert not any(id(node) in walked for node in graph.nodes.values())
    finally:
        gc.unfreeze()


def test_a_small_file_is_left_to_the_collector():
    frozen = gc.get_freeze_count()
    load_any(WITTY_GRAPH)
    assert gc.get_freeze_count() == frozen


def _canon(items):
    return sorted(orjson.dumps(item, option=orjson.OPT_SORT_KEYS) for item in items)
