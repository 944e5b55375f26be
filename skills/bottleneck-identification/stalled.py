"""Job progress: a rank that stopped, blocked in the kernel or went silent while its peers wait.

A synchronous job (DDP, collectives) moves at the pace of its slowest rank: one rank stopped
by a signal (state T), blocked in uninterruptible sleep (D) or idle makes every peer wait, so
the whole job shows little CPU — which looks healthier than a busy one. What proves the job
stands still is its rank links: the bytes the ranks exchanged over the window. Only ranks
(members of a rank group) are judged: an idle process that is not a rank is not a stall.
"""

from __future__ import annotations

from dataclasses import dataclass

from wp_mcp.graph import Node

from ..analysis import Group
from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule
from ..thresholds import BLOCKED_OFF_CPU, STALLED_CPU, STALLED_LINK
from ..waitfor import WAIT_WORDS, Chain

MIB = 1 << 20
STOPPED_STATES = ("T", "t")  # stopped by a signal (T) or by a tracer (t)


@dataclass
class RankLinks:
    """What a rank's links to the other ranks of its group carried."""

    peers: list[str]
    window_rate: float  # bytes/s over the window, all links together
    lifetime_bytes: int  # bytes since the connections opened
    window_s: float

    @property
    def quiet(self) -> bool:
        return STALLED_LINK.reached(self.window_rate)


@dataclass
class RankState:
    """One rank as this rule sees it."""

    node: Node
    links: RankLinks | None
    stopped: str | None  # "T" / "t" when every thread is stopped
    blocked: Node | None  # the thread longest off CPU in D state
    blocked_off_pct: float = 0.0

    @property
    def idle(self) -> bool:
        return STALLED_CPU.reached(self.node.get("cpu_pct"))


@rule(
    "L6.rank-stalled",
    6,
    "A rank stopped, blocked or silent while its peers wait",
    "rank state (T/t, D) with its CPU and the bytes on its links to the other ranks",
    f"a rank stopped (T/t) or in D state off CPU {BLOCKED_OFF_CPU}, or every rank at CPU "
    f"{STALLED_CPU}, while the links between the ranks carry {STALLED_LINK}",
)
def rank_stalled(ctx: RuleContext) -> list[Finding]:
    groups = [g for g in ctx.analysis.groups if len(g.members) >= 2]
    if not groups:
        raise NotEvaluable("no rank group (processes of one job exchanging data) found")
    out: list[Finding] = []
    measured = False
    for group in groups:
        ranks = [_rank_state(ctx, group, m) for m in group.members]
        if any(r.node.get("cpu_pct") is None for r in ranks):
            ctx.skip(group.label, "no cpu_pct for its ranks (needs a window)")
            continue
        measured = True
        out += _stalled_findings(ctx, group, ranks)
    if not measured:
        raise NotEvaluable("no cpu_pct for the ranks (needs a window)")
    return out


def _stalled_findings(ctx: RuleContext, group: Group, ranks: list[RankState]) -> list[Finding]:
    # a thread caught in D state at the window's end is common on a healthy job (a log
    # write): it is a stall only when the rank links stood still (L5.d-state reports it
    # otherwise); a stopped rank is reported either way
    culprits = [
        r
        for r in ranks
        if r.stopped or (r.blocked is not None and r.links is not None and r.links.quiet)
    ]
    if culprits:
        return [_culprit_finding(ctx, group, r, ranks) for r in culprits]
    if all(r.idle and r.links is not None and r.links.quiet for r in ranks) and any(
        r.links.lifetime_bytes >= MIB for r in ranks if r.links
    ):
        return [_silent_job_finding(ctx, group, ranks)]
    return []


