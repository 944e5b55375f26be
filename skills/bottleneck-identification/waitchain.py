"""Layer 6 — what the job's threads wait for, followed to the cause (skills/waitfor.py).

Each thread of the job blocked a share of the window on a pipe, a socket or a lock is
followed to what it waits for; the finding's subject is the chain's end — a busy thread (the
GIL holder beside a starved main thread, a saturated stage the others wait on), a reader
that does not drain its pipe, the link a send waits on — and the threads it passed through
are the evidence, each with its time shares. The priority is the job's loss: the share of
the window the victim spent waiting on that cause.

Chains other rules own are left to them: a rank waiting on another rank of its group
(L6.rank-imbalance names the slow rank), a trainer waiting on its own loaders (layer 7), a
writer held back by a consumer that is busy (backpressure: the consumer is the job's work).
"""

from __future__ import annotations

from wp_mcp.graph import Node

from ..report import Evidence, Finding, Priority
from ..rulebook import NotEvaluable, RuleContext, rule
from ..thresholds import CHAIN_LOSS, CHAIN_LOSS_P0
from ..waitfor import WAIT_WORDS, Chain, shares_text, wants_cpu

CRITICAL_ROLES = ("rank", "front end")  # a wait of theirs is the job's own time


@rule(
    "L6.wait-chain",
    6,
    "The job waits on something at the end of a wait-for chain",
    "a job thread's share of the window blocked on a pipe, socket or lock, followed to its end",
    f"{CHAIN_LOSS} (P0 {CHAIN_LOSS_P0} on a rank or front end)",
)
def wait_chain(ctx: RuleContext) -> list[Finding]:
    waits = ctx.analysis.waits
    if not waits.threads:
        raise NotEvaluable("no thread time shares in this snapshot (the waits collector)")
    best: dict[str, tuple[Chain, list[Chain]]] = {}  # cause → (the worst chain, all of them)
    for proc in sorted(waits.threads):
        if ctx.analysis.is_profiler(proc):
            continue
        for chain in waits.chains_of(proc):
            if not _ours(ctx, chain):
                continue
            worst, every = best.get(chain.end, (chain, []))
            every.append(chain)
            best[chain.end] = (worst if worst.share >= chain.share else chain, every)
    return [_finding(ctx, worst, every) for worst, every in best.values()]


def _ours(ctx: RuleContext, chain: Chain) -> bool:
    """A chain this rule reports: measurable, and no other rule's."""
    if not CHAIN_LOSS.reached(100 * chain.share) or chain.end_kind == "lock":
        return False
    if ctx.analysis.is_profiler(chain.end) or ctx.analysis.is_profiler(chain.end_process):
        return False
    if not _works(ctx, chain):
        return False
    last, end = chain.hops[-1].how, chain.end_process
    if last in ("pipe_write", "socket_send"):
        if chain.end_kind == "busy":
            return False  # backpressure: the consumer is busy doing the job's work
    elif chain.end_kind != "busy" and _longest(chain.end_shares) not in STUCK:
        return False  # waiting for input from an idle producer: no demand, not a loss
    end_proc = ctx.analysis.facts.thread_owner.get(end or "", end)
    if end_proc in ctx.analysis.dataloaders.get(chain.process, []):
        return False  # a trainer waiting on its loaders: layer 7
    for group in ctx.analysis.groups:
        if chain.process in group.members and end_proc in group.members:
            return end_proc == chain.process  # rank → rank: L6.rank-imbalance
    return True


STUCK = ("disk_io", "page_fault", "stopped", "pipe_write", "socket_send")  # held, not idle
WORKING = 0.05  # a thread other than the main one is a victim only when it works this much


def _works(ctx: RuleContext, chain: Chain) -> bool:
    """The victim is a thread whose waiting costs the job: its process's main thread, or a
    thread that works between its waits (an idle helper blocked all window loses nothing)."""
    main = ctx.analysis.waits.main_thread(chain.process)
    return (main is not None and main.id == chain.victim) or wants_cpu(
        ctx.graph.node(chain.victim)
    ) >= WORKING


def _longest(shares: dict[str, float]) -> str | None:
    return max(shares, key=lambda k: shares[k]) if shares else None


