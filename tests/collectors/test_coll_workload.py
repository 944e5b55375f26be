"""A real multi-process workload (tests/collectors/workload.py) seen through a snapshot:
every process and thread, the parent tree, each TCP connection with both owners and bytes,
and the pipe, UNIX and shared-memory links between the right processes."""

from __future__ import annotations

import os

import pytest
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.collectors.registry import COLLECTORS
from wp_mcp.graph import Graph, ids

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def snapshot(workload) -> Graph:
    return collect_snapshot(Context(window_s=1.0, ebpf="off"))


def workload_pids(manifest: dict) -> list[int]:
    ranks = manifest["ranks"]
    return [manifest["parent"], manifest["rendezvous"]["pid"]] + [
        pid for r in ranks for pid in (r["pid"], r["loader"])
    ]


def talks(graph: Graph, src: int, dst: int, transport: str):
    for edge in graph.out_edges(ids.process(src), "talks_to"):
        if edge.dst == ids.process(dst) and edge.transport == transport:
            return edge
    return None


def talks_either_way(graph: Graph, a: int, b: int, transport: str):
    return talks(graph, a, b, transport) or talks(graph, b, a, transport)


def test_every_collector_reports_a_status(snapshot):
    statuses = {s.name: s.status for s in snapshot.meta.collectors}
    for name in ("procfs", "sockets", "containers", "ipc"):
        assert statuses[name] in ("ok", "partial"), snapshot.meta.collectors


def test_every_process_and_thread_is_in_the_snapshot(snapshot, workload):
    for pid in workload_pids(workload):
        node = snapshot.node(ids.process(pid))
        assert node is not None, pid
        assert node.start_time is not None and node.cmdline
        live_tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
        seen = {t.tid for t in snapshot.successors(node.id, "has_thread")}
        assert live_tids <= seen, (pid, live_tids - seen)
    for rank in workload["ranks"]:
        names = {t.name for t in snapshot.successors(ids.process(rank["pid"]), "has_thread")}
        assert {"ring-send", "ring-recv", "pipe-read"} <= names


def test_parent_tree(snapshot, workload):
    parent = ids.process(workload["parent"])
    children = {n.id for n in snapshot.successors(parent, "parent_of")}
    expected = {ids.process(pid) for pid in workload_pids(workload)[1:]}
    assert children == expected
    assert snapshot.node(parent).ppid == os.getpid()


def test_ring_connections_have_both_owners_and_bytes(snapshot, workload):
    ranks = workload["ranks"]
    for i, rank in enumerate(ranks):
        nxt = ranks[(i + 1) % len(ranks)]
        link = talks(snapshot, rank["pid"], nxt["pid"], "tcp")
        assert link is not None, f"rank {i} -> rank {i + 1}"
        assert link.measured is True and link.bytes_src_to_dst > 0 and link.bytes_per_s > 0
        assert link.window_s > 0
        # the socket level: the connecting end is held by rank i, its peer by rank i+1
        sockets = [
            s
            for s in snapshot.successors(ids.process(rank["pid"]), "holds")
            if s.kind == "socket" and s.get("remote_port") == nxt["port"]
        ]
        assert len(sockets) == 1 and sockets[0].bytes_sent > 0
        peer = snapshot.successors(sockets[0].id, "peer")
        assert [p.id for p in snapshot.predecessors(peer[0].id, "holds")] == [
            ids.process(nxt["pid"])
        ]


def test_ranks_talk_to_the_rendezvous_store(snapshot, workload):
    store = workload["rendezvous"]["pid"]
    for rank in workload["ranks"]:
        link = talks(snapshot, rank["pid"], store, "tcp")
        assert link is not None and link.bytes_src_to_dst > 0 and link.bytes_dst_to_src > 0


def test_loaders_feed_ranks_through_pipe_and_shared_memory(snapshot, workload):
    for rank in workload["ranks"]:
        pipe = talks(snapshot, rank["loader"], rank["pid"], "pipe")
        assert pipe is not None and pipe.measured is False and pipe.bytes is None
        shm = talks_either_way(snapshot, rank["loader"], rank["pid"], "shm")
        assert shm is not None and shm.get("directed") is False
        segment = snapshot.node(ids.shm("posix", rank["shm"]))
        holders = {e.src: e for e in snapshot.in_edges(segment.id, "holds")}
        assert holders[ids.process(rank["pid"])].mapped is True  # fd closed, only mapped
        assert holders[ids.process(rank["loader"])].fd is not None


def test_parent_controls_ranks_over_unix_sockets(snapshot, workload):
    for rank in workload["ranks"]:
        assert talks_either_way(snapshot, workload["parent"], rank["pid"], "unix") is not None


def test_no_talks_to_between_unrelated_workload_processes(snapshot, workload):
    ranks = workload["ranks"]
    assert talks_either_way(snapshot, ranks[0]["loader"], ranks[1]["pid"], "pipe") is None
    assert talks_either_way(snapshot, ranks[0]["loader"], ranks[1]["loader"], "shm") is None


A2_COLLECTORS = (
    "wp_mcp.collectors.numa:NumaCollector",
    "wp_mcp.collectors.metrics:MetricsCollector",
)


@pytest.mark.skipif(
    not all(spec in COLLECTORS for spec in A2_COLLECTORS),
    reason="NUMA placement and thread rates come from the numa/metrics collectors, "
    "not registered yet",
)
def test_rank_numa_placement_and_thread_rates(snapshot, workload):
    for rank in workload["ranks"]:
        proc = snapshot.node(ids.process(rank["pid"]))
        assert proc.numa_locality is not None and 0 <= proc.numa_locality <= 1
        assert proc.numa_cpu_share and abs(sum(proc.numa_cpu_share.values()) - 1) < 0.01
        assert snapshot.successors(proc.id, "cpu_on")
        sender = next(
            t for t in snapshot.successors(proc.id, "has_thread") if t.name == "ring-send"
        )
        assert sender.cpu_pct is not None and sender.cpu_pct > 0
        assert sender.vol_switches_per_s is not None and sender.vol_switches_per_s > 0