def _culprit_finding(
    ctx: RuleContext, group: Group, rank: RankState, ranks: list[RankState]
) -> Finding:
    window = _window(ctx, rank)
    peers = [r for r in ranks if r is not rank]
    # a stopped rank that ran no CPU in the whole window stopped before it began: its peers
    # wait the whole window even when its links show bytes, which are what the peers pushed
    # into its receive buffers (and its kernel drained from its send buffer) after the stop
    waiting = rank.links is not None and (rank.links.quiet or bool(rank.stopped and rank.idle))
    pid = rank.node.get("pid")
    if rank.stopped:
        how = "stopped by a tracer (state t)" if rank.stopped == "t" else "stopped (state T)"
        action = (
            "The whole job waits on this rank: resume it (`kill -CONT`) if it was stopped by "
            "mistake (job control, a SIGSTOP), or find who stopped it (`grep TracerPid "
            "/proc/PID/status`: a debugger); restart the job if it cannot continue."
        )
        command = f"kill -CONT {pid}" if rank.stopped == "T" and pid else None
    else:
        assert rank.blocked is not None  # a culprit is stopped or blocked
        latency = rank.node.get("ebpf_block_lat_max_ms")  # eBPF's block I/O, when it ran
        seen = f", block I/O latency up to {latency:.0f} ms" if latency is not None else ""
        how = (
            f"blocked in D state ({ctx.label(rank.blocked.id)} off CPU "
            f"{rank.blocked_off_pct:.0f} % of the window{seen})"
        )
        action = (
            "The rank waits in the kernel (storage, a network filesystem, a driver) and the "
            "job waits on it: read its kernel stack, then the disk or mount it uses (layer 5)."
        )
        command = f"cat /proc/{pid}/task/{rank.blocked.get('tid')}/stack" if pid else None
    ran = _ran_text(rank, window)
    title = f"Rank {ctx.label(rank.node.id)} {how}: {ran}"
    if waiting:
        title += f"; {len(peers)} peer{'s' if len(peers) != 1 else ''} wait " + _links_text(rank)
    return ctx.finding(
        subject=rank.node.id,
        value=round(window, 1) if ran.startswith("no CPU") else rank.node.get("cpu_pct"),
        priority="P0" if waiting else "P1",
        title=title,
        evidence=_evidence(ctx, rank, peers),
        impact=f"the job ({group.label}) makes no progress while it lasts"
        if waiting
        else "its links still moved data in the window: it stopped at the window's end",
        action=action,
        command=command,
    )


def _silent_job_finding(ctx: RuleContext, group: Group, ranks: list[RankState]) -> Finding:
    window = _window(ctx, ranks[0])
    names = ", ".join(ctx.label(r.node.id) for r in ranks[:4])
    before = max(r.links.lifetime_bytes for r in ranks if r.links) / MIB
    held = _held_outside(ctx, group)
    blocked = ctx.graph.node(held.process) if held is not None else None
    target = blocked if blocked is not None else ranks[0].node
    if held is not None:
        impact = (
            f"{ctx.label(held.process)} waits {100 * held.share:.0f} % of the window "
            f"{WAIT_WORDS[held.first.how]} {held.first.via or ''} on {held.end} (see "
            "L6.wait-chain), and the other ranks wait for it"
        )
        action = (
            f"The job stands still because {held.process} is blocked outside it: remove what "
            f"holds it ({held.end}, named by L6.wait-chain); its stack shows the call it "
            "blocks in."
        )
    else:
        impact = "every rank waits: a hang (a collective one rank never joined, a lock, a "
        impact += "peer that left)"
        action = (
            "Dump every rank's Python stack (`py-spy dump --pid PID`) to see which "
            "collective or lock they wait in; a rank that never entered it is the culprit."
        )
    evidence = [e for r in ranks for e in _evidence(ctx, r, [])]
    evidence += [e for e in (_shares_evidence(ctx, r.node.id) for r in ranks) if e is not None]
    return ctx.finding(
        subject=held.process if held is not None else "+".join(r.node.id for r in ranks),
        value=round(window, 1),
        priority="P0",
        title=f"Job of {group.label} made no progress for the whole {window:.1f} s window: "
        f"{names} ran {STALLED_CPU} and their links carried {STALLED_LINK} "
        f"(up to {before:.0f} MiB before)",
        evidence=evidence,
        impact=impact,
        action=action,
        command=f"py-spy dump --pid {target.get('pid')}" if target.get("pid") else None,
    )


def _held_outside(ctx: RuleContext, group: Group) -> Chain | None:
    """The longest wait of a rank's main thread that leads out of the rank group (a full
    pipe, a lock held by its own thread…): what a stalled job is really stuck on."""
    waits, owner = ctx.analysis.waits, ctx.analysis.facts.thread_owner
    found = []
    for rank in group.members:
        main = waits.main_thread(rank)
        for chain in waits.chains_of(rank):
            leads_out = owner.get(chain.end, chain.end) not in set(group.members) - {rank}
            if main is not None and chain.victim == main.id and leads_out:
                found.append(chain)
    return max(found, key=lambda c: c.share, default=None)


