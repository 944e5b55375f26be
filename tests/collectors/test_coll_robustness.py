"""Collection under churn and without privileges: a snapshot always comes back, and its
statuses say what could not be read and why."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest
from coll_helpers import needs_root
from wp_mcp.collectors import Context, collect_snapshot, default_collectors
from wp_nobody import as_nobody

pytestmark = pytest.mark.slow


def test_churn_of_200_short_lived_processes_gives_no_error():
    stop = threading.Event()
    started = []

    def churn() -> None:
        while len(started) < 200 and not stop.is_set():
            started.append(subprocess.Popen(["sleep", "0.02"]))
            time.sleep(0.002)

    spawner = threading.Thread(target=churn)
    spawner.start()
    try:
        snapshots = []
        while spawner.is_alive() or not snapshots:
            snapshots.append(collect_snapshot(Context(window_s=0.1, ebpf="off")))
    finally:
        stop.set()
        spawner.join()
        for proc in started:
            proc.wait()
    assert len(started) == 200
    for graph in snapshots:
        for status in graph.meta.collectors:
            assert status.status in ("ok", "partial", "skipped"), status
        assert graph.of_kind("process")


def collect_as_nobody() -> dict:
    """As nobody: collect and send back a summary (everything the collection imports is
    loaded before the fork)."""
    default_collectors()  # import every registered collector module while still root

    def collect() -> dict:
        graph = collect_snapshot(Context(window_s=0.2, ebpf="off"))
        return {
            "statuses": [s.model_dump() for s in graph.meta.collectors],
            "capabilities": graph.meta.capabilities,
            "holds": {n.id: len(graph.out_edges(n.id, "holds")) for n in graph.of_kind("process")},
            "threads": len(graph.of_kind("thread")),
        }

    return as_nobody(collect)


@needs_root()
@pytest.mark.root
def test_unprivileged_collection_still_produces_a_snapshot_and_says_what_it_missed():
    result = collect_as_nobody()
    statuses = {s["name"]: s for s in result["statuses"]}
    assert result["capabilities"]["root"] is False
    assert result["capabilities"]["cap_sys_ptrace"] is False
    assert statuses["procfs"]["status"] == "partial"
    assert "permission denied" in statuses["procfs"]["reason"]
    assert all(s["status"] in ("ok", "partial", "skipped") for s in statuses.values())
    # root's processes are listed, only what they hold is missing
    assert result["holds"][f"proc:{os.getpid()}"] == 0
    assert f"proc:{os.getpid()}" in result["holds"] and result["threads"] > 0
