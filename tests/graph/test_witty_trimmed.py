"""A witty file is read with its edges' entity copies trimmed to their key fields
(graph/witty_decode.py): the graph is the one the whole document gives, element for element
and key for key, and a file the trimmed decode does not describe is read whole."""

from __future__ import annotations

import orjson
import pytest
from wp_mcp.graph import formats, native, witty, witty_decode
from wp_mcp.graph.errors import FormatError
from wp_mcp.graph.rawio import parse_json
from wp_synthetic import scaled_capture, witty_document
from wp_testdata import WITTY_GRAPH

ORIGIN = "capture.json"


def read_whole(data: bytes):
    return formats._load_doc(parse_json(data, ORIGIN), ORIGIN)


def read_trimmed(data: bytes):
    return witty.read_trimmed(data, ORIGIN, min_bytes=0)


@pytest.fixture
def load_file(tmp_path, monkeypatch):
    """``load_any`` of a file holding ``data``, named ORIGIN as the readers above name it,
    trimmed whatever its size."""
    monkeypatch.setattr(witty, "TRIMMED_MIN_BYTES", 0)

    def load(data: bytes):
        path = tmp_path / ORIGIN
        path.write_bytes(data)
        return formats.load_any(path, redact=False)

    return load


def written(graph) -> bytes:
    """The graph as stored, with each element's attribute order, which JSON equality hides."""
    order = [list(n.attrs()) for n in graph.nodes.values()] + [
        list(e.attrs()) for e in graph.edges()
    ]
    return native.dumps(graph) + orjson.dumps(order)


def assert_read_alike(data: bytes) -> None:
    trimmed = read_trimmed(data)
    assert trimmed is not None, "the trimmed decode should have read this file"
    assert written(trimmed) == written(read_whole(data))


def small_capture() -> dict:
    return orjson.loads(WITTY_GRAPH.read_bytes())


def test_the_capture_reads_alike_trimmed_and_whole():
    assert_read_alike(WITTY_GRAPH.read_bytes())


def test_a_capture_scaled_with_fresh_identities_reads_alike():
    assert_read_alike(orjson.dumps(scaled_capture(small_capture(), target_mb=1.2)))


def test_a_generated_graph_reads_alike():
    assert_read_alike(orjson.dumps(witty_document(target_mb=0.3, seed=3)))


def test_the_wrapped_form_reads_alike():
    assert_read_alike(orjson.dumps({"env": {"host": "atlas-1"}, "content": small_capture()}))


def test_a_copy_without_its_ppid_finds_the_process_whose_ppid_is_null():
    doc = small_capture()
    process = next(n for n in doc["nodes"] if n["entity_type"] == "ProcessEntity")
    process["ppid"] = None
    for edge in doc["edges"]:
        for end in ("source_node", "target_node"):
            if edge[end].get("pid") == process["pid"]:
                edge[end] = {k: v for k, v in edge[end].items() if k != "ppid"}
    assert_read_alike(orjson.dumps(doc))


def test_edges_kept_generic_read_alike():
    """An unknown edge type, and an access type from the other kind of source (whose type
    export could not tell), keep their witty type."""
    doc = small_capture()
    thread_access = next(e for e in doc["edges"] if e["edge_type"] == "AccessWithProcStatusEdge")
    process_access = next(e for e in doc["edges"] if e["edge_type"] == "NumaAccessEdge")
    doc["edges"] += [
        {**thread_access, "edge_type": "NumaAccessEdge"},
        {**process_access, "edge_type": "AccessWithProcStatusEdge"},
        {**process_access, "edge_type": "MigratedToEdge"},
    ]
    assert_read_alike(orjson.dumps(doc))
    generic = read_trimmed(orjson.dumps(doc)).edges(witty.GENERIC_EDGE_KIND)
    assert [e.get("edge_type") for e in generic][-3:] == [
        "NumaAccessEdge",
        "AccessWithProcStatusEdge",
        "MigratedToEdge",
    ]


def test_load_any_reads_a_large_capture_trimmed(monkeypatch, tmp_path):
    path = tmp_path / ORIGIN
    path.write_bytes(orjson.dumps(scaled_capture(small_capture(), target_mb=2.5)))
    whole_parses = []
    monkeypatch.setattr(formats, "parse_json", lambda *a: whole_parses.append(a))
    assert len(formats.load_any(path)) > 129
    assert whole_parses == []


def test_a_small_file_is_parsed_whole_where_importing_the_decoder_would_cost_more():
    assert witty.read_trimmed(WITTY_GRAPH.read_bytes(), ORIGIN) is None


# ---------------------------------------------------------------- read whole instead


def _edge(edge_type: str, source: dict, target: dict, **fields) -> dict:
    return {"edge_type": edge_type, "weight": None, "source_node": source, "target_node": target,
            **fields}  # fmt: skip


def _process(pid: int) -> dict:
    return {"entity_type": "ProcessEntity", "pid": pid, "ppid": 1, "name": "python3"}


def _numa(numa_id: int) -> dict:
    return {"entity_type": "NumaEntity", "numa_id": numa_id, "cpu_set": "0-3"}


def _doc(nodes: list, edges: list) -> bytes:
    return orjson.dumps({"nodes": nodes, "edges": edges})


