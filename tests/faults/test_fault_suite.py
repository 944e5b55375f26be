"""The fault suite's CI subset (benchmarks/faults, docs/faults.md): a real torch DDP job over
gloo, one fault at a time, ``wp-mcp diagnose --live`` during it (eBPF off), scored by the
suite itself. Each test states what the diagnosis must do; the full scorecard is a benchmark.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from wp_require import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.root]

REPO = Path(__file__).resolve().parents[2]
SUBSET = ("healthy", "stopped-rank", "loss-loopback")


@pytest.fixture(scope="module")
def scores(tmp_path_factory) -> dict[str, dict]:
    """One run of the suite on the subset: scenario name -> its scores."""
    if os.geteuid() != 0:
        unavailable("needs root (nftables on lo, signals to the job's ranks)")
    if not shutil.which("nft"):
        unavailable("needs nftables (.ci/setup.d/20-collectors.sh installs it)")
    if importlib.util.find_spec("torch") is None:
        unavailable("needs torch==2.13.0 (.ci/setup.d/20-collectors.sh installs it)")
    out = tmp_path_factory.mktemp("faults") / "scores.json"
    command = [sys.executable, "-m", "benchmarks.faults", "--only", ",".join(SUBSET),
               "--ebpf", "off", "--window", "3", "--baseline", "2", "--settle", "1",
               "--json", str(out)]  # fmt: skip
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=420)
    assert run.returncode == 0, run.stderr[-2000:]
    return {result["scenario"]: result for result in json.loads(out.read_text())}


def diagnosis(scores: dict[str, dict], name: str) -> dict:
    result = scores[name]
    assert not result["error"], result["error"]
    (only,) = result["diagnoses"]
    assert not only["error"], only["error"]
    return only


def test_a_healthy_job_gets_no_false_p0_finding(scores):
    assert [f for f in diagnosis(scores, "healthy")["false"] if f.startswith("P0")] == []


def test_a_stopped_rank_is_found_at_p0_p1_and_named(scores):
    found = diagnosis(scores, "stopped-rank")
    assert found["layer_ok"] and found["process_ok"] and found["found"], found


def test_packet_loss_on_the_rank_link_is_found_at_p0_p1_on_the_ranks(scores):
    found = diagnosis(scores, "loss-loopback")
    assert found["layer_ok"] and found["process_ok"] and found["found"], found
