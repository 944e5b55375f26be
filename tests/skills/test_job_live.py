"""Job rules on a real torch.distributed job (gloo on CPU, a TCPStore in the launcher,
DataLoader workers), collected live: a healthy job draws neither a stall nor a loader
finding; the same job with one rank SIGSTOPped during the window draws a P0 naming that rank
and how long; a job whose ``__getitem__`` is slow draws the loader finding on each rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
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


STALL, LOADER = "L6.rank-stalled", "L7.dataloader-stalled"


@contextmanager
def torch_job(*options: str):
    proc = subprocess.Popen([sys.executable, str(JOB), str(WORLD), *options],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        yield json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def findings(launcher: int, *rule_ids: str) -> dict[str, list]:
    graph = collect_snapshot(Context(window_s=WINDOW_S, pids={launcher}, ebpf="off"))
    results = {o.rule.id: o.result for o in evaluate(graph) if o.rule.id in rule_ids}
    assert all(not isinstance(r, str) for r in results.values()), results
    return results


def test_a_sigstopped_rank_is_a_p0_naming_it_and_a_healthy_job_draws_none():
    with torch_job() as job:
        assert findings(job["launcher"], STALL, LOADER) == {STALL: [], LOADER: []}
        stopped = job["ranks"][1]
        os.kill(stopped, signal.SIGSTOP)
        try:
            (finding,) = findings(job["launcher"], STALL)[STALL]
        finally:
            os.kill(stopped, signal.SIGCONT)
    assert finding.priority == "P0" and finding.subject == f"proc:{stopped}"
    assert "stopped (state T)" in finding.title and "no CPU time in the whole" in finding.title
    assert f"proc:{job['ranks'][0]}" in finding.title  # the peer that waits on it
    assert finding.command == f"kill -CONT {stopped}"


def test_a_slow_getitem_is_named_on_each_rank_as_the_loader_holding_it():
    """40 ms of waiting per sample: each trainer waits on its DataLoader queue while both
    of its workers sleep inside __getitem__ the whole window."""
    with torch_job("--item-ms", "40") as job:
        found = findings(job["launcher"], STALL, LOADER)
    assert found[STALL] == []
    assert sorted(f.subject for f in found[LOADER]) == sorted(f"proc:{p}" for p in job["ranks"])
    assert all("sleeping inside __getitem__" in f.title for f in found[LOADER])
