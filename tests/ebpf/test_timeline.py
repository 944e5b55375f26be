"""The step timeline (collectors/ebpf/timeline.py): rounds of bursts on the rank links → steps/s,
step quantiles, the exchange's share, waits and who arrived last.

The synthetic jobs below emit what the eBPF tier records of a real one: per step, each rank
sends its first chunk when it reaches the collective (alone, when the others are not there
yet), then every link carries the exchange both ways. The last test runs the real gloo DDP
job with eBPF and a rank made slower.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import tempfile
import time
from pathlib import Path

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.ebpf import EbpfCollector
from wp_mcp.collectors.ebpf.timeline import Burst, timelines
from wp_mcp.graph import Graph
from wp_mcp.graph.query import step_jobs
from wp_require import unavailable

JOB_MODULE = Path(__file__).resolve().parents[2] / "benchmarks" / "faults" / "job.py"
GRADIENTS = 1 << 20  # bytes each link carries each way per round


def synthetic(links, compute_ms, steps=60, exchange_ms=2.0, split=False, seed=1):
    """Bursts of a job whose ranks compute ``compute_ms[rank]`` per step then all-reduce over
    ``links``; ``split`` cuts every third exchange in two with a pause (a preempted sender)."""
    rng = random.Random(seed)
    ranks = sorted({r for link in links for r in link})
    out, now = [], 0.0
    for step in range(steps):
        arrive = {r: now + compute_ms[r] / 1000 + rng.uniform(0, 0.0003) for r in ranks}
        start = max(arrive.values())
        end = start + exchange_ms / 1000
        for a, b in links:
            for me, peer in ((a, b), (b, a)):
                if arrive[me] < start - 0.001:  # arrived early: its first chunk goes out alone
                    out.append(
                        Burst(me, peer, arrive[me], arrive[me] + 1e-5, arrive[me], None, 4096, 0)
                    )
                pieces = [(start, end)]
                if split and step % 3 == 0:
                    middle = (start + end) / 2
                    pieces = [(start, middle), (middle + 0.003, end + 0.003)]
                share = GRADIENTS // len(pieces)
                out += [Burst(me, peer, s, e, s, s, share, share) for s, e in pieces]
        now = end + (0.003 if split and step % 3 == 0 else 0)
    return out


def the(found):
    (timeline,) = found
    return timeline


def test_a_ring_of_two_steps_at_its_period_and_names_the_late_rank():
    # rank 2 computes 60 ms, rank 1 20 ms: the step is 60 + 2 ms, rank 1 waits 40 ms of it
    timeline = the(timelines(synthetic([(1, 2)], {1: 20.0, 2: 60.0})))
    assert timeline.ranks == (1, 2)
    assert timeline.steps_per_s == pytest.approx(1000 / 62, rel=0.02)
    assert timeline.step_ms_p50 == pytest.approx(62, rel=0.02)
    assert timeline.comm_share == pytest.approx(2 / 62, rel=0.1)
    late, early = timeline.per_rank[2], timeline.per_rank[1]
    assert late.last_arrival_share == 1.0 and early.last_arrival_share == 0.0
    assert late.late_ms == pytest.approx(40, rel=0.02)
    assert late.late_share == pytest.approx(40 / 62, rel=0.05)
    assert early.wait_share == pytest.approx(40 / 62, rel=0.05) and late.wait_share < 0.01


def test_an_exchange_split_by_a_pause_is_still_one_step():
    timeline = the(timelines(synthetic([(1, 2)], {1: 20.0, 2: 20.0}, split=True)))
    mean_step_ms = (3 * 22 + 3) / 3  # every third step is 3 ms longer
    assert timeline.steps_per_s == pytest.approx(1000 / mean_step_ms, rel=0.03)


def test_a_ring_of_four_and_a_tree_find_one_job_and_its_straggler():
    compute = {1: 20.0, 2: 20.0, 3: 35.0, 4: 20.0}
    ring = the(timelines(synthetic([(1, 2), (2, 3), (3, 4), (4, 1)], compute)))
    tree = the(timelines(synthetic([(1, 2), (1, 3), (3, 4)], compute)))
    for timeline in (ring, tree):
        assert timeline.ranks == (1, 2, 3, 4)
        assert timeline.steps_per_s == pytest.approx(1000 / 37, rel=0.03)
        assert max(timeline.per_rank, key=lambda r: timeline.per_rank[r].last_arrival_share) == 3


def test_gradient_accumulation_shows_one_round_per_optimiser_step():
    # 4 micro-steps of 10 ms computed between all-reduces: a round every 40 + 2 ms
    timeline = the(timelines(synthetic([(1, 2)], {1: 40.0, 2: 40.0})))
    assert timeline.step_ms_p50 == pytest.approx(42, rel=0.03)


def test_a_quiet_control_connection_and_unrelated_jobs_stay_apart():
    job = synthetic([(1, 2)], {1: 20.0, 2: 20.0})
    other = synthetic([(7, 8)], {7: 50.0, 8: 50.0}, seed=3)
    store = [Burst(1, 9, 0.5, 0.5001, 0.5, None, 10, 0), Burst(9, 1, 0.5, 0.5002, None, 0.5, 0, 10)]
    found = timelines(job + other + store)
    assert [t.ranks for t in found] == [(1, 2), (7, 8)]


def test_too_few_rounds_make_no_timeline():
    assert timelines(synthetic([(1, 2)], {1: 20.0, 2: 20.0}, steps=5)) == []
    assert timelines([]) == []


@pytest.mark.ebpf
@pytest.mark.usefixtures("ebpf")
def test_the_real_gloo_job_steps_at_its_logged_rate_and_its_slow_rank_arrives_last():
    try:
        import torch  # noqa: F401
    except ImportError:
        unavailable("torch is not installed (.ci/setup.d/20-collectors.sh)")
    Job, Launch = _fault_suite_job()

    with tempfile.TemporaryDirectory(prefix="wp-timeline-") as tmp:
        job = Job(Path(tmp), Launch(args=["--extra-ms", "0|40"]))
        job.start()
        try:
            time.sleep(1.0)
            collector, ctx, graph = EbpfCollector(), Context(window_s=4.0), Graph()
            collector.begin(ctx)
            started = time.time()
            time.sleep(ctx.window_s)
            ended = time.time()
            collector.collect(graph, ctx)
            logged = job.rate(started, ended)
        finally:
            job.stop()
    ranks = {f"proc:{pid}" for pid in job.ranks}
    (found,) = [j for j in step_jobs(graph) if {r.id for r in j.ranks} == ranks]
    # generous: the machine is shared (benchmarks/bench_timeline.py holds the ±3 % figure)
    assert found.steps_per_s == pytest.approx(logged, rel=0.15)
    assert found.straggler().id == f"proc:{job.ranks[1]}"
    assert found.straggler().get("last_arrival_share") >= 0.8


def _fault_suite_job():
    """The fault suite's job runner (benchmarks/faults/job.py: stdlib only), by its path."""
    name = "wp_fault_suite_job"
    if name not in sys.modules:  # dataclasses look their module up while it executes
        spec = importlib.util.spec_from_file_location(name, JOB_MODULE)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    module = sys.modules[name]
    return module.Job, module.Launch