def _shares_evidence(ctx: RuleContext, rank: str) -> Evidence | None:
    main = ctx.analysis.waits.main_thread(rank)
    if main is None:
        return None
    shares = {k: round(100 * v, 1) for k, v in (main.get("time_shares") or {}).items()}
    return Evidence("entity", [main.id], shares, ctx.window_s,
                    "main thread's time shares, % of the window")  # fmt: skip


# --------------------------------------------------------------------------- readings


def _rank_state(ctx: RuleContext, group: Group, member: str) -> RankState:
    node = ctx.graph.nodes[member]  # group members are nodes of the graph
    threads = ctx.analysis.threads_of(node)
    states = [str(t.get("state") or "")[:1] for t in threads] or [str(node.get("state") or "")[:1]]
    stopped = next((s for s in STOPPED_STATES if states and all(x == s for x in states)), None)
    blocked, off = _longest_blocked(threads)
    return RankState(node, _rank_links(ctx, group, member), stopped, blocked, off)


def _longest_blocked(threads: list[Node]) -> tuple[Node | None, float]:
    """The thread in D state longest off CPU over the window (schedstat: neither running
    nor waiting for a CPU), when that is at least ``BLOCKED_OFF_CPU``."""
    best, best_off = None, 0.0
    for thread in threads:
        if not str(thread.get("state") or "").startswith("D") or thread.get("cpu_pct") is None:
            continue
        off = 100.0 - thread.get("cpu_pct") - (thread.get("run_delay_pct") or 0.0)
        if BLOCKED_OFF_CPU.reached(off) and off > best_off:
            best, best_off = thread, off
    return best, best_off


def _rank_links(ctx: RuleContext, group: Group, member: str) -> RankLinks | None:
    """The measured TCP links between ``member`` and the other ranks; None when none was
    measured over a window (no sockets data, or ranks joined by something else)."""
    others = set(group.members) - {member}
    peers, rate, lifetime, window = [], 0.0, 0, 0.0
    for peer, talk in ctx.analysis.talks(member):
        edge = talk  # talks_to edges
        if peer not in others or edge.get("bytes_per_s") is None:
            continue
        peers.append(peer)
        rate += edge.get("bytes_per_s")
        lifetime += edge.get("bytes") or 0
        window = max(window, edge.get("window_s") or 0.0)
    if not peers:
        return None
    return RankLinks(sorted(set(peers)), rate, lifetime, window)


def _window(ctx: RuleContext, rank: RankState) -> float:
    return rank.node.get("window_s") or ctx.window_s or (rank.links.window_s if rank.links else 0)


def _ran_text(rank: RankState, window: float) -> str:
    cpu = rank.node.get("cpu_pct")
    if rank.idle:
        return f"no CPU time in the whole {window:.1f} s window (so for ≥ {window:.1f} s)"
    return f"{cpu:.0f} % of a CPU over the {window:.1f} s window"


def _links_text(rank: RankState) -> str:
    links = rank.links
    assert links is not None
    return (
        f"(its links to {', '.join(links.peers[:3])} carried {links.window_rate:.0f} B/s, "
        f"{links.lifetime_bytes / MIB:.0f} MiB before)"
    )


def _evidence(ctx: RuleContext, rank: RankState, peers: list[RankState]) -> list[Evidence]:
    out = [ctx.entity(rank.node, "state", "cpu_pct", "window_s", note="rank")]
    if rank.blocked is not None:
        out.append(ctx.entity(rank.blocked, "state", "cpu_pct", "run_delay_pct", "tid"))
    if rank.links is not None:
        out.append(
            Evidence(
                "edge",
                [rank.node.id, *rank.links.peers],
                {
                    "window_bytes_per_s": round(rank.links.window_rate, 1),
                    "lifetime_bytes": rank.links.lifetime_bytes,
                },
                rank.links.window_s or ctx.window_s,
                note="links to the other ranks",
            )
        )
    if peers:
        out.append(
            Evidence(
                "aggregate",
                [p.node.id for p in peers],
                {
                    "state": [p.node.get("state") for p in peers],
                    "cpu_pct": [p.node.get("cpu_pct") for p in peers],
                },
                ctx.window_s,
                note="peers",
            )
        )
    return out
