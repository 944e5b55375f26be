"""The snapshot store: put/get/list/delete, retention, concurrent readers, crash safety."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from wp_mcp.graph import Graph, UserError, native, witty
from wp_mcp.graph.store import Store, default_store_path
from wp_mcp.server.cli import main
from wp_synthetic import cluster_graph
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
sys.path.insert(0, sys.argv[2])  # tests/, for wp_synthetic
from wp_mcp.graph.store import Store
from wp_synthetic import cluster_graph
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
        [sys.executable, "-c", WRITER, str(store_dir), str(Path(__file__).parents[1])],
        stdout=subprocess.PIPE,
        text=True,
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


# ---------------------------------------------------------------------- permissions


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_store_is_private_whatever_the_umask(tmp_path, fixture_graph):
    old_umask = os.umask(0)
    try:
        store = Store(tmp_path / "store")
        store.put(fixture_graph)
    finally:
        os.umask(old_umask)
    files = ["store.sqlite3", "store.sqlite3-wal", "store.sqlite3-shm"]  # open: WAL files exist
    assert mode_of(tmp_path / "store") == 0o700
    assert {name: mode_of(tmp_path / "store" / name) for name in files} == dict.fromkeys(
        files, 0o600
    )


def test_a_store_made_readable_by_all_is_made_private(store_dir):
    Store(store_dir).close()
    (store_dir / "store.sqlite3").chmod(0o644)  # as earlier versions created it
    Store(store_dir)
    assert mode_of(store_dir / "store.sqlite3") == 0o600


# ---------------------------------------------------------------------- older stores


OLD_SCHEMA = """
CREATE TABLE snapshots (id TEXT PRIMARY KEY, created REAL NOT NULL, label TEXT, origin TEXT,
    hosts TEXT NOT NULL, nodes INTEGER NOT NULL, edges INTEGER NOT NULL, size INTEGER NOT NULL,
    data BLOB NOT NULL);
CREATE TABLE reports (id TEXT PRIMARY KEY, snapshot_id TEXT NOT NULL REFERENCES snapshots(id)
    ON DELETE CASCADE, skill TEXT NOT NULL, created REAL NOT NULL, data BLOB NOT NULL,
    markdown TEXT NOT NULL);