def _finding(ctx: RuleContext, chain: Chain, every: list[Chain]) -> Finding:
    role = ctx.analysis.roles.get(chain.process)
    loss = max(c.share for c in every)
    peer, peer_loss = _peers_waiting(ctx, chain.process)
    priority = _priority(role, max(loss, peer_loss), chain)  # the group waits on it too
    action, command = _fix(ctx, chain)
    victims = sorted({c.process for c in every})
    impact = (f"{', '.join(victims[:3])} lose{'s' if len(victims) == 1 else ''} "
              f"≈ {100 * loss:.0f} % of the window waiting on it")  # fmt: skip
    if peer is not None:
        impact += f"; its peer {ctx.label(peer)} waits {100 * peer_loss:.0f} % of the window for it"
    return ctx.finding(
        subject=chain.end,
        value=round(100 * loss, 1),
        priority=priority,
        title=chain_title(ctx, chain),
        evidence=_evidence(ctx, chain, every),
        impact=impact,
        action=action,
        command=command,
    )


def _peers_waiting(ctx: RuleContext, rank: str) -> tuple[str | None, float]:
    """The peer of a rank that waits longest on its peers, and that share, when the rank is
    the one they wait for (it waits less on them): what its own wait costs its group."""
    waits = ctx.analysis.waits
    for group in ctx.analysis.groups:
        if rank in group.members:
            own = waits.peer_wait(rank) or 0.0
            others = {p: waits.peer_wait(p) for p in group.members if p != rank}
            known = {p: w for p, w in others.items() if w is not None and w > own + 0.05}
            if known:
                worst = max(known, key=lambda p: known[p])
                return worst, known[worst]
    return None, 0.0


def _priority(role: str | None, loss: float, chain: Chain) -> Priority:
    if chain.first.how == "socket_send" and chain.end_kind == "link":
        return "P1" if CHAIN_LOSS_P0.reached(100 * loss) else "P2"  # layer 4 judges the link
    if role in CRITICAL_ROLES or role is None:
        return "P0" if CHAIN_LOSS_P0.reached(100 * loss) else "P1"
    return "P1" if CHAIN_LOSS_P0.reached(100 * loss) else "P2"


def chain_title(ctx: RuleContext, chain: Chain) -> str:
    """``thr:1 (python3) waits 70 % of the window writing into the full pipe pipe:9, read by
    proc:2 (cat), which sleeps (sleep 95 %)``: every hop, then what the end does."""
    role = ctx.analysis.roles.get(chain.process)
    main = ctx.analysis.waits.main_thread(chain.process)
    if main is not None and main.id == chain.victim:  # the process itself waits
        lead = f"{role + ' ' if role else ''}{ctx.label(chain.process)}"
    else:
        lead = (
            f"{ctx.label(chain.victim)} of {role + ' ' if role else ''}{ctx.label(chain.process)}"
        )
    parts = []
    for index, hop in enumerate(chain.hops):
        share = f"{100 * hop.share:.0f} %" + (" of the window" if index == 0 else "")
        text = f"{lead + ' waits' if index == 0 else 'which waits'} {share} {HOP_WORDS[hop.how]}"
        text += f" {hop.via}" if hop.via else ""
        if hop.to != hop.via:
            text += f" {_TOWARD[hop.how]} {ctx.label(hop.to)}"
        parts.append(text)
    thread = chain.end != chain.hops[-1].to and chain.end_kind == "busy"
    whose = f", whose thread {ctx.label(chain.end)} is busy ({shares_text(chain.end_shares, 2)})"
    if thread:
        return ", ".join(parts) + whose
    return ", ".join(parts) + (f", {_doing(chain)}" if chain.end_shares else "")


def _pid(ctx: RuleContext, proc: str) -> int | None:
    node = ctx.graph.node(proc)
    return node.get("pid") if node is not None else None


HOP_WORDS = {
    "pipe_write": "writing into the full pipe",
    "pipe_read": "reading the empty pipe",
    "socket_recv": "receiving on",
    "socket_send": "sending on (its send buffer full)",
    "futex": "on a lock",
}
_TOWARD = {
    "pipe_write": "read by",
    "pipe_read": "written by",
    "socket_recv": "from",
    "socket_send": "to",
    "futex": "while its sibling runs:",
}


def _wait(how: str) -> str:
    return HOP_WORDS.get(how, WAIT_WORDS.get(how, how))


def _doing(chain: Chain) -> str:
    kind = chain.end_kind
    shares = shares_text(chain.end_shares, 2)
    if kind == "busy":
        return f"which is busy ({shares})"
    if kind == "cycle":
        return f"which waits back on it ({shares})"
    if kind == "sleeping":
        return f"which sleeps ({shares})"
    return f"which does {shares}"


