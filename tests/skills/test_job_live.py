"""Job rules on a real torch.distributed job (gloo on CPU, a TCPStore in the launcher,
DataLoader workers), collected live: a healthy job draws no stall finding, and the same job
with one rank SIGSTOPped during the window draws a P0 naming that rank and how long."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.skills.bottleneck_identification import evaluate

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch", reason="torch==2.13.0 (CPU) is installed by .ci/setup.d")

# the collectors' torch job: a launcher hosting the TCPStore, WORLD ranks, loaders each
JOB = Path(__file__).parents[1] / "collectors" / "torch_job.py"
WORLD = 2
WINDOW_S = 1.5


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


def stall_findings(launcher: int) -> list:
    graph = collect_snapshot(Context(window_s=WINDOW_S, pids={launcher}, ebpf="off"))
    result = next(o.result for o in evaluate(graph) if o.rule.id == "L6.rank-stalled")
    assert not isinstance(result, str), result
    return result


def test_a_sigstopped_rank_is_a_p0_naming_it_and_a_healthy_job_draws_none(job):
    assert stall_findings(job["launcher"]) == []
    stopped = job["ranks"][1]
    os.kill(stopped, signal.SIGSTOP)
    try:
        (finding,) = stall_findings(job["launcher"])
    finally:
        os.kill(stopped, signal.SIGCONT)
    assert finding.priority == "P0" and finding.subject == f"proc:{stopped}"
    assert "stopped (state T)" in finding.title and "no CPU time in the whole" in finding.title
    assert f"proc:{job['ranks'][0]}" in finding.title  # the peer that waits on it
    assert finding.command == f"kill -CONT {stopped}"
