"""The store's trusted form: a graph validated when stored is read back unchecked, and reads
back exactly as the validating reader reads the same document; a damaged row is refused
with one line."""

from __future__ import annotations

import gc
import sqlite3
import subprocess
import sys
import weakref
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from test_native import graphs
from wp_mcp.graph import FormatError, Graph, gcpause, native, trusted, witty
from wp_mcp.graph.model import CollectorStatus
from wp_mcp.graph.store import DB_NAME, Store
from wp_mcp.graph.store import snapshots as store_module
from wp_mcp.server.cli import main as wp_mcp
from wp_synthetic import cluster_graph
from wp_testdata import WITTY_GRAPH


def _row(store: Store, snapshot_id: str) -> bytes:
    query = "SELECT data FROM snapshots WHERE id=?"
    return bytes(store.db.connect().execute(query, (snapshot_id,)).fetchone()[0])


def _replace_row(store_dir, snapshot_id: str, blob: bytes) -> None:
    with sqlite3.connect(store_dir / DB_NAME) as db:
        db.execute("UPDATE snapshots SET data=? WHERE id=?", (blob, snapshot_id))


def _read_both_ways(store_dir, snapshot_id: str) -> tuple[Graph, Graph]:
    """The graph through the store (trusted path) and through the validating reader."""
    store = Store(store_dir)
    validated = native.loads(trusted.stored_document(_row(store, snapshot_id)))
    return store.get(snapshot_id), validated


def assert_same_graph(read: Graph, validated: Graph) -> None:
    assert native.dumps(read) == native.dumps(validated)
    assert read.nodes == validated.nodes
    assert list(read.edges()) == list(validated.edges())
    assert list(read.kinds().items()) == list(validated.kinds().items())  # order too
    assert [read.of_kind(kind) for kind in read.kinds()] == [
        validated.of_kind(kind) for kind in validated.kinds()
    ]
    assert [type(node) for node in read.nodes.values()] == [
        type(node) for node in validated.nodes.values()
    ]
    assert [type(edge) for edge in read.edges()] == [type(edge) for edge in validated.edges()]
    for node_id in list(validated.nodes)[:50]:
        assert read.out_edges(node_id) == validated.out_edges(node_id)
        assert read.in_edges(node_id) == validated.in_edges(node_id)


def test_fixture_is_stored_trusted_and_reads_back_as_validated(tmp_path):
    graph = witty.load_witty(WITTY_GRAPH)
    snapshot_id = Store(tmp_path).put(graph)
    assert _row(Store(tmp_path), snapshot_id).startswith(trusted.TAG)
    read, validated = _read_both_ways(tmp_path, snapshot_id)
    assert_same_graph(read, validated)
    assert native.dumps(read) == native.dumps(graph)


def test_a_trusted_row_is_read_without_validating_or_checking(tmp_path, monkeypatch):
    snapshot_id = Store(tmp_path).put(witty.load_witty(WITTY_GRAPH))

    def refuse(*args, **kwargs):
        raise AssertionError("the validating reader ran")

    monkeypatch.setattr(native, "from_dict", refuse)
    monkeypatch.setattr(trusted, "check_graph", refuse)
    assert len(Store(tmp_path).get(snapshot_id)) == len(witty.load_witty(WITTY_GRAPH))


@pytest.mark.parametrize("seed", [0, 1])
def test_generated_cluster_reads_back_as_validated(tmp_path, seed):
    snapshot_id = Store(tmp_path).put(cluster_graph(2, accelerators_per_host=2, seed=seed))
    assert _row(Store(tmp_path), snapshot_id).startswith(trusted.TAG)
    assert_same_graph(*_read_both_ways(tmp_path, snapshot_id))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_generated_graphs_read_back_as_validated(tmp_path_factory, graph):
    store_dir = tmp_path_factory.mktemp("store")
    snapshot_id = Store(store_dir).put(graph)
    assert _row(Store(store_dir), snapshot_id).startswith(trusted.TAG)
    assert_same_graph(*_read_both_ways(store_dir, snapshot_id))