"""


def test_a_store_from_before_content_hashes_keeps_its_snapshots(store_dir, fixture_graph):
    store_dir.mkdir()
    blob = zlib.compress(native.dumps(fixture_graph), 1)
    with sqlite3.connect(store_dir / "store.sqlite3") as db:
        db.executescript(OLD_SCHEMA)
        db.execute(
            "INSERT INTO snapshots VALUES ('s000001', 1.0, 'old', 'x', '[]', 129, 0, ?, ?)",
            (len(blob), blob),
        )
    store = Store(store_dir)
    assert len(store.get("s000001").nodes) == 129
    first = store.put(fixture_graph, reuse_same=True)  # the old row has no hash: stored anew
    assert store.put(fixture_graph, reuse_same=True) == first
    assert [info.id for info in store.list()] == [first, "s000001"]


# ---------------------------------------------------------------------- read-only, full disk


def test_a_read_only_store_is_readable_and_only_writes_are_refused(
    small_disk, fixture_graph, capsys, tmp_path
):
    store_path = small_disk.root / "store"
    store = Store(store_path)
    kept = store.put(fixture_graph, label="kept")
    store.close()
    small_disk.make_read_only()

    reader = Store(store_path)
    assert reader.read_only
    assert [info.id for info in reader.list()] == [kept]
    assert len(reader.get(kept).nodes) == 129
    cli = ["--store", str(store_path)]
    assert main([*cli, "snapshots"]) == 0
    assert kept in capsys.readouterr().out
    assert main([*cli, "export", kept, "--out", str(tmp_path / "copy.json")]) == 0
    assert main([*cli, "show", kept]) == 0
    capsys.readouterr()
    for write in (["import", str(WITTY_GRAPH)], ["delete", kept], ["diagnose", kept]):
        assert main([*cli, *write]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") == 1
        assert "the store is read-only" in err


def test_a_collection_says_a_read_only_store_before_its_window(small_disk, capsys):
    """It was found only after the whole window, the collection then lost. A hang guard: a
    300 s window, refused at once."""
    store_path = small_disk.root / "store"
    Store(store_path).close()
    small_disk.make_read_only()
    signal.signal(signal.SIGALRM, _window_ran)
    signal.alarm(60)
    try:
        for command in (["collect", "--duration", "300"], ["diagnose", "--live", "--duration", "300"]):  # fmt: skip
            assert main(["--store", str(store_path), *command, "--ebpf", "off"]) == 2
            err = capsys.readouterr().err
            assert "the store is read-only" in err and err.count("\n") == 1
    finally:
        signal.alarm(0)


def _window_ran(*_):
    raise AssertionError("the collection ran its window before the store refused it")


def test_a_read_only_store_from_before_monitoring_has_no_events_nor_baseline(
    small_disk, fixture_graph
):
    store_path = small_disk.root / "store"
    store = Store(store_path)
    store.put(fixture_graph)
    store.db.connect().executescript("DROP TABLE events; DROP TABLE settings;")  # an older store
    store.close()
    small_disk.make_read_only()
    reader = Store(store_path)
    assert reader.read_only and reader.events_since(0) == [] and reader.baseline() is None


def test_a_disk_filling_up_during_a_write_is_one_line_and_keeps_every_snapshot(
    small_disk, fixture_graph
):
    store = Store(small_disk.root / "store", keep=0)
    kept = [store.put(fixture_graph, label=f"before {i}") for i in range(3)]
    filler = small_disk.fill()
    big = cluster_graph(hosts=2)  # some 60 KB compressed: no room for it
    with pytest.raises(UserError) as refused:
        store.put(big)
    assert str(refused.value) == (
        f"cannot store the snapshot: no space left on device ({small_disk.root / 'store'})"
    )
    assert [info.id for info in store.list()] == kept[::-1]
    store.close()
    filler.unlink()
    after = Store(small_disk.root / "store")
    assert [len(after.get(snapshot).nodes) for snapshot in kept] == [129] * 3
    assert after.put(big)  # and, with room again, the store takes writes


def test_an_already_full_disk_says_so_plainly(small_disk, fixture_graph, capsys):
    store_path = small_disk.root / "store"
    store = Store(store_path)
    store.put(fixture_graph)
    store.close()
    small_disk.fill()
    assert main(["--store", str(store_path), "snapshots"]) == 0  # its reserve: it still opens
    capsys.readouterr()
    small_disk.fill("filler-2")  # the reserve's room taken too
    assert main(["--store", str(store_path), "import", str(WITTY_GRAPH)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert f"no space left on device ({store_path})" in err
    assert "disk I/O error" not in err


# ---------------------------------------------------------------------- files run by skills


def test_repeated_runs_on_one_file_store_it_once(store_dir, capsys, monkeypatch):
    monkeypatch.setenv("WP_MCP_KEEP", "4")
    store = Store(store_dir)
    collected = [store.put(Graph(), label=f"collected {i}") for i in range(3)]
    runs = [["diagnose", str(WITTY_GRAPH)]] * 3 + [
        ["skill", "run", "hotspot-thread-discovery", str(WITTY_GRAPH)]
    ]
    for argv in runs:
        assert main(argv) == 0
    reported_on = set(re.findall(r"^report \w+ \(snapshot (\w+)\)", capsys.readouterr().err, re.M))
    assert len(reported_on) == 1  # every run's report belongs to the one stored file
    listed = [info.id for info in store.list()]
    assert listed == [*reported_on, *collected[::-1]]  # no collected snapshot pushed out
    assert len(store.list_reports(listed[0])) == len(runs)


def test_a_full_disk_can_still_delete_to_free_its_own_space(small_disk, fixture_graph, capsys):
    """The tool frees its own space: `delete` works on a disk the store filled (the store
    keeps a small reserve to give back first, since SQLite needs room even to delete)."""
    store_path = small_disk.root / "store"
    store = Store(store_path, keep=0)
    doomed, kept = store.put(fixture_graph, label="old"), store.put(Graph(), label="new")
    store.close()
    small_disk.fill()
    assert main(["--store", str(store_path), "delete", doomed]) == 0, capsys.readouterr().err
    capsys.readouterr()
    after = Store(store_path)
    assert [info.id for info in after.list()] == [kept]
    assert len(after.get(kept).nodes) == 0
