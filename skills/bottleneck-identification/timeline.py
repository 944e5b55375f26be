"""Rules fed by the job's step timeline (the eBPF tier's bursts on the rank links,
``collectors/ebpf/timeline.py``): who the job waits for, measured at the collective.

A rank that arrives last at most collectives is the straggler, whatever its CPU share says
(a slow rank can burn less CPU than the ranks spinning while they wait for it); what it costs
the job (``skills/pulse.py`` ``rank_cost``) is the finding's measured impact. When a
timeline exists this judges what ``L6.rank-imbalance`` guesses from CPU shares.
"""

from __future__ import annotations

from wp_mcp.graph.query import no_step_timeline, step_jobs

from ..pulse import (
    STRAGGLER_ARRIVALS,
    STRAGGLER_LATENESS,
    is_straggler,
    late_text,
    mark_measured,
    measured_priority,
    rank_cost,
)
from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule

STRAGGLER_COST = 0.03  # of the step time: what the others wait for it, at least


@rule(
    "L6.straggler",
    6,
    "A rank arrives last at the collectives",
    "last_arrival_share and late_share of a rank (step timeline)",
    f"last in ≥ {STRAGGLER_ARRIVALS:.0%} of the steps, ≥ {STRAGGLER_LATENESS:.0%} of the ranks' "
    f"lateness its own, costing ≥ {STRAGGLER_COST:.0%} of the step time",
    supersedes=("L6.rank-imbalance",),
)
def straggler(ctx: RuleContext) -> list[Finding]:
    jobs = step_jobs(ctx.graph)
    if not jobs:
        raise NotEvaluable(f"no step timeline: {no_step_timeline(ctx.graph)}")
    out = []
    for job in jobs:
        slow = job.straggler()
        arrived = slow.get("last_arrival_share") or 0.0
        cost = slow.get("late_share") or 0.0
        if len(job.ranks) < 2 or not is_straggler(slow, job) or cost < STRAGGLER_COST:
            continue
        late = slow.get("late_ms") or 0.0
        others = [r for r in job.ranks if r.id != slow.id]
        found = ctx.finding(
            subject=slow.id,
            value=round(arrived, 3),
            priority=measured_priority(rank_cost(slow, job)),
            title=f"{ctx.who(slow)} arrives last at {arrived:.0%} of the collectives, "
            f"{late:.1f} ms after the next rank; the job runs {job.steps_per_s:.1f} steps/s",
            evidence=[
                ctx.entity(slow, "last_arrival_share", "late_ms", "late_share", "cpu_pct"),
                Evidence(
                    "aggregate",
                    [r.id for r in others],
                    {r.id: r.get("wait_share") for r in others},
                    ctx.window_s,
                    "wait_share: share of the step time each waited at the collective",
                ),
                ctx.entity(
                    slow,
                    "steps_per_s",
                    "step_ms_p50",
                    "step_ms_p99",
                    "comm_share",
                    "step_lost_share",
                ),
            ],
            action=f"Make {slow.id} as fast as its peers: what shares its CPUs (layer 6), "
            "its data loader (layer 7), its disk (layer 5); every other rank waits for it "
            "at each collective.",
        )
        mark_measured(found, rank_cost(slow, job), late_text(slow, job))
        out.append(found)
    return out