def test_a_graph_read_back_trusted_still_merges_and_removes(tmp_path):
    graph = witty.load_witty(WITTY_GRAPH)
    snapshot_id = Store(tmp_path).put(graph)
    read = Store(tmp_path).get(snapshot_id)
    edge = next(read.edges("talks_to"))
    count = read.edge_count
    merged = read.link("talks_to", edge.src, edge.dst, key=edge.key, flows=99)
    assert merged is edge and edge.flows == 99 and read.edge_count == count
    read.remove_node(edge.src)
    assert edge.src not in read and all(e.src != edge.src for e in read.edges())


@pytest.mark.parametrize("asked_before", [False, True])
def test_kinds_keep_their_order_of_appearance_however_late_first_asked(tmp_path, asked_before):
    graph = Graph()
    graph.add("process", "proc:1", pid=1)
    graph.add("host", "host:a")
    graph.add("process", "proc:2", pid=2)
    snapshot_id = Store(tmp_path).put(graph)
    read = Store(tmp_path).get(snapshot_id)  # its nodes by kind are indexed on first need
    if asked_before:
        read.kinds()
    read.remove_node("proc:1")
    read.add("container", "ctr:1", container_id="1")
    assert list(read.kinds().items()) == [("process", 1), ("host", 1), ("container", 1)]
    assert [node.id for node in read.of_kind("process")] == ["proc:2"]


@pytest.fixture
def freezing(monkeypatch):
    """Reads freeze graphs of any size; what the test froze goes back to the collector."""
    monkeypatch.setattr(gcpause, "FREEZE_MIN_ELEMENTS", 1)
    yield
    gc.unfreeze()


def test_a_large_graph_read_back_is_kept_out_of_the_collectors_passes(tmp_path, freezing):
    snapshot_id = Store(tmp_path).put(witty.load_witty(WITTY_GRAPH))
    read = Store(tmp_path).get(snapshot_id)
    walked = {id(thing) for thing in gc.get_objects()}  # every generation a pass walks
    assert gc.get_freeze_count() > 0
    assert not any(id(node) in walked for node in read.nodes.values())
    assert not any(id(edge) in walked for edge in read.edges())
    assert_same_graph(read, native.loads(native.dumps(read)))


def test_a_small_graph_read_back_is_left_to_the_collector(tmp_path):
    snapshot_id = Store(tmp_path).put(witty.load_witty(WITTY_GRAPH))
    frozen = gc.get_freeze_count()
    Store(tmp_path).get(snapshot_id)
    assert gc.get_freeze_count() == frozen


@pytest.mark.parametrize("dropped_by", ["the cache", "deleting the snapshot"])
def test_a_frozen_graph_the_store_drops_is_freed_though_a_cache_points_back(
    tmp_path, freezing, monkeypatch, dropped_by
):
    monkeypatch.setattr(store_module, "CACHE_BYTES", 1)  # the newest graph only
    first = Store(tmp_path).put(witty.load_witty(WITTY_GRAPH))
    second = Store(tmp_path).put(cluster_graph(2, seed=0))
    store = Store(tmp_path)
    graph = store.get(first)
    graph.derived = [graph]  # as converters/index.py keeps a view index on its graph
    freed = weakref.ref(graph)
    del graph
    if dropped_by == "the cache":
        store.get(second)
    else:
        store.delete(first)
    assert freed() is None


def test_a_graph_a_reader_checked_is_not_checked_again_until_changed(tmp_path, monkeypatch):
    graph = witty.load_witty(WITTY_GRAPH)
    again = native.loads(native.dumps(graph))
    assert graph.checked and again.checked
    assert Store(tmp_path).get(Store(tmp_path).put(graph)).checked
    graph.add("process", "proc:424242", pid=424242)
    first, second = list(again.nodes)[:2]
    again.link("talks_to", first, second, key="new")
    assert not graph.checked and not again.checked
    checked = []
    monkeypatch.setattr(trusted, "check_graph", lambda *args: checked.append(args))
    Store(tmp_path).put(graph)
    assert checked  # a changed graph is checked again when stored


def test_snapshot_stored_before_the_tag_is_read_through_validation(tmp_path):
    graph = witty.load_witty(WITTY_GRAPH)
    snapshot_id = Store(tmp_path).put(graph)
    _replace_row(tmp_path, snapshot_id, zlib.compress(native.dumps(graph), 1))  # old form
    assert native.dumps(Store(tmp_path).get(snapshot_id)) == native.dumps(graph)


