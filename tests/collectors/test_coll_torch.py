"""A real torch.distributed job (gloo on CPU, 2 ranks, DataLoader workers): the snapshot
finds its ranks, their TCP links, the rendezvous store and the DataLoader workers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from coll_helpers import HERE, Running
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.graph import Graph, ids

torch = pytest.importorskip(
    "torch", reason="torch absent; CI installs torch==2.13.0 (.ci/setup.d/20-collectors.sh)"
)
pytestmark = pytest.mark.slow
WORLD = 2


@pytest.fixture(scope="module")
def job() -> Iterator[dict]:
    proc = subprocess.Popen([sys.executable, str(HERE / "torch_job.py"), str(WORLD)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    running = Running(proc)
    try:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"torch job did not start (exit {proc.wait()})")
        yield json.loads(line)
    finally:
        running.stop()


@pytest.fixture(scope="module")
def snapshot(job) -> Graph:
    return collect_snapshot(Context(window_s=1.0, ebpf="off"))


def tcp_link(graph: Graph, a: int, b: int):
    for src, dst in ((a, b), (b, a)):
        for edge in graph.out_edges(ids.process(src), "talks_to"):
            if edge.dst == ids.process(dst) and edge.transport == "tcp":
                return edge
    return None


def test_ranks_are_children_of_the_launcher(snapshot, job):
    children = {n.id for n in snapshot.successors(ids.process(job["launcher"]), "parent_of")}
    assert {ids.process(pid) for pid in job["ranks"]} <= children


def test_ranks_exchange_data_over_tcp(snapshot, job):
    link = tcp_link(snapshot, *job["ranks"])
    assert link is not None and link.bytes > 0 and link.bytes_per_s > 0


def test_every_rank_is_connected_to_the_rendezvous_store(snapshot, job):
    launcher = ids.process(job["launcher"])
    listening = [
        s for s in snapshot.successors(launcher, "holds")
        if s.kind == "socket" and s.get("state") == "LISTEN" and s.get("local_port") == job["store_port"]
    ]  # fmt: skip
    assert listening, "the launcher hosts the TCPStore"
    for rank in job["ranks"]:
        link = tcp_link(snapshot, rank, job["launcher"])
        assert link is not None and link.src == ids.process(rank) and link.bytes > 0


def test_dataloader_workers_feed_their_rank(snapshot, job):
    for rank in job["ranks"]:
        workers = snapshot.successors(ids.process(rank), "parent_of")
        assert len(workers) >= 2, f"rank {rank} has DataLoader workers"
        for worker in workers:
            feeds = [
                e for e in snapshot.out_edges(worker.id, "talks_to")
                if e.dst == ids.process(rank) and e.transport in ("pipe", "unix")
            ]  # fmt: skip
            assert feeds, f"worker {worker.id} -> rank {rank}"
