"""What a finding costs the job, measured from its step timeline when the graph has one.

The eBPF tier's timeline (``collectors/ebpf/timeline.py``) says, per job, how long its ranks
waited for each rank and how much longer its exchanges took than the typical one. A finding
whose cause shows there carries that share of the step time as ``impact_share``
(``impact_basis`` "measured"), and its priority follows it: P0 from 5 %, P1 from 3 %, P2
below. The cause shows when the finding names

- a socket of a rank link, or (a network finding) a rank: the step time lost beyond the
  fastest rank's compute and the exchange's moving time that no rank's lateness explains (loss and a
  slow link stretch the collectives, not the compute);
- some of a job's ranks but not all: what the latest of them costs (a hog on its CPU, a
  stalled loader, a throttled disk make that rank arrive late): for the job's straggler the
  step time beyond the fastest rank's own compute and the exchange's moving time, else the
  time the others wait for it alone.

A finding about every rank of a job alike (a quota on the whole job) slows all ranks
together, which arrivals cannot tell from a slower model: its priority stays the rule's
estimate, and says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from wp_mcp.graph.query import StepJob, step_jobs

if TYPE_CHECKING:
    from wp_mcp.graph import Graph
    from wp_mcp.graph.model import Node

    from .report import Finding, Priority

STRAGGLER_ARRIVALS = 0.6  # of the steps: a rank arriving last this often (chance: 1/ranks)
STRAGGLER_LATENESS = 0.7  # of the ranks' summed lateness: the straggler's own
P0_SHARE = 0.05
P1_SHARE = 0.03
NETWORK_LAYER = 4


def measured_priority(share: float) -> Priority:
    if share >= P0_SHARE:
        return "P0"
    return "P1" if share >= P1_SHARE else "P2"


def measure(graph: Graph, findings: list[Finding]) -> None:
    """Set each finding's measured impact and priority where the timeline shows its cause."""
    jobs = step_jobs(graph)
    if not jobs:
        return
    rank_of = _ranks(jobs)
    for found in findings:
        if found.impact_basis == "measured":  # its rule measured it (L6.straggler)
            continue
        cost = _cost(graph, found, jobs, rank_of)
        if cost is None:
            continue
        mark_measured(found, *cost)


def mark_measured(found: Finding, share: float, how: str) -> None:
    """The finding's impact as measured: ``share`` of the step time, ``how`` it shows."""
    found.impact_share = round(share, 4)
    found.impact_basis = "measured"
    found.priority = measured_priority(share)
    found.impact = f"measured {share:.0%} of the job's step time: {how}"


def _ranks(jobs: list[StepJob]) -> dict[str, StepJob]:
    return {rank.id: job for job in jobs for rank in job.ranks}


def _named(found: Finding) -> set[str]:
    named = set((found.subject or "").split("+"))
    for evidence in found.evidence:
        named.update(evidence.ids)
    return named


def _cost(
    graph: Graph, found: Finding, jobs: list[StepJob], rank_of: dict[str, StepJob]
) -> tuple[float, str] | None:
    named = _named(found)
    links = [n for n in map(graph.node, named) if n is not None and n.get("rank_link")]
    ranks = [rank_of[i] for i in named if i in rank_of]
    if links or (ranks and found.layer == NETWORK_LAYER):
        job = _job_of_links(graph, links, rank_of) or ranks[0]
        share = exchange_cost(job)
        return share, (
            f"the exchanges on the rank links take {share:.0%} of the step time beyond what "
            "the bytes' moving and the ranks' own compute need"
        )
    costs = [
        (rank_cost(rank, job), late_text(rank, job)) for job in jobs for rank in _partly(job, named)
    ]
    return max(costs, default=None)


def _partly(job: StepJob, named: set[str]) -> list[Node]:
    """The ranks of ``job`` a finding names, when it names some but not all of them."""
    involved = [rank for rank in job.ranks if rank.id in named]
    return involved if len(involved) < len(job.ranks) else []


def _job_of_links(graph: Graph, links: list[Node], rank_of: dict[str, StepJob]) -> StepJob | None:
    for link in links:
        for edge in graph.in_edges(link.id, "holds"):
            if edge.src in rank_of:
                return rank_of[edge.src]
    return None


def exchange_cost(job: StepJob) -> float:
    """What the rank links cost the job: the step time lost beyond the fastest rank's compute
    and the exchange's moving time that no rank's lateness explains, and at least the exchanges' own
    excess (a retransmission stalls the exchange, and the rank that resends arrives late at
    the next one: both are the link's)."""
    late = max((r.get("late_share") or 0.0 for r in job.ranks), default=0.0)
    lost = (job.figure("step_lost_share") or 0.0) - late
    return max(job.figure("comm_excess_share") or 0.0, lost)


def arrivals_needed(job: StepJob) -> float:
    """The last-arrival share a straggler reaches: ``STRAGGLER_ARRIVALS``, and three
    standard deviations above chance (1/ranks) over the rounds seen, so that a short window's
    luck names no straggler (40 rounds of 2 healthy ranks: 74 %; 250: 60 %)."""
    chance = 1 / max(len(job.ranks), 2)
    rounds = max(int(job.figure("step_rounds") or 0), 1)
    return max(STRAGGLER_ARRIVALS, chance + 3 * math.sqrt(chance * (1 - chance) / rounds))


def is_straggler(rank: Node, job: StepJob) -> bool:
    """The rank arrives last more often than chance allows (``arrivals_needed``) and holds
    most of the time the job's ranks spend late (``STRAGGLER_LATENESS`` of their summed late
    shares)."""
    if (rank.get("last_arrival_share") or 0.0) < arrivals_needed(job):
        return False
    total = sum(r.get("late_share") or 0.0 for r in job.ranks)
    return total > 0 and (rank.get("late_share") or 0.0) >= STRAGGLER_LATENESS * total


def rank_cost(rank: Node, job: StepJob) -> float:
    """What a rank costs its job: for the straggler all the step time beyond the fastest
    rank's compute and the exchange's moving time (``step_lost_share``: it also slows the
    exchanges it takes part in), else the time the others waited for it alone."""
    if is_straggler(rank, job):
        return rank.get("step_lost_share") or rank.get("late_share") or 0.0
    return rank.get("late_share") or 0.0


def late_text(rank: Node, job: StepJob) -> str:
    arrived = rank.get("last_arrival_share") or 0.0
    late = rank.get("late_ms")
    behind = f", {late:.1f} ms after the next rank" if late else ""
    return (
        f"{rank.id} arrives last at the collective in {arrived:.0%} of the steps{behind}; "
        f"{len(job.ranks) - 1} other rank(s) wait for it"
    )