def _fix(ctx: RuleContext, chain: Chain) -> tuple[str, str | None]:
    """What removes the cause at the chain's end, and a command aimed at the right pid."""
    victim_pid = _pid(ctx, chain.process)
    spy = f"py-spy dump --pid {victim_pid}" if victim_pid else None
    last = chain.hops[-1]
    if last.how == "futex" and chain.end_kind == "busy":
        return (
            f"{chain.end} keeps a CPU busy while its own process's {chain.victim} waits on a "
            "lock: with Python that is the GIL, which one thread holds at a time, so pinning "
            "or more CPUs cannot help. Move that thread's work out of the process (a "
            "multiprocessing worker, a DataLoader worker, a separate service) or into code "
            "that releases the GIL (NumPy/torch ops on large arrays, a C extension), or make "
            "it yield (smaller chunks, a sleep between them).",
            spy,
        )
    if last.how == "pipe_write":
        return (
            f"{chain.end} does not drain the pipe {last.via} fast enough ({_doing(chain)[6:]}), so "
            f"the writer blocks on every write once its buffer is full: make the reader read "
            "continuously (or read into a file), enlarge the pipe (fcntl F_SETPIPE_SZ), or "
            "write less into it (log level, a file or an asynchronous log handler).",
            spy,
        )
    if chain.end_kind == "link":
        return (
            f"The sender waits for {last.via} to drain: the link, its window or its buffers "
            "limit it — see the network layer's findings for this socket (L4).",
            f"ss -tmi | grep -A1 {_port(ctx, last.via)}" if _port(ctx, last.via) else None,
        )
    if chain.end_kind == "busy":
        owner = ctx.analysis.facts.thread_owner.get(chain.end, chain.end)
        owner_pid = _pid(ctx, owner)
        return (
            f"{ctx.label(owner)} is the stage the others wait for: it is on a CPU "
            f"{100 * _wants(chain.end_shares):.0f} % of the window. Make its work per item "
            "cheaper, or run more of that stage (processes or threads that do not share a "
            "GIL) so it keeps up; see what it runs with py-spy.",
            f"py-spy dump --pid {owner_pid}" if owner_pid else spy,
        )
    if chain.end_kind == "cycle":
        return (
            "The processes wait on each other: a deadlock or a protocol that both wait in; "
            "dump both stacks to see the calls they block in.",
            spy,
        )
    return (
        f"{chain.end} is where the wait ends ({_doing(chain)}): see what it waits in, then "
        "the layer of that resource.",
        spy,
    )


def _wants(shares: dict[str, float]) -> float:
    return shares.get("on_cpu", 0.0) + shares.get("runnable", 0.0)


def _port(ctx: RuleContext, sock: str | None) -> int | None:
    node = ctx.graph.node(sock or "")
    return node.get("local_port") if node is not None else None


def _evidence(ctx: RuleContext, chain: Chain, every: list[Chain]) -> list[Evidence]:
    """Each thread of the chain with its time shares, then the other victims."""
    out = []
    for hop in chain.hops:
        node = ctx.graph.node(hop.waiter)
        if node is not None:
            out.append(_shares(ctx, node, f"waits {100 * hop.share:.0f} % {_wait(hop.how)}"))
    end = ctx.graph.node(chain.end)
    if chain.end_thread and ctx.graph.node(chain.end_thread) is not None:
        out.append(_shares(ctx, ctx.graph.nodes[chain.end_thread], "the end of the chain"))
    elif end is not None and end.kind == "socket":
        out.append(ctx.entity(end, "rwnd_limited_pct", "sndbuf_limited_pct", "snd_wnd_bytes",
                              "tx_queue", "notsent_bytes", note="the link"))  # fmt: skip
    others = [c for c in every if c is not chain]
    if others:
        out.append(
            Evidence(
                "aggregate",
                [c.victim for c in others],
                {c.victim: round(100 * c.share, 1) for c in others[:8]},
                ctx.window_s,
                note="other threads waiting on it, % of the window",
            )
        )
    return out


def _shares(ctx: RuleContext, thread: Node, note: str) -> Evidence:
    shares = {k: round(100 * v, 1) for k, v in (thread.get("time_shares") or {}).items()}
    return Evidence("entity", [thread.id], shares, ctx.window_s, f"{note}; % of the window")
