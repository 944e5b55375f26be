"""Nodes and edges: typed attributes, extras kept, exactly what was set is written."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError
from wp_mcp.graph import Graph, native
from wp_mcp.graph.model import (
    NODE_CLASSES,
    CpuOn,
    ElementsError,
    Node,
    ProcessNode,
    make_edge,
    make_node,
    validate_edges,
    validate_nodes,
)


def test_declared_attributes_are_coerced_and_extras_kept_as_given():
    node = make_node("process", "proc:7", pid="7", cpu_pct=3, witty_note={"a": [1]})
    assert type(node) is ProcessNode
    assert node.pid == 7 and node.cpu_pct == 3.0 and isinstance(node.cpu_pct, float)
    assert node.witty_note == {"a": [1]}
    assert node.extras() == {"witty_note": {"a": [1]}}


def test_an_attribute_never_set_reads_none_and_is_not_written():
    node = make_node("process", "proc:7", pid=7)
    assert node.ppid is None and node.get("rss_bytes", 0) == 0
    assert node.attrs() == {"id": "proc:7", "kind": "process", "pid": 7}
    with pytest.raises(AttributeError):
        node.not_an_attribute  # noqa: B018  (undeclared and unset)


def test_a_value_of_the_wrong_type_is_refused_with_its_field():
    with pytest.raises(ValidationError) as info:
        make_node("process", "proc:7", pid="seven")
    assert info.value.errors()[0]["loc"] == ("pid",)
    with pytest.raises(ValidationError):
        make_node("process", "proc:7")  # pid is required for a process
    with pytest.raises(ValidationError):
        ProcessNode(id="proc:7", pid=7, kind="thread")  # a class keeps its own kind


def test_unknown_kinds_become_generic_nodes_and_edges():
    node = make_node("numa_set", "numaset:0", numa_ids=[0])
    edge = make_edge("contains", "numaset:0", "numa:0", weight=None)
    assert type(node) is Node and node.kind == "numa_set" and node.numa_ids == [0]
    assert edge.attrs() == {"src": "numaset:0", "dst": "numa:0", "kind": "contains", "weight": None}


def test_set_attributes_take_their_canonical_place_so_rewrites_are_byte_identical():
    graph = Graph()
    node = graph.add("process", "proc:1", pid=1, extra_first="x")
    node.cpu_pct = 12.5  # declared, set late: goes before the extras, after pid
    node.late_extra = 1
    node.set("ppid", 0, source="procfs")
    assert list(node.attrs()) == [
        "id", "kind", "source", "pid", "ppid", "cpu_pct", "extra_first", "late_extra",
    ]  # fmt: skip
    data = native.dumps(graph)
    assert native.dumps(native.loads(data)) == data


def test_equality_is_by_value_and_copies_share_nothing():
    a = make_node("process", "proc:1", pid=1, numa_pages={"0": 5})
    b = make_node("process", "proc:1", pid=1, numa_pages={"0": 5})
    assert a == b
    c = a.copy()
    c.numa_pages["0"] = 6
    assert a.numa_pages == {"0": 5} and a != c
    assert make_node("process", "proc:1", pid=1) != make_node("thread", "proc:1", tid=1)


def test_merging_a_node_updates_values_and_their_provenance():
    graph = Graph()
    graph.add("process", "proc:1", source="procfs", pid=1, cpu_pct=5.0)
    graph.add("process", "proc:1", source="metrics", pid=1, cpu_pct=50.0, run_delay_pct=3.0)
    node = graph.node("proc:1")
    assert node.cpu_pct == 50.0 and node.run_delay_pct == 3.0
    assert node.source == {"pid": "metrics", "cpu_pct": "metrics", "run_delay_pct": "metrics"}


def test_lists_are_validated_per_kind_and_keep_their_order():
    items = [
        {"id": "a", "kind": "zzz"},
        {"id": "b", "kind": "process", "pid": 2},
        {"id": "c", "kind": "host"},
        {"id": "d", "kind": "process", "pid": 4},
    ]
    nodes = validate_nodes(items)
    assert [n.id for n in nodes] == ["a", "b", "c", "d"]
    assert [type(n).__name__ for n in nodes] == ["Node", "ProcessNode", "HostNode", "ProcessNode"]
    edges = validate_edges([{"src": "b", "dst": "c", "kind": "cpu_on", "share": "0.5"}])
    assert type(edges[0]) is CpuOn and edges[0].share == 0.5


def test_a_bad_element_in_a_list_is_reported_at_its_original_position():
    items = [{"id": f"p{i}", "kind": "process", "pid": i} for i in range(5)]
    items.insert(3, {"id": "t", "kind": "thread", "tid": 1})
    items[4]["pid"] = [4]
    with pytest.raises(ElementsError) as info:
        validate_nodes(items)
    assert (info.value.position, info.value.field) == (4, ".pid")
    with pytest.raises(ElementsError) as info:
        validate_nodes([{"id": "a", "kind": "host"}, "not an object"])
    assert info.value.position == 1


def test_writing_is_exactly_the_set_attributes():
    graph = Graph()
    graph.add("host", "host", hostname="h", cpus=2)
    graph.add("numa_node", "numa:0", numa_id=0)
    graph.link("cpu_on", "host", "numa:0", share=1.0)
    doc = orjson.loads(native.dumps(graph))
    assert doc["nodes"] == [
        {"id": "host", "kind": "host", "hostname": "h", "cpus": 2},
        {"id": "numa:0", "kind": "numa_node", "numa_id": 0},
    ]
    assert doc["edges"] == [{"src": "host", "dst": "numa:0", "kind": "cpu_on", "share": 1.0}]


def test_set_and_path_values_a_collector_leaves_are_written_as_json():
    graph = Graph()
    graph.add("process", "proc:1", pid=1, cpus_seen={3, 1, 2}, exe=Path("/usr/bin/python3"))
    doc = orjson.loads(native.dumps(graph))
    assert doc["nodes"][0]["cpus_seen"] == [1, 2, 3]
    assert doc["nodes"][0]["exe"] == "/usr/bin/python3"


# The plain path (a run of one kind holding only exactly-typed plain values is checked in a
# few passes, not rebuilt by pydantic) must accept and refuse exactly what pydantic does.
PLAIN_CASES = [
    [{"id": "s", "kind": "socket", "proto": "tcp", "local_port": 80, "rtt_ms": 0.5, "x": [1]}],
    [{"id": "t", "kind": "thread", "tid": 3, "pid": None}],
    [{"id": "t", "kind": "thread", "tid": -3}],  # below its bound
    [{"id": "p", "kind": "process", "pid": 1, "ppid": -1}],  # an optional id below its bound
    [{"id": "t", "kind": "thread", "tid": True}],  # bool where an int belongs
    [{"id": "t", "kind": "thread", "tid": "3"}],  # coerced by pydantic: not plain
    [{"id": "s", "kind": "socket", "rtt_ms": 2}],  # int where a float belongs: coerced
    [{"id": "t", "kind": "thread"}],  # a required attribute missing
    [{"id": 5, "kind": "zzz"}],  # a generic node's id of the wrong type
    [{"id": "p", "kind": "process", "pid": 1, "numa_cpu_share": {"0": "x"}}],  # nested
    [{"id": "p", "kind": "process", "pid": 1, "source": {"pid": "procfs"}}],
    [
        {
            "id": "p",
            "kind": "process",
            "pid": 1,
            "numa_cpu_share": {"0": 0.25, "1": 0.75},
            "numa_pages": {"0": 7},
            "devices": ["/dev/nvidia0"],
        }
    ],
    [{"id": "p", "kind": "process", "pid": 1, "numa_cpu_share": {"0": 1}}],  # int: coerced
    [{"id": "p", "kind": "process", "pid": 1, "numa_pages": {"0": 0.5}}],  # float in ints
    [{"id": "p", "kind": "process", "pid": 1, "devices": ["/dev/x", 3]}],
    [{"id": "p", "kind": "process", "pid": 1, "devices": "/dev/x"}],  # not a list
    [{"id": "n", "kind": "numa_node", "numa_id": 0, "distances": {"0": 10, "1": 21}}],
]


@pytest.mark.parametrize("items", PLAIN_CASES)
def test_the_plain_path_accepts_and_refuses_what_pydantic_does(items):
    cls = NODE_CLASSES.get(items[0]["kind"], Node)
    try:
        expected = cls.list_adapter().validate_python(items)
    except ValidationError:
        expected = None
    if expected is None:
        with pytest.raises(ElementsError):
            validate_nodes(items)
    else:
        assert [n.__dict__ for n in validate_nodes(items)] == expected
        assert [type(n) for n in validate_nodes(items)] == [cls] * len(items)


def test_edges_a_large_import_builds_take_the_plain_path_and_keep_their_key_order():
    items = [{"src": "a", "dst": "b", "kind": "mem_on", "share": 0.5, "pages": 7, "z": 1}]
    items.append({"src": "a", "dst": "b", "kind": "has_thread", "key": "2"})
    edges = validate_edges(items)
    assert [e.__dict__ for e in edges] == items
    assert edges[0].__dict__ is items[0]  # wrapped, not rebuilt
    with pytest.raises(ElementsError):
        validate_edges([{"src": "a", "dst": "b", "kind": "has_thread", "key": 2}])
