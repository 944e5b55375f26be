"""The snapshot store: put/get/list/delete, retention, concurrent readers, crash safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from wp_mcp.graph import Graph, UserError, native, witty
from wp_mcp.graph.store import Store, default_store_path
from wp_testdata import WITTY_GRAPH


@pytest.fixture
def fixture_graph():
    return witty.load_witty(WITTY_GRAPH)


def test_put_get_list_delete(store_dir, fixture_graph):
    store = Store(store_dir)
    first = store.put(fixture_graph, label="vllm tp4")
    second = store.put(Graph())
    assert [info.id for info in store.list()] == [second, first]
    info = store.info(first)
    assert (info.label, info.nodes, info.edges) == ("vllm tp4", 129, fixture_graph.edge_count)
    assert info.origin == "witty-profiler import: graph.json"
    assert native.dumps(Store(store_dir).get(first)) == native.dumps(fixture_graph)
    assert store.resolve("latest") == second
    if first[:4] != second[:4]:
        assert store.resolve(first[:4]) == first  # a unique prefix is enough
    assert store.delete(first) == first
    assert [info.id for info in store.list()] == [second]
    with pytest.raises(UserError, match=f"no snapshot '{first}'; known snapshots: {second}"):
        store.get(first)


def test_empty_store_says_what_to_do(store_dir):
    with pytest.raises(UserError, match="import a file or collect"):
        Store(store_dir).get("latest")


def test_default_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("WP_MCP_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "wp-mcp"
    monkeypatch.setenv("WP_MCP_STORE", str(tmp_path / "explicit"))
    assert default_store_path() == tmp_path / "explicit"


def test_retention_keeps_the_newest_and_their_reports(store_dir):
    store = Store(store_dir, keep=3)
    ids = [store.put(Graph(), label=str(i)) for i in range(3)]
    old_report = store.put_report(ids[0], "bottleneck-identification", {"findings": []}, "# old")
    ids += [store.put(Graph(), label=str(i)) for i in range(3, 5)]
    report = store.put_report(ids[-1], "bottleneck-identification", {"findings": []}, "# ok")
    assert [info.id for info in store.list()] == ids[:1:-1]
    assert store.get_report(report).markdown == "# ok"
    with pytest.raises(UserError, match="no report"):
        store.get_report(old_report)  # went with its snapshot
    for dropped in ids[:2]:
        with pytest.raises(UserError):
            store.get(dropped)


def test_reports_round_trip(store_dir, fixture_graph):
    store = Store(store_dir)
    snapshot = store.put(fixture_graph)
    report = store.put_report(
        snapshot, "hotspot-thread-discovery", {"top": [{"id": "thr:1"}]}, "# Hotspots"
    )
    stored = store.get_report(report)
    assert (stored.snapshot_id, stored.skill, stored.data, stored.markdown) == (
        snapshot, "hotspot-thread-discovery", {"top": [{"id": "thr:1"}]}, "# Hotspots",
    )  # fmt: skip
    assert [r.id for r in store.list_reports(snapshot)] == [report]
    store.delete(snapshot)
    with pytest.raises(UserError, match="no report"):
        store.get_report(report)


def test_concurrent_readers_while_a_writer_writes(store_dir, fixture_graph):
    store = Store(store_dir)
    snapshot = store.put(fixture_graph)
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        reader = Store(store_dir)  # its own connections, no shared cache
        while not stop.is_set():
            try:
                assert len(reader.get(snapshot).nodes) == 129
                reader._cache.clear()
                reader.list()
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
                errors.append(exc)
                return

    readers = [threading.Thread(target=read) for _ in range(4)]
    for thread in readers:
        thread.start()
    for _ in range(10):
        store.put(fixture_graph)
    stop.set()
    for thread in readers:
        thread.join()
    assert errors == []
    assert len(store.list()) == 11


WRITER = """
import sys
from wp_mcp.graph.store import Store
from wp_mcp.graph.synthetic import cluster_graph
graph = cluster_graph(hosts=2)
store = Store(sys.argv[1], keep=0)  # no retention: the earlier snapshots must stay
print("ready", flush=True)
while True:
    store.put(graph)
"""


def test_a_writer_killed_mid_write_loses_nothing_stored(store_dir, fixture_graph):
    store = Store(store_dir, keep=1000)
    kept = [store.put(fixture_graph, label=f"before {i}") for i in range(3)]
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(1.5)  # mid-way through some put
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    after = Store(store_dir)
    for snapshot in kept:
        assert len(after.get(snapshot).nodes) == 129
    with sqlite3.connect(store_dir / "store.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    for info in after.list():  # whatever the killed writer committed is whole
        after.get(info.id)
