"""The job's step timeline, from the bursts of traffic on its rank links (eBPF tier).

``sockbytes`` keeps, per TCP connection end and process, the bursts of its send/receive
calls (calls no more than ``BURST_GAP_NS`` apart) with when each burst first sent and first
received. A data-parallel job all-reduces its gradients every step over the connections
between its ranks, so those connections carry one round of bursts per step and are quiet
while the ranks compute. This module turns the bursts into rounds and the rounds into the
job's pulse:

- **links and jobs**: a *link* is a pair of processes whose connections both carry bursts in
  both directions, at least ``MIN_ROUNDS`` of them in the window (a rendezvous store or an
  idle control connection does not); the processes joined by links are one job's ranks.
- **rounds**: every rank's bursts on the job's links, in time order, are cut where the
  traffic stops for longer than the job's own step gap (the larger class of the gaps
  between bursts, split at Otsu's threshold on their logarithms); a piece is a round once
  every rank has both sent and received in it (the early rank's lone send while it waits
  for the late one joins the exchange that follows) and it moved most of a whole round's
  bytes (an exchange the scheduler split in two, a scalar all-reduce of the loss beside the
  gradients': each step all-reduces the same gradients, so a round's volume is known from
  the rounds themselves).
- **per round**: each rank's *arrival* (its first send of the round), the *last arrival*
  (the rank the others waited for) and the round's *end* (its last call). The step time is
  the time between consecutive ends; ``comm_share`` is the time from the last arrival to the
  end (the exchange itself, nobody waiting); a rank's ``wait_share`` is the time from its
  arrival to the last one; its ``late_share`` the time the others waited for it alone (from
  the second-latest arrival to its own, in the rounds it arrived last).

With gradient accumulation the ranks all-reduce once every k micro-steps: a round is then an
optimiser step, not a forward/backward pass, and nothing on the wire tells k. Collectives
that do not use sockets (NCCL over NVLink or RDMA, shared memory) leave no bursts: the
timeline is then absent, and says why.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wp_mcp.graph import ids

from .program import SOURCE

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

MIN_ROUNDS = 8  # rounds a link must carry in the window to be one of a job's rank links
WHOLE_ROUND = 0.75  # a round moving less than this share of a whole round's bytes grows on
SEPARATED = 4.0  # Otsu's two classes of gaps must differ this much (geometric means)
HICCUPS = 0.1  # the slowest tenth of a rank's rounds, left out of its typical lateness
QUICK = 0.0  # a quick exchange: the window's quickest (what the links showed they can do)


@dataclass(frozen=True)
class Burst:
    """One burst of one process's calls on one connection to ``peer`` (times in seconds)."""

    pid: int
    peer: int
    start: float
    end: float
    first_send: float | None
    first_recv: float | None
    sent: int
    received: int
    socket: str | None = None  # the graph id of the connection's end, when it has an inode


@dataclass
class RankPulse:
    """One rank's share of its job's timeline."""

    wait_share: float  # of the span: arrived, waiting for the last rank
    last_arrival_share: float  # of the rounds: it arrived last
    late_share: float  # of a typical step: the others waited for it alone
    late_ms: float | None  # median lateness behind the second-latest, in the rounds it was last


@dataclass
class Timeline:
    """The pulse of one job: its ranks (pids), its rounds and what they measure."""

    ranks: tuple[int, ...]
    rounds: int
    span_s: float
    steps_per_s: float
    step_ms_p50: float
    step_ms_p99: float
    comm_share: float
    comm_excess_share: float  # of the span: exchanges' time beyond a quick one's
    lost_share: float  # of the span: beyond the fastest rank's compute and the bytes' moving
    per_rank: dict[int, RankPulse]
    sockets: frozenset[str] = field(default_factory=frozenset)

    @property
    def label(self) -> str:
        return "+".join(ids.process(pid) for pid in self.ranks)


@dataclass
class _Round:
    bursts: list[Burst] = field(default_factory=list)

    def complete(self, ranks: frozenset[int]) -> bool:
        senders = {b.pid for b in self.bursts if b.first_send is not None}
        receivers = {b.pid for b in self.bursts if b.first_recv is not None}
        return senders >= ranks and receivers >= ranks

    @property
    def bytes(self) -> int:
        return sum(b.sent + b.received for b in self.bursts)

    @property
    def end(self) -> float:
        return max(b.end for b in self.bursts)

    def moving(self, since: float) -> float:
        """How long, after ``since``, some burst of the round was under way."""
        total, reach = 0.0, since
        for burst in sorted(self.bursts, key=lambda b: b.start):
            start = max(burst.start, reach)
            if burst.end > start:
                total += burst.end - start
                reach = burst.end
        return total

    def arrivals(self) -> dict[int, float]:
        """Each rank's first send of the round: a rank's data leaves once it has reached the
        collective, while what it receives may be read before (gloo's and NCCL's socket
        threads read a peer's early chunk as it comes, whatever the rank is doing)."""
        out: dict[int, float] = {}
        for burst in self.bursts:
            if burst.first_send is not None:
                out[burst.pid] = min(out.get(burst.pid, burst.first_send), burst.first_send)
        return out


