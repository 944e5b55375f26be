"""The job summary across ranks (graph/trace.py ``job_facts``): who waits for whom in
collectives, the skew, and when a rank is named the straggler."""

from __future__ import annotations

from wp_mcp.graph import trace
from wp_mcp.graph.trace import Collective, RankTrace

STEP_US = 100_000.0


def rank_with(rank: int, durations_us: list[float]) -> RankTrace:
    """A rank of 4 steps of 100 ms whose i-th all_reduce took ``durations_us[i]``."""
    traced = RankTrace(origin=f"rank{rank}.json", rank=rank)
    traced.steps = [(i * STEP_US, (i + 1) * STEP_US) for i in range(4)]
    traced.cpu_collectives = [
        Collective("all_reduce", i * STEP_US + 90_000, dur) for i, dur in enumerate(durations_us)
    ]
    return traced


def test_a_rank_late_to_every_call_is_the_straggler_of_four():
    # rank 2 arrives 20 ms late to each call: the others spend those 20 ms in the call
    ranks = [rank_with(r, [20_300, 20_250, 20_400, 20_350]) for r in (0, 1, 3)]
    ranks.append(rank_with(2, [300, 250, 400, 350]))
    summary = trace.job_facts(ranks)
    assert summary["straggler_rank"] == 2
    assert summary["skew_ms"] == 80.0  # 20 ms a call, 4 calls
    assert summary["skew_pct"] == 20.0  # of the 400 ms of steps
    assert summary["latency_p50_us"] == {"all_reduce": 300}
    assert summary["waited_ms"]["2"] == 0.0 and summary["waited_ms"]["0"] == 80.0


def test_hiccups_that_move_between_ranks_name_no_straggler():
    ranks = [
        rank_with(0, [300, 9_000, 300, 300]),
        rank_with(1, [6_000, 300, 300, 7_000]),
        rank_with(2, [300, 300, 8_000, 300]),
    ]
    summary = trace.job_facts(ranks)
    assert "straggler_rank" not in summary


def test_one_rank_or_ranks_without_collectives_give_no_skew():
    assert trace.job_facts([rank_with(0, [300] * 4)]) == {"ranks": [0]}
    quiet = [rank_with(0, []), rank_with(1, [])]
    assert trace.job_facts(quiet) == {"ranks": [0, 1]}


def test_calls_are_matched_by_kind_and_order_up_to_the_shortest_rank():
    early = rank_with(0, [5_300, 5_300, 5_300])
    late = rank_with(1, [300, 300, 300, 300])  # one more call than rank 0 recorded
    summary = trace.job_facts([early, late])
    assert summary["straggler_rank"] == 1
    assert summary["skew_ms"] == 15.0  # 5 ms over the 3 calls both recorded
