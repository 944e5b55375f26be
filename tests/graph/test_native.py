"""The native format: exact round trips, strict reading with one clear error line."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wp_mcp.graph import FormatError, Graph, native, witty
from wp_mcp.graph.formats import load_any
from wp_mcp.graph.store import Store
from wp_testdata import WITTY_GRAPH


def test_witty_fixture_native_round_trip_is_identical(tmp_path):
    graph = witty.load_witty(WITTY_GRAPH)
    path = native.dump(graph, tmp_path / "g.json")
    again = native.load(path)
    assert native.dumps(again) == native.dumps(graph)
    # and witty -> native -> witty keeps every field
    original = orjson.loads(WITTY_GRAPH.read_bytes())
    back = witty.to_witty(again)
    canon = lambda items: sorted(orjson.dumps(i, option=orjson.OPT_SORT_KEYS) for i in items)  # noqa: E731
    assert canon(back["nodes"]) == canon(original["nodes"])
    assert canon(back["edges"]) == canon(original["edges"])


def test_gzip_files_are_read_and_written(tmp_path):
    graph = witty.load_witty(WITTY_GRAPH)
    path = native.dump(graph, tmp_path / "g.json.gz")
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert native.dumps(load_any(path)) == native.dumps(graph)


def test_document_keeps_the_published_key_names():
    doc = orjson.loads(native.dumps(witty.load_witty(WITTY_GRAPH)))
    assert list(doc) == ["format", "version", "meta", "nodes", "edges"]
    assert (doc["format"], doc["version"]) == ("wp-graph", 1)
    assert all({"id", "kind"} <= set(n) for n in doc["nodes"])
    assert all({"src", "dst", "kind"} <= set(e) for e in doc["edges"])


def test_unknown_attributes_survive(tmp_path):
    graph = Graph()
    graph.add("process", "proc:1", pid=1, vendor_hint={"x": [1, 2]}, source="test")
    graph.add("gizmo", "gizmo:1", colour="blue")
    graph.link("uses_device", "proc:1", "gizmo:1", via="/dev/gizmo0", lanes=4)
    again = native.loads(native.dumps(graph))
    assert again.node("proc:1").get("vendor_hint") == {"x": [1, 2]}
    assert again.node("proc:1").source == {"pid": "test", "vendor_hint": "test"}
    assert again.node("gizmo:1").get("colour") == "blue"
    (edge,) = again.out_edges("proc:1")
    assert (edge.via, edge.get("lanes")) == ("/dev/gizmo0", 4)


# ---------------------------------------------------------------- bad input

VALID = {"format": "wp-graph", "version": 1, "meta": {}, "nodes": [], "edges": []}


def _doc(**changes):
    return orjson.dumps({**VALID, **changes})


BAD_INPUTS = {
    "truncated": (orjson.dumps(VALID)[:-7], "not valid JSON: unexpected end of data"),
    "empty": (b"", "file is empty"),
    "garbage": (bytes(range(256)) * 4, "not valid JSON"),
    "deep": (b"[" * 10000 + b"]" * 10000, "nested too deeply"),
    "unknown format": (
        orjson.dumps({"format": "graphml-ish", "nodes": []}),
        "unknown graph format 'graphml-ish'",
    ),
    "not a graph": (b"[1, 2, 3]", "not a graph file"),
    "wrong version": (_doc(version=7), "version 7 is not supported"),
    "wrong type": (
        _doc(nodes=[{"id": "proc:1", "kind": "process", "pid": "one"}]),
        "nodes[0].pid: input should be a valid integer",
    ),
    "missing field": (
        _doc(nodes=[{"id": "proc:1", "kind": "process"}]),
        "nodes[0].pid: field required",
    ),
    "nodes not a list": (_doc(nodes={"a": 1}), "'nodes' must be a list"),
    "dangling edge": (
        _doc(
            nodes=[{"id": "proc:1", "kind": "process", "pid": 1}],
            edges=[{"src": "proc:1", "dst": "proc:2", "kind": "parent_of"}],
        ),
        "edges[0] (parent_of): dst 'proc:2' is not a node",
    ),
    "duplicate id": (
        _doc(nodes=[{"id": "numa:0", "kind": "numa_node", "numa_id": 0}] * 2),
        "nodes[1]: duplicate node id 'numa:0'",
    ),
    "witty edge without ends": (
        orjson.dumps(
            {"nodes": [], "edges": [{"edge_type": "OwnEdge", "source_node": {"entity_type": "X"}}]}
        ),
        "has no 'target_node' entity",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_gives_one_clear_error(tmp_path, name):
    data, expected = BAD_INPUTS[name]
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    with pytest.raises(FormatError) as error:
        load_any(path)
    message = str(error.value)
    assert message.startswith(str(path)) and expected in message
    assert "\n" not in message and len(message) < 300


def test_a_2gb_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:  # sparse: costs no disk
        handle.truncate(2 * 1024**3)
    with pytest.raises(FormatError, match="over the 1024 MiB limit"):
        load_any(path)


def test_a_gzip_bomb_is_refused(tmp_path):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b"[" + b" " * (8 * 1024 * 1024) + b"]"))
    with pytest.raises(FormatError, match="decompresses to over"):
        native.load(path, max_bytes=1024 * 1024)


@pytest.mark.parametrize("name", ["truncated", "garbage", "deep", "dangling edge", "wrong type"])
def test_cli_exits_2_and_stores_nothing(tmp_path, store_dir, name):
    data, expected = BAD_INPUTS[name]
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    result = subprocess.run(
        [sys.executable, "-m", "wp_mcp", "import", str(path)],
        capture_output=True, text=True, env={**os.environ, "WP_MCP_STORE": str(store_dir)},
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wp-mcp: error: ") and expected in lines[0]
    assert Store(store_dir).list() == []


# ---------------------------------------------------------------- property tests

_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_scalars = (
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | _names
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=6,
)
_extra = st.dictionaries(st.from_regex(r"x_[a-z]{1,6}", fullmatch=True), _values, max_size=3)


@st.composite
def graphs(draw):
    graph = Graph()
    pids = draw(st.lists(st.integers(1, 10**6), unique=True, min_size=1, max_size=12))
    for pid in pids:
        graph.add(
            "process",
            f"proc:{pid}",
            pid=pid,
            name=draw(_names),
            cpu_pct=draw(st.floats(0, 6400)),
            **draw(_extra),
        )
        for tid in draw(st.lists(st.integers(10**6 + 1, 2 * 10**6), unique=True, max_size=3)):
            if f"thr:{tid}" not in graph:
                graph.add("thread", f"thr:{tid}", tid=tid, pid=pid, **draw(_extra))
                graph.link("has_thread", f"proc:{pid}", f"thr:{tid}")
    for node in range(draw(st.integers(0, 3))):
        graph.add("numa_node", f"numa:{node}", numa_id=node, cpulist=f"{node * 4}-{node * 4 + 3}")
    processes = graph.of_kind("process")
    for a, b in draw(
        st.lists(st.tuples(st.sampled_from(processes), st.sampled_from(processes)), max_size=6)
    ):
        graph.link(
            "talks_to",
            a.id,
            b.id,
            transport=draw(st.sampled_from(["tcp", "unix", "pipe"])),
            bytes=draw(st.integers(0, 2**40)),
        )
    return graph


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_native_round_trip_property(graph):
    data = native.dumps(graph)
    assert native.dumps(native.loads(data)) == data


_entity_types = st.sampled_from(
    ["ProcessEntity", "ThreadEntity", "SocketEntity", "NumaEntity", "OddEntity"]
)


@st.composite
def witty_docs(draw):
    processes = [
        {"entity_namespace": "local", "entity_type": "ProcessEntity", "details": draw(st.dictionaries(_names, _scalars, max_size=2)),
         "pid": pid, "ppid": draw(st.integers(0, 50)), "name": draw(_names), "cmdline": draw(_names)}
        for pid in draw(st.lists(st.integers(100, 10**6), unique=True, min_size=1, max_size=5))
    ]  # fmt: skip
    threads = [
        {"entity_namespace": "local", "entity_type": "ThreadEntity", "details": {}, "tid": 2 * 10**6 + i,
         "process": draw(st.sampled_from(processes)), "name": draw(_names)}
        for i in range(draw(st.integers(0, 4)))
    ]  # fmt: skip
    numas = [
        {"entity_namespace": "local", "entity_type": "NumaEntity", "details": {}, "numa_id": i,
         "cpu_set": f"{i * 8}-{i * 8 + 7}", "distance_to_all_numa": {"0": 10}}
        for i in range(draw(st.integers(0, 2)))
    ]  # fmt: skip
    odd = [
        {
            "entity_namespace": draw(st.sampled_from(["local", "remote"])),
            "entity_type": "OddEntity",
            "details": {},
            "v": draw(_values),
        }
    ]
    entities = processes + threads + numas + odd
    edges = []
    for _ in range(draw(st.integers(0, 6))):
        src, dst = draw(st.sampled_from(entities)), draw(st.sampled_from(entities))
        edge_type = draw(st.sampled_from(["OwnEdge", "RunOnEdge", "StrangeEdge", "NumaAccessEdge"]))
        edges.append({"edge_type": edge_type, "weight": draw(st.none() | st.floats(0, 1)), "extra": draw(_values),
                      "source_node": src, "target_node": dst})  # fmt: skip
    return {"nodes": entities, "edges": edges}


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(witty_docs())
def test_witty_native_witty_property(doc):
    graph = native.loads(native.dumps(witty.from_witty(doc)))
    back = witty.to_witty(graph)
    canon = lambda items: sorted(orjson.dumps(i, option=orjson.OPT_SORT_KEYS) for i in items)  # noqa: E731
    # identical entities collapse (identity is recomputed), nothing else changes
    assert canon(back["nodes"]) == sorted(set(canon(doc["nodes"])))
    assert canon(back["edges"]) == canon(doc["edges"])