def timelines(bursts: Iterable[Burst]) -> list[Timeline]:
    """Every job's timeline found in ``bursts`` (jobs of fewer than ``MIN_ROUNDS`` rounds
    have none)."""
    by_link: dict[frozenset[int], list[Burst]] = defaultdict(list)
    for burst in bursts:
        if burst.pid != burst.peer:
            by_link[frozenset((burst.pid, burst.peer))].append(burst)
    links = [link for link, found in by_link.items() if _is_rank_link(link, found)]
    out = []
    for ranks in _components(links):
        job = [b for link in links if link <= ranks for b in by_link[link]]
        timeline = _timeline(frozenset(ranks), job)
        if timeline is not None:
            out.append(timeline)
    return sorted(out, key=lambda t: t.ranks)


def _is_rank_link(link: frozenset[int], bursts: list[Burst]) -> bool:
    """Both processes sent and received, each in at least ``MIN_ROUNDS`` bursts."""
    for pid in link:
        own = [b for b in bursts if b.pid == pid]
        if sum(1 for b in own if b.first_send is not None) < MIN_ROUNDS:
            return False
        if sum(1 for b in own if b.first_recv is not None) < MIN_ROUNDS:
            return False
    return True


def _components(links: list[frozenset[int]]) -> list[set[int]]:
    groups: list[set[int]] = []
    for link in links:
        touching = [g for g in groups if g & link]
        merged = set(link).union(*touching)
        groups = [g for g in groups if not (g & link)] + [merged]
    return groups


def _timeline(ranks: frozenset[int], bursts: list[Burst]) -> Timeline | None:
    rounds = _rounds(ranks, sorted(bursts, key=lambda b: b.start))
    # the first and the last rounds may be cut by the window's ends
    rounds = rounds[1:-1]
    if len(rounds) < MIN_ROUNDS:
        return None
    ends = [r.end for r in rounds]
    span = ends[-1] - ends[0]
    if span <= 0:
        return None
    steps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    measured = rounds[1:]  # each of these lies wholly in the span
    arrivals = [r.arrivals() for r in measured]
    last = [max(a.values()) for a in arrivals]
    exchange = [r.end - at for r, at in zip(measured, last, strict=True)]
    quick = _quantile(exchange, QUICK)
    # the fastest rank's own compute each step (from the last round's end to its arrival):
    # what a step would take were no rank late and no exchange waiting
    computing = [
        min(a.values()) - previous.end for a, previous in zip(arrivals, rounds, strict=False)
    ]
    # and of each exchange, the time some link was moving bytes: its gaps are waits for a
    # rank that could not run or for a lost segment's retransmission
    moving = [r.moving(since) for r, since in zip(measured, last, strict=True)]
    unhindered = max(0.0, statistics.median(computing)) + statistics.median(moving)
    return Timeline(
        ranks=tuple(sorted(ranks)),
        rounds=len(rounds),
        span_s=span,
        steps_per_s=len(steps) / span,
        step_ms_p50=_quantile(steps, 0.5) * 1000,
        step_ms_p99=_quantile(steps, 0.99) * 1000,
        comm_share=sum(exchange) / span,
        comm_excess_share=sum(max(0.0, e - quick) for e in exchange) / span,
        lost_share=max(0.0, 1 - unhindered * len(steps) / span),
        per_rank=_per_rank(ranks, arrivals, span, statistics.median(steps)),
        sockets=frozenset(b.socket for b in bursts if b.socket),
    )


def _rounds(ranks: frozenset[int], bursts: list[Burst]) -> list[_Round]:
    threshold = _step_gap(bursts)
    pieces: list[list[Burst]] = [[]]
    reach = -math.inf
    for burst in bursts:
        if pieces[-1] and burst.start - reach > threshold:
            pieces.append([])
        pieces[-1].append(burst)
        reach = max(reach, burst.end)
    whole = _closed(ranks, pieces, 0)
    if len(whole) < 2:
        return whole
    # an exchange the scheduler split leaves two rounds of part of the bytes each; most
    # rounds are whole, so a quantile above the median is a whole round's volume
    typical = _quantile([r.bytes for r in whole], 0.75)
    return _closed(ranks, pieces, WHOLE_ROUND * typical)