READ_WHOLE = {
    "an entity known only through an edge's copy": _doc(
        [_numa(0)], [_edge("NumaAccessEdge", _process(7), _numa(0))]
    ),
    "an edge field the format does not have": _doc(
        [_process(7), _numa(0)], [_edge("NumaAccessEdge", _process(7), _numa(0), lanes=16)]
    ),
    "an end of a type without key fields": _doc(
        [_numa(0), {"entity_type": "FpgaEntity", "slot": 3}],
        [_edge("WiredToEdge", {"entity_type": "FpgaEntity", "slot": 3}, _numa(0))],
    ),
    "a key field holding a list": _doc(
        [_numa(0), {"entity_type": "NumaSetEntity", "numa_id_str": [0]}],
        [
            _edge(
                "NumaSetContainEdge", {"entity_type": "NumaSetEntity", "numa_id_str": [0]}, _numa(0)
            )
        ],
    ),
    "a document key the format does not have": orjson.dumps(
        {"nodes": [_numa(0)], "edges": [], "captured_by": "witty 1.2"}
    ),
    "an integer beyond 64 bits": _doc([{**_numa(0), "details": {"pages": 7}}], []).replace(
        b"7", str(2**70).encode()
    ),
}


@pytest.mark.parametrize("data", READ_WHOLE.values(), ids=READ_WHOLE.keys())
def test_what_the_trimmed_decode_does_not_describe_is_read_whole(data, load_file):
    assert read_trimmed(data) is None
    assert written(load_file(data)) == written(read_whole(data))


# ---------------------------------------------------------------- refused alike

_DEEP = {"a": {}}
for _ in range(140):
    _DEEP = {"a": _DEEP}

REFUSED = {
    "a pid that is text": _doc([{**_process(7), "pid": "7x"}], []),
    "an edge without its type": _doc(
        [_process(7), _numa(0)], [{"source_node": _process(7), "target_node": _numa(0)}]
    ),
    "a copy without its key field": _doc(
        [_numa(0)], [_edge("NumaAccessEdge", {"entity_type": "ProcessEntity"}, _numa(0))]
    ),
    "a node nested too deeply": _doc([{**_numa(0), "details": _DEEP}], []),
    "a copy nested past any parser's depth": b'{"nodes": [], "edges": [{"edge_type": "x", '
    b'"source_node": {"entity_type": "NumaEntity", "numa_id": 0, "x": '
    + b"[" * 3000
    + b"]" * 3000
    + b"}}]}",
    "bytes that are not UTF-8": _doc([{**_numa(0), "name": "ok"}], []).replace(b"ok", b"\xff\xfe"),
    "an escaped lone surrogate": _doc([{**_numa(0), "name": "ok"}], []).replace(b"ok", b"\\ud800"),
    "a truncated document": _doc([_numa(0)], [])[:-5],
}


@pytest.mark.parametrize("data", REFUSED.values(), ids=REFUSED.keys())
def test_a_bad_file_is_refused_in_one_line_as_the_whole_reader_refuses_it(data, load_file):
    with pytest.raises(FormatError) as whole:
        read_whole(data)
    with pytest.raises(FormatError) as loaded:
        load_file(data)
    message = str(loaded.value)
    assert message.endswith(str(whole.value).removeprefix(ORIGIN))
    assert "\n" not in message


def test_what_is_skipped_of_a_copy_is_not_held_to_the_nesting_limit():
    """Nothing of it is kept: a copy's unread field may nest deeper than the kept parts may."""
    deep_copy = {**_numa(0), "details": _DEEP}
    data = _doc([_process(7), _numa(0)], [_edge("NumaAccessEdge", _process(7), deep_copy)])
    with pytest.raises(FormatError, match="nested too deeply"):
        read_whole(data)
    graph = read_trimmed(data)
    assert graph is not None and "details" not in graph.node("numa:0").attrs()


def test_an_edge_whose_fields_come_in_another_order_holds_the_same_values():
    """Its attributes come in the order the format writes them (the file's order is not seen)."""
    flow = {"data_size": 30006, "start_time": 1, "end_time": 2}
    socket = {"entity_type": "SocketEntity", "socket_type": "TCP", "socket_addr": "10.0.0.1",
              "socket_port": 29500}  # fmt: skip
    thread = {"entity_type": "ThreadEntity", "tid": 8, "process": _process(7)}
    edge = {"data_flow": flow, "connection_type": "TCP", "edge_type": "SendToSocketEdge",
            "target_node": socket, "source_node": thread}  # fmt: skip
    data = _doc([_process(7), thread, socket], [edge])
    (trimmed,) = read_trimmed(data).edges("sends_to")
    (whole,) = read_whole(data).edges("sends_to")
    assert trimmed == whole
    assert list(trimmed.attrs()) == ["src", "dst", "kind", "connection_type", "data_flow"]


def test_the_bad_files_above_reach_the_trimmed_decode(load_file, monkeypatch):
    """Else the comparison above would hold the whole reader to itself."""
    decoded = []
    decode = witty_decode.decode_trimmed
    monkeypatch.setattr(
        witty_decode, "decode_trimmed", lambda data: decoded.append(1) or decode(data)
    )
    for data in REFUSED.values():
        with pytest.raises(FormatError):
            load_file(data)
    assert len(decoded) == len(REFUSED)


# ---------------------------------------------------------------- validated once


def test_no_edge_class_declares_a_field_a_trimmed_edge_keeps():
    """So validation could neither refuse nor change an edge read trimmed: it is not run."""
    assert witty._trimmed_edges_valid_as_built()


def test_the_trimmed_read_validates_only_the_edges_import_derives(monkeypatch):
    validated = []
    validate = witty.validate_edges

    def recording(edges):
        validated.extend(edges)
        return validate(edges)

    monkeypatch.setattr(witty, "validate_edges", recording)
    graph = read_trimmed(WITTY_GRAPH.read_bytes())
    derived = [e for e in graph.edges() if e.get("derived") == witty.DERIVED_MARK]
    assert derived and [record["kind"] for record in validated] == [e.kind for e in derived]
