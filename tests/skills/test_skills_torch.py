"""A real torch.distributed job (gloo on CPU, a TCPStore in the launcher, DataLoader workers)
collected live: the topology skill names its ranks, rendezvous store and loaders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.skills import run_skill

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch", reason="torch==2.13.0 (CPU) is installed by .ci/setup.d")

# the collectors' torch job: a launcher hosting the TCPStore, WORLD ranks, 2 loaders each
JOB = Path(__file__).parents[1] / "collectors" / "torch_job.py"
WORLD = 2


@pytest.fixture
def job():
    proc = subprocess.Popen([sys.executable, str(JOB), str(WORLD)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        yield json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_torch_ranks_store_and_loaders_are_recognised(job):
    graph = collect_snapshot(Context(window_s=1.0, pids={os.getpid()}, ebpf="off"))
    report = run_skill("dataflow-topology-restore", graph)
    launcher = f"proc:{job['launcher']}"
    ranks = sorted(f"proc:{pid}" for pid in job["ranks"])
    (group,) = report.data["groups"]
    assert group["members"] == ranks and group["parent"] == launcher
    assert group["rendezvous"] == f"{launcher} port {job['store_port']}"
    assert group["front_end"] is None  # the launcher serves only its own job
    loaders = report.data["dataloaders"]
    assert sorted(loaders) == ranks and all(len(workers) == 2 for workers in loaders.values())