def _closed(ranks: frozenset[int], pieces: list[list[Burst]], least: float) -> list[_Round]:
    """The pieces joined into rounds: each closed once every rank sent and received in it
    and it moved at least ``least`` bytes."""
    rounds: list[_Round] = []
    growing = _Round()
    for piece in pieces:
        growing.bursts.extend(piece)
        if growing.complete(ranks) and growing.bytes >= least:
            rounds.append(growing)
            growing = _Round()
    return rounds


def _step_gap(bursts: list[Burst]) -> float:
    """The silence that separates rounds: Otsu's threshold on the log of the gaps between
    bursts when the gaps fall into two classes far apart, else any gap."""
    gaps, reach = [], -math.inf
    for burst in bursts:
        if burst.start > reach > -math.inf:
            gaps.append(burst.start - reach)
        reach = max(reach, burst.end)
    logs = sorted(math.log(max(g, 1e-7)) for g in gaps)
    if len(logs) < 2:
        return 0.0
    best, cut = -1.0, 0
    total = sum(logs)
    below = 0.0
    for index in range(1, len(logs)):
        below += logs[index - 1]
        mean_low = below / index
        mean_high = (total - below) / (len(logs) - index)
        weight = index * (len(logs) - index)
        between = weight * (mean_high - mean_low) ** 2
        if between > best:
            best, cut = between, index
    low = statistics.fmean(logs[:cut])
    high = statistics.fmean(logs[cut:])
    if high - low < math.log(SEPARATED):
        return 0.0
    return math.exp((logs[cut - 1] + logs[cut]) / 2)


def _per_rank(
    ranks: frozenset[int], arrivals: list[dict[int, float]], span: float, step: float
) -> dict[int, RankPulse]:
    """Each rank's waits and lateness. Its lateness in a round is the time from the
    second-latest arrival to its own when it arrived last, else 0; its ``late_share`` is
    the mean of those over its rounds but the slowest tenth (a scheduler's hiccup in one
    round is not a slow rank), as a share of the median step."""
    waited: dict[int, float] = defaultdict(float)
    late: dict[int, list[float]] = {pid: [] for pid in ranks}
    for arrived in arrivals:
        latest = max(arrived.values())
        ordered = sorted(arrived.values())
        last = max(arrived, key=arrived.__getitem__)
        for pid in ranks:
            waited[pid] += latest - arrived.get(pid, latest)
            late[pid].append(ordered[-1] - ordered[-2] if pid == last and len(ordered) > 1 else 0.0)
    out = {}
    for pid in sorted(ranks):
        behind = [value for value in late[pid] if value > 0]
        kept = sorted(late[pid])[: max(1, math.ceil(len(late[pid]) * (1 - HICCUPS)))]
        out[pid] = RankPulse(
            wait_share=waited[pid] / span,
            last_arrival_share=len(behind) / len(arrivals),
            late_share=statistics.fmean(kept) / step if step > 0 else 0.0,
            late_ms=statistics.median(behind) * 1000 if behind else None,
        )
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def write(graph: Graph, found: list[Timeline]) -> None:
    """Each job's pulse on its ranks' process nodes (the job's figures on every rank, the
    rank's own beside them) and the sockets of its rank links."""
    for timeline in found:
        for pid, pulse in timeline.per_rank.items():
            node_id = ids.process(pid)
            if node_id not in graph:
                continue
            node = graph.nodes[node_id]
            for name, value in (
                ("step_job", timeline.label),
                ("step_rounds", timeline.rounds),
                ("steps_per_s", round(timeline.steps_per_s, 3)),
                ("step_ms_p50", round(timeline.step_ms_p50, 2)),
                ("step_ms_p99", round(timeline.step_ms_p99, 2)),
                ("comm_share", round(timeline.comm_share, 4)),
                ("comm_excess_share", round(timeline.comm_excess_share, 4)),
                ("step_lost_share", round(timeline.lost_share, 4)),
                ("wait_share", round(pulse.wait_share, 4)),
                ("last_arrival_share", round(pulse.last_arrival_share, 4)),
                ("late_share", round(pulse.late_share, 4)),
                ("late_ms", None if pulse.late_ms is None else round(pulse.late_ms, 2)),
            ):
                if value is not None:
                    node.set(name, value, SOURCE)
        for sock_id in timeline.sockets:
            if sock_id in graph:
                graph.nodes[sock_id].set("rank_link", True, SOURCE)
