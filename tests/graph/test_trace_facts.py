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
    alone = trace.job_facts([rank_with(0, [300] * 4)])
    assert "waited_ms" not in alone and "straggler_rank" not in alone
    assert alone["comm_own_pct"] == {"0": 0.3}  # its whole time in collectives: 1.2 of 400 ms
    quiet = [rank_with(0, []), rank_with(1, [])]
    assert trace.job_facts(quiet) == {"ranks": [0, 1]}


def test_calls_are_matched_by_kind_and_order_up_to_the_shortest_rank():
    early = rank_with(0, [5_300, 5_300, 5_300])
    late = rank_with(1, [300, 300, 300, 300])  # one more call than rank 0 recorded
    summary = trace.job_facts([early, late])
    assert summary["straggler_rank"] == 1
    assert summary["skew_ms"] == 15.0  # 5 ms over the 3 calls both recorded


def test_a_straggler_whose_lateness_jitters_is_still_named_with_its_cause():
    """Rank 1 is late to every step by 5 to 60 ms (its extra compute jitters on a loaded
    host): more than three MADs of jitter, yet last every time, so named; its cause is its
    work outside collectives, which is longer than rank 0's by its lateness."""
    lateness = [5_000, 60_000, 12_000, 45_000, 8_000, 30_000]
    early = rank_with(0, [])
    late = rank_with(1, [])
    for traced in (early, late):
        traced.steps = [(i * STEP_US, (i + 1) * STEP_US) for i in range(6)]
    early.cpu_collectives = [
        Collective("all_reduce", i * STEP_US + 20_000, 300 + d) for i, d in enumerate(lateness)
    ]
    late.cpu_collectives = [
        Collective("all_reduce", i * STEP_US + 20_000 + d, 300) for i, d in enumerate(lateness)
    ]
    summary = trace.job_facts([early, late])
    assert summary["straggler_rank"] == 1
    assert summary["skew_ms"] == sum(lateness) / 1000  # what rank 0 waited, exactly
    cause = summary["straggler_cause"]
    assert cause["phase"] == "compute"
    assert cause["extra_ms"] == round(sum(lateness) / 6 / 1000, 3)


def test_concurrent_calls_waiting_for_the_same_rank_count_once():
    """Three DDP buckets' all_reduces run at once on rank 0 while it waits 80 ms for rank 1:
    the wait is 80 ms of its 100 ms step, not 240 (the old sum said 240 %)."""
    waiting, late = rank_with(0, []), rank_with(1, [])
    for i in range(4):
        start = i * STEP_US + 10_000
        waiting.cpu_collectives += [Collective("all_reduce", start, 80_500) for _ in range(3)]
        late.cpu_collectives += [Collective("all_reduce", start + 80_000, 500) for _ in range(3)]
    summary = trace.job_facts([waiting, late])
    assert summary["straggler_rank"] == 1
    assert summary["waited_ms"]["0"] == 320.0 and summary["skew_pct"] == 80.0


def test_ranks_are_aligned_by_step_number_and_the_line_says_which_steps_were_judged():
    """Rank 1's profiler window starts two steps after rank 0's: only steps 4 and 5 are
    matched; without a common step nothing is."""
    first, second = rank_with(0, [5_300] * 4), rank_with(1, [300] * 4)
    first.step_numbers, second.step_numbers = [2, 3, 4, 5], [4, 5, 6, 7]
    summary = trace.job_facts([first, second])
    assert summary["steps_judged"] == [4, 5, 2]
    assert summary["alignment"].startswith("judged steps 4–5, the ones every rank traced")
    assert summary["waited_ms"] == {"0": 10.0, "1": 0.0}  # steps 4 and 5 of rank 0
    second.step_numbers = [8, 9, 10, 11]
    apart = trace.job_facts([first, second])
    assert "share no step" in apart["alignment"] and "waited_ms" not in apart