def test_a_value_validation_would_change_is_stored_untrusted(tmp_path):
    graph = Graph()
    graph.add("process", "proc:7", pid=7, name="p")
    graph.node("proc:7").pid = "7"  # set behind the model's back: validation makes it 7
    snapshot_id = Store(tmp_path).put(graph)
    assert not _row(Store(tmp_path), snapshot_id).startswith(trusted.TAG)
    assert Store(tmp_path).get(snapshot_id).node("proc:7").pid == 7


def test_a_meta_value_validation_would_change_is_stored_untrusted(tmp_path):
    graph = witty.load_witty(WITTY_GRAPH)
    graph.meta.window_s = 5  # set behind the model's back: validation makes it 5.0
    snapshot_id = Store(tmp_path).put(graph)
    assert not _row(Store(tmp_path), snapshot_id).startswith(trusted.TAG)
    window = Store(tmp_path).get(snapshot_id).meta.window_s
    assert window == 5.0 and isinstance(window, float)


# A fresh process that reads a stored graph whole (export, diagnose) loads no pydantic: the
# meta record is trusted as the elements are.
READ_IN_A_FRESH_PROCESS = (
    "import sys\n"
    "from wp_mcp.graph.store import Store\n"
    "graph = Store(sys.argv[1]).get(sys.argv[2])\n"
    "print(len(graph.nodes), graph.meta.origin, type(graph.meta.collectors[0]).__name__)\n"
    "print('pydantic' in sys.modules)\n"
)


def test_a_fresh_process_reads_a_stored_graph_without_loading_pydantic(tmp_path):
    graph = witty.load_witty(WITTY_GRAPH)
    graph.meta.collectors.append(CollectorStatus(name="procfs", status="ok"))
    snapshot_id = Store(tmp_path).put(graph)
    done = subprocess.run(
        [sys.executable, "-c", READ_IN_A_FRESH_PROCESS, str(tmp_path), snapshot_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    read, loaded = done.stdout.splitlines()
    assert read == f"{len(graph.nodes)} {graph.meta.origin} CollectorStatus"
    assert loaded == "False"


def _damaged_rows(blob: bytes, graph: Graph) -> dict[str, bytes]:
    middle = len(blob) // 2
    no_ids = native.dumps(graph).replace(b'"id":', b'"xd":')
    return {
        "flipped byte": blob[:middle] + bytes([blob[middle] ^ 0xFF]) + blob[middle + 1 :],
        "truncated": blob[: len(blob) - 40],
        "not zlib": trusted.TAG + b"garbage",
        "not json": trusted.TAG + zlib.compress(b"[1, 2"),
        "not a graph": trusted.TAG + zlib.compress(b'{"nodes": 3}'),
        "nodes without ids": trusted.TAG + zlib.compress(no_ids),
    }


@pytest.mark.parametrize(
    "damage",
    ["flipped byte", "truncated", "not zlib", "not json", "not a graph", "nodes without ids"],
)
def test_a_damaged_row_is_refused_with_one_line(tmp_path, damage):
    graph = witty.load_witty(WITTY_GRAPH)
    snapshot_id = Store(tmp_path).put(graph)
    blob = _row(Store(tmp_path), snapshot_id)
    _replace_row(tmp_path, snapshot_id, _damaged_rows(blob, graph)[damage])
    with pytest.raises(FormatError) as caught:
        Store(tmp_path).get(snapshot_id)
    message = str(caught.value)
    assert message.startswith(f"snapshot {snapshot_id}: ") and "\n" not in message
    assert len(message) < 300


def test_the_cli_says_one_line_for_a_damaged_snapshot(tmp_path, capsys):
    graph = witty.load_witty(WITTY_GRAPH)
    snapshot_id = Store(tmp_path).put(graph)
    blob = _row(Store(tmp_path), snapshot_id)
    _replace_row(tmp_path, snapshot_id, _damaged_rows(blob, graph)["flipped byte"])
    capsys.readouterr()
    out = tmp_path / "copy.json"
    assert wp_mcp(["--store", str(tmp_path), "export", snapshot_id, "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert "damaged" in error and "\n" not in error and "Traceback" not in error
    assert not out.exists()
