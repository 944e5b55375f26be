"""Layer 6 — Control plane: scheduling delay, preemption, load, CPU sharing with ranks, stragglers."""

from __future__ import annotations

from collections import Counter

from wp_mcp.graph import Node
from wp_mcp.graph.cpulist import format_cpulist
from wp_mcp.graph.query import cpu_set, host_prefix

from ..report import Evidence, Finding, Priority, safe
from ..rulebook import GROUP_DETAIL, WORST_SHOWN, NotEvaluable, RuleContext, rule
from ..thresholds import (
    BUSY_THREAD,
    HOG_DEMAND,
    IMBALANCE,
    IMBALANCE_BUSY,
    INVOL_BUSY,
    INVOL_SWITCHES,
    LOAD_OVER_CPUS,
    PEER_WAIT_GAP,
    PSI_SOME,
    RANK_DELAY_SHARE,
    RANK_RUN_DELAY,
    RUN_DELAY,
    SHARED_CPUS_QUIET,
)
from ..waitfor import PEER_WAITS, WAIT_WORDS, shares_text
from .compute import USE_METHOD
from .contention import (
    NAMED,
    Contention,
    contentions,
    delay_evidence,
    demand,
    host_evidence,
    host_priority,
    job_evidence,
    job_processes,
    neighbour_evidence,
    neighbour_words,
    plain_neighbours,
    rank_cpus,
)
from .data import workers_that_fit
from .memory import PSI_DOC, psi_findings


def _process_of(ctx: RuleContext, thread: Node) -> str | None:
    owners = ctx.graph.predecessors(thread.id, "has_thread")
    return owners[0].id if owners else None


@rule(
    "L6.run-queue-delay",
    6,
    "Runnable threads waiting for a CPU",
    "thread run_delay_pct (share of the window runnable but not running)",
    f"{RUN_DELAY}; a rank group: {RANK_RUN_DELAY} and {RANK_DELAY_SHARE} (P1 when a CPU "
    "quota, the job's own surplus or outside load causes it; a pinned hog: "
    "L6.cpu-hog-on-rank-cpus)",
)
def run_queue_delay(ctx: RuleContext) -> list[Finding]:
    threads = ctx.having("thread", "run_delay_pct", why="no per-thread run delay (schedstat)")
    out = [_group_delay(ctx, found) for found in contentions(ctx) if found.delayed]
    return out + _thread_delays(ctx, threads, job_processes(ctx))


def _thread_delays(ctx: RuleContext, threads: list[Node], judged: set[str]) -> list[Finding]:
    """Busy threads of processes outside any rank group, the most delayed per process."""
    worst: dict[str, Node] = {}
    for thread in threads:
        proc = _process_of(ctx, thread) or thread.id
        if proc in judged or not BUSY_THREAD.reached(thread.get("cpu_pct") or 0):
            continue
        if proc not in worst or thread.get("run_delay_pct") > worst[proc].get("run_delay_pct"):
            worst[proc] = thread
    out = []
    for proc, thread in worst.items():
        delay = thread.get("run_delay_pct")
        if not RUN_DELAY.reached(delay):
            continue
        out.append(
            ctx.finding(
                subject=thread.id,
                value=delay,
                priority="P1",
                title=f"{ctx.label(thread.id)} of {ctx.label(proc)} waited for a CPU "
                f"{delay:.0f} % of the window",
                evidence=[
                    ctx.entity(
                        thread, "run_delay_pct", "cpu_pct", "invol_switches_per_s", "cpus_allowed"
                    )
                ],
                impact=f"≈ {delay:.0f} % of the window lost waiting",
                action="Something else runs on its CPUs: see the hotspot threads; give it "
                "CPUs of its own (taskset/cpuset) or fewer busy threads beside it.",
            )
        )
    return out


def _group_delay(ctx: RuleContext, found: Contention) -> Finding:
    """One finding for a rank group's delayed ranks, naming what delays them."""
    worst = found.delayed[0]
    ranks = [d.rank for d in found.delayed]
    named = ", ".join(map(ctx.label, ranks[:4])) + (
        f" and {len(ranks) - 4} more" if ranks[4:] else ""
    )
    title = (
        f"{named} waited for a CPU up to {worst.delay:.0f} % of the window "
        f"({worst.share:.0f} % of the time they wanted one)"
    )
    evidence = [delay_evidence(ctx, found)]
    host = ctx.host_for(ranks[0])
    if host is not None:
        evidence.append(host_evidence(ctx, host, found))
    cause, action, command = _cause_words(ctx, found)
    if found.cause == "outside":
        evidence.append(neighbour_evidence(ctx, found))
    evidence.append(job_evidence(ctx, found))
    return ctx.finding(
        subject=found.subject,
        value=worst.delay,
        priority=found.priority,
        title=f"{title}: {cause}",
        evidence=evidence,
        impact=f"their CPU work takes ≈ {100 * worst.delay / max(worst.thread.get('cpu_pct'), 1):.0f} % "
        "longer; every rank waits for the slowest",
        action=action,
        command=command,
    )


def _cause_words(ctx: RuleContext, found: Contention) -> tuple[str, str, str | None]:
    """(what delays the ranks, what to do, a command) for the contention's cause."""
    if found.cause == "hog":
        hogs = ", ".join(found.hogs[:NAMED])
        return (
            f"{hogs} pinned onto their CPUs",
            "Said at P0 by L6.cpu-hog-on-rank-cpus with its fix: move the hog off the ranks' CPUs.",
            None,
        )
    if found.cause == "outside":
        plain = plain_neighbours(ctx, found)[:NAMED]
        pids = " ".join(str(p.get("pid")) for p in plain if p.get("pid") is not None)
        return (
            f"outside load (noisy neighbours): {neighbour_words(ctx, found)}",
            "Processes outside the job take the CPUs its ranks wait for: move them to another "
            "host or off the job's CPUs, or lower their share (renice 19, cgroup cpu.weight); "
            "give the job CPUs of its own (cpuset).",
            f"renice -n 19 -p {pids}" if pids else None,
        )
    if found.cause == "throttled":
        return (
            f"its CPU quota: cgroup {safe(found.cgroup, 60)} throttled "
            f"{found.throttled:.0f} % of the window",
            "The job's cgroup quota (cpu.max / --cpus / k8s limits) is below what its ranks "
            "and workers use: raise it, or run fewer loader workers.",
            None,
        )
    if found.cause == "job":
        host_cpus = ctx.host_cpus(found.group.members[0])
        pinned = f" (pinned onto {found.cpus} of {host_cpus})" if found.cpus != host_cpus else ""
        also = f"; outside load adds {neighbour_words(ctx, found)}" if found.outside_loaded else ""
        return (
            f"the job itself wants more than its {found.cpus} CPUs{pinned}: "
            f"{found.job_busy} processes want ≈ {found.own_demand:.0f} % of a CPU{also}",
            ("Unpin the job: give each rank CPUs of its own (taskset/cpuset). " if pinned else "")
            + _fewer_workers(ctx, found, host_cpus or found.cpus),
            None,
        )
    return (
        f"neither outside load ({found.outside_cpu:.0f} % of a CPU) nor the job's own demand "
        f"({found.job_demand:.0f} % of {found.cpus or '?'} CPUs) explains it",
        "Short bursts of contention: see the hotspot threads; nothing to change unless it grows.",
        None,
    )


def _fewer_workers(ctx: RuleContext, found: Contention, cpus: int | None) -> str:
    """Loader workers that fit ``cpus`` (the host's: the job unpinned), one CPU each."""
    ranks = len(found.group.members)
    if not cpus or not any(ctx.analysis.dataloaders.get(r) for r in found.group.members):
        return "The job's own processes want more CPU than it has: fewer threads per rank."
    workers = [w for r in found.group.members for w in ctx.analysis.dataloaders.get(r, [])]
    wanted = sum(demand(node) for node in filter(None, map(ctx.graph.node, workers)))
    if wanted < found.job_demand / 3:  # the extra demand is the ranks' own work
        by_rank = {r: demand(n) for r in found.group.members if (n := ctx.graph.node(r))}
        busiest = max(by_rank, key=lambda r: (by_rank[r], r))
        least = min(by_rank.values())
        uneven = f", {by_rank[busiest] / least:.1f}× the least busy" if least > 0 else ""
        return (
            f"The ranks' own work is the demand (their loader workers want only ≈ {wanted:.0f} "
            f"% of a CPU): {busiest} wants ≈ {by_rank[busiest]:.0f} % of a CPU{uneven} (see "
            "L6.rank-imbalance). Balance the ranks' work or give the job more CPUs; fewer "
            "workers would not help."
        )
    fit = workers_that_fit(cpus, ranks)
    return (
        f"Its busy processes outnumber the CPUs: set num_workers={fit} per rank on this host "
        f"({ranks} ranks + {fit * ranks} workers ≤ {cpus} CPUs)"
        + (", i.e. load in the trainer itself" if fit == 0 else "")
        + ", or give the job more CPUs."
    )


@rule(
    "L6.involuntary-switches",
    6,
    "Busy threads preempted often",
    "thread invol_switches_per_s",
    f"{INVOL_SWITCHES} on a thread using {INVOL_BUSY} (P1 on a rank whose run delay is "
    "not measured: otherwise L6.run-queue-delay judges what the preemption costs)",
)
def involuntary_switches(ctx: RuleContext) -> list[Finding]:
    out = []
    for thread in ctx.having("thread", "invol_switches_per_s"):
        rate, busy = thread.get("invol_switches_per_s"), thread.get("cpu_pct") or 0
        if not (INVOL_SWITCHES.reached(rate) and INVOL_BUSY.reached(busy)):
            continue
        proc = _process_of(ctx, thread)
        unmeasured = thread.get("run_delay_pct") is None
        out.append(
            ctx.finding(
                subject=thread.id,
                value=rate,
                priority="P1" if proc in ctx.analysis.ranks and unmeasured else "P2",
                title=f"{ctx.label(thread.id)} preempted {rate:.0f} times/s at {busy:.0f} % CPU",
                evidence=[ctx.entity(thread, "invol_switches_per_s", "cpu_pct", "run_delay_pct")],
                action="It shares its CPU with other runnable threads: pin it to a CPU of its "
                "own or reduce the number of busy threads (OMP/MKL threads, workers).",
            )
        )
    return out


@rule(
    "L6.load-over-cpus",
    6,
    "More runnable tasks than CPUs",
    "host load1 / cpus",
    f"{LOAD_OVER_CPUS} (P2 when a rank group's delay, or another CPU rule, says it)",
    f"{USE_METHOD}: CPU saturation when the run queue exceeds the CPU count",
    "published",
)
def load_over_cpus(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "load1"):
        count = ctx.host_cpus(host.id)
        if not count:
            raise NotEvaluable("the host's CPU count is unknown")
        load = host.get("load1")
        if LOAD_OVER_CPUS.reached(load / count):
            priority, pointer = host_priority(ctx, host)
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=round(load / count, 2),
                    priority=priority,
                    title=f"Load {load:.1f} on {count} CPUs{pointer}",
                    evidence=[ctx.entity(host, "load1", "load5", "cpus")],
                    action="Too many runnable (or D-state) tasks: reduce worker/thread counts "
                    "to the CPUs the job owns.",
                )
            )
    return out


@rule(
    "L6.psi-cpu",
    6,
    "Tasks stalled waiting for CPU (PSI)",
    "psi cpu_some_avg10",
    f"{PSI_SOME} (P2 when a rank group's delay, or another CPU rule, says it)",
    PSI_DOC,
)
def psi_cpu(ctx: RuleContext) -> list[Finding]:
    found = psi_findings(
        ctx,
        "cpu",
        "waited for a CPU",
        "CPU is oversubscribed: see the hotspot threads and L6.run-queue-delay.",
    )
    for finding in found:
        host = ctx.graph.node(finding.subject or "")
        if host is not None:
            finding.priority, pointer = host_priority(ctx, host)
            finding.title += pointer
    return found


@rule(
    "L6.cpu-hog-on-rank-cpus",
    6,
    "Another busy process pinned onto the ranks' CPUs",
    "cpu_pct + run_delay_pct of a non-job process whose affinity lies within the ranks' CPUs",
    f"{HOG_DEMAND} running (or, pinned there, running and runnable: P0; P2 when it could move)",
)
def cpu_hog_on_rank_cpus(ctx: RuleContext) -> list[Finding]:
    if not ctx.analysis.ranks:
        raise NotEvaluable("no rank group found (no processes working together)")
    if not any(p.get("cpu_pct") is not None for p in ctx.graph.of_kind("process")):
        raise NotEvaluable("no process cpu_pct in this snapshot (needs a collection window)")
    pinned_ranks = rank_cpus(ctx)
    if not pinned_ranks:
        raise NotEvaluable("the ranks are not pinned (affinity is every CPU), so no CPU is theirs")
    reserved_on: dict[str, set[int]] = {}  # per host: CPU numbers of two hosts differ
    ranks_on: dict[tuple[str, int], list[str]] = {}  # (host, CPU) → the ranks allowed it
    for rank, cpus in sorted(pinned_ranks.items()):
        reserved_on.setdefault(host_prefix(rank), set()).update(cpus)
        for cpu in cpus:
            ranks_on.setdefault((host_prefix(rank), cpu), []).append(rank)
    job = set(ctx.analysis.ranks) | set(ctx.analysis.roles)
    out = []
    for proc in ctx.graph.of_kind("process"):
        busy = proc.get("cpu_pct")
        allowed = cpu_set(proc.get("cpus_allowed"))
        reserved = reserved_on.get(host_prefix(proc.id), set())
        if proc.id in job or busy is None or not allowed & reserved:
            continue
        total = ctx.host_cpus(proc.id)
        # pinned by someone's choice: narrower than the host and entirely on the ranks' CPUs
        pinned = allowed <= reserved and (total is None or len(allowed) < total)
        # pinned, its turns waiting there are turns the ranks take from it and it from them
        if not HOG_DEMAND.reached(demand(proc) if pinned else busy):
            continue
        prefix = host_prefix(proc.id)
        victims = sorted({r for cpu in allowed & reserved for r in ranks_on[(prefix, cpu)]})
        named = ", ".join(victims[:4]) + (f" and {len(victims) - 4} more" if victims[4:] else "")
        out.append(
            ctx.finding(
                subject=proc.id,
                value=busy,
                priority="P0" if pinned else "P2",
                title=f"{ctx.label(proc.id)} uses {busy:.0f} % CPU{_waiting(proc)} on CPUs "
                f"{format_cpulist(allowed & reserved)} reserved for {named}",
                evidence=[
                    ctx.entity(proc, "cpu_pct", "cpus_allowed", "cmdline"),
                    Evidence(
                        "aggregate",
                        victims,
                        {r: format_cpulist(pinned_ranks[r]) for r in victims[:WORST_SHOWN]},
                        note="ranks' CPU affinity"
                        + (f", the first {WORST_SHOWN} shown" if victims[WORST_SHOWN:] else ""),
                    ),
                ],
                impact="the ranks on those CPUs get only part of them; the group runs at the "
                "pace of the slowest rank",
                action=f"Move {proc.id} off the ranks' CPUs (or stop it).",
                command=_move_off(ctx, proc, reserved),
            )
        )
    return out


def _waiting(proc: Node) -> str:
    """`` (and waits 89 % runnable)``: a hog losing its CPU to the ranks still takes turns."""
    waited = proc.get("run_delay_pct") or 0.0
    return f" (and waits {waited:.0f} % runnable)" if BUSY_THREAD.reached(waited) else ""


def _move_off(ctx: RuleContext, proc: Node, reserved: set[int]) -> str | None:
    total = ctx.host_cpus(proc.id)
    if not total or proc.get("pid") is None:
        return None
    free = set(range(total)) - reserved
    if not free:
        return f"kill -STOP {proc.get('pid')}  # no CPU is free of ranks on this host"
    return f"taskset -a -c -p {format_cpulist(free)} {proc.get('pid')}"


@rule(
    "L6.rank-imbalance",
    6,
    "Ranks of one group progress unevenly: the others wait for the slowest",
    "the ranks' shares of the window waiting on their peers (time breakdown), else max/min "
    "cpu_pct across the ranks of a group",
    f"{PEER_WAIT_GAP} more waiting on peers than the slowest rank, else {IMBALANCE} with the "
    f"busiest {IMBALANCE_BUSY} (P2 when the slowest is itself held back: CPU, disk, a chain)",
)
def rank_imbalance(ctx: RuleContext) -> list[Finding]:
    """The slow rank of a synchronous job is the one the others wait for: it waits least on
    its peers, and what it does instead is why (it computes longer, waits for a CPU, blocks
    on a disk or a pipe)."""
    if not ctx.analysis.groups:
        raise NotEvaluable("no rank group found (no processes working together)")
    out, measured = [], False
    for group in ctx.analysis.groups:
        nodes = [n for n in map(ctx.graph.node, group.members) if n is not None]
        waiting = {n.id: peer_wait(ctx, n.id) for n in nodes}
        if all(w is not None for w in waiting.values()) and len(waiting) >= 2:
            measured = True
            found = _slowest_by_waits(
                ctx, group, {k: v for k, v in waiting.items() if v is not None}
            )
        else:
            load = {n.id: n.get("cpu_pct") for n in nodes if n.get("cpu_pct") is not None}
            if len(load) < 2:
                ctx.skip(group.label, "fewer than two of its ranks have cpu_pct")
                continue
            measured = True
            found = _slowest_by_cpu(ctx, group, load)
        if found is not None:
            out.append(found)
    if not measured:
        raise NotEvaluable("no cpu_pct for the ranks (needs a collection window)")
    return out


def peer_wait(ctx: RuleContext, rank: str) -> float | None:
    return ctx.analysis.waits.peer_wait(rank)


def _main_id(ctx: RuleContext, rank: str) -> str | None:
    main = ctx.analysis.waits.main_thread(rank)
    return main.id if main is not None else None


def _slowest_by_waits(ctx: RuleContext, group, waiting: dict[str, float]) -> Finding | None:
    slow = min(waiting, key=lambda r: (waiting[r], r))
    waiter = max(waiting, key=lambda r: (waiting[r], r))
    gap = waiting[waiter] - waiting[slow]
    if not PEER_WAIT_GAP.reached(100 * gap):
        return None
    waits = ctx.analysis.waits
    slow_shares, waiter_shares = waits.shares_of(slow), waits.shares_of(waiter)
    reason, held_back = _what_slow_does(ctx, group, slow, slow_shares, waiter_shares)
    peers = [r for r in waiting if r != slow]
    title = (
        f"{ctx.label(waiter)} waits {100 * waiting[waiter]:.0f} % of the window for "
        f"{ctx.label(slow)} ({shares_text(_only(waiter_shares, PEER_WAITS), 2)}); "
        f"{ctx.label(slow)} {reason}"
    )
    evidence = [
        Evidence("entity", [r], _pct(waits.shares_of(r)), ctx.window_s,
                 f"{'the slowest rank' if r == slow else 'waits on its peers'}; "
                 "time shares of its main thread, % of the window")
        for r in [slow, *sorted(peers, key=lambda r: -waiting[r])[:WORST_SHOWN]]
    ]  # fmt: skip
    return _imbalance_finding(ctx, group, slow, round(100 * gap, 1), title, evidence, held_back)


def _what_slow_does(
    ctx: RuleContext, group, slow: str, shares: dict[str, float], waiter: dict[str, float]
) -> tuple[str, str | None]:
    """(what the slowest rank does instead of waiting, the rule that owns it when it is
    itself held back)."""
    owner = ctx.analysis.facts.thread_owner
    chains = [
        c
        for c in ctx.analysis.waits.chains_of(slow)
        if c.victim == _main_id(ctx, slow)
        and owner.get(c.end, c.end) not in set(group.members) - {slow}
    ]
    if chains and chains[0].end_kind in ("busy", "sleeping", "blocked", "link"):
        chain = chains[0]
        return (
            f"itself waits {100 * chain.share:.0f} % {chain.first.how} on {chain.end}",
            "L6.wait-chain",
        )
    on_cpu, other = shares.get("on_cpu", 0.0), waiter.get("on_cpu", 0.0)
    runnable = shares.get("runnable", 0.0)
    computes_more = other > 0 and IMBALANCE.reached(on_cpu / other)
    if RANK_RUN_DELAY.reached(100 * runnable) and not computes_more:
        return f"waits for a CPU {100 * runnable:.0f} % of the window", "L6.run-queue-delay"
    for klass, rule_id in (("disk_io", "L5.d-state"), ("page_fault", "layer 2"),
                           ("stopped", "L6.rank-stalled")):  # fmt: skip
        if shares.get(klass, 0.0) >= 0.2:
            return f"is {WAIT_WORDS[klass]} {100 * shares[klass]:.0f} % of the window", rule_id
    times = f"{on_cpu / other:.1f}× as long as its peers" if other > 0 else "while they wait"
    also = f" (and waits for a CPU {100 * runnable:.0f} %)" if runnable >= 0.05 else ""
    return f"computes {100 * on_cpu:.0f} % of the window, {times}{also}", None


def _slowest_by_cpu(ctx: RuleContext, group, load: dict[str, float]) -> Finding | None:
    """Without time shares: the busiest rank computes longest per step, the least busy
    waits for it."""
    hot, cold = max(load, key=load.__getitem__), min(load, key=load.__getitem__)
    ratio = load[hot] / max(load[cold], 1e-6)
    if not (IMBALANCE_BUSY.reached(load[hot]) and IMBALANCE.reached(ratio)):
        return None
    title = (
        f"{group.label}: {ctx.label(hot)} at {load[hot]:.0f} % CPU vs {ctx.label(cold)} at "
        f"{load[cold]:.0f} %: the others wait for {hot}"
    )
    evidence = [Evidence("aggregate", list(load), {m: round(v, 1) for m, v in load.items()},
                         ctx.window_s, "the ranks' cpu_pct")]  # fmt: skip
    node = ctx.graph.node(hot)
    delayed = node is not None and RANK_RUN_DELAY.reached(node.get("run_delay_pct"))
    return _imbalance_finding(ctx, group, hot, round(ratio, 2), title, evidence,
                              "L6.run-queue-delay" if delayed else None)  # fmt: skip


def _imbalance_finding(ctx: RuleContext, group, slow: str, value: float, title: str,
                       evidence: list[Evidence], held_back: str | None) -> Finding:  # fmt: skip
    node = ctx.graph.node(slow)
    pid = node.get("pid") if node is not None else None
    if held_back:
        action = (f"{slow} is the slowest rank, and it is held back itself: {held_back} "
                  "names what holds it; remove that and the group moves at its peers' pace.")  # fmt: skip
    else:
        action = (
            f"{slow} is the straggler: every collective waits for it. It does more work per "
            "step than its peers (an uneven shard or batch size, work only it does: "
            "evaluation, logging, checkpoints): balance the work across the ranks or take "
            "that work off the step; py-spy shows what it computes."
        )
    return ctx.finding(
        subject=slow,
        value=value,
        priority="P2" if held_back else "P1",
        title=title,
        evidence=evidence,
        impact=f"{group.label} moves at {slow}'s pace",
        action=action,
        command=f"py-spy dump --pid {pid}" if pid and not held_back else None,
    )


def _only(shares: dict[str, float], keys: tuple[str, ...]) -> dict[str, float]:
    return {k: v for k, v in shares.items() if k in keys}


def _pct(shares: dict[str, float]) -> dict[str, float]:
    return {k: round(100 * v, 1) for k, v in shares.items()}


@rule(
    "L6.ranks-share-cpus",
    6,
    "Pinned ranks overlap on CPUs",
    "intersection of ranks' CPU affinity (process and every thread)",
    "non-empty between two pinned ranks (P2 when their threads' run delay is measured "
    f"{SHARED_CPUS_QUIET})",
)
def ranks_share_cpus(ctx: RuleContext) -> list[Finding]:
    if not ctx.analysis.ranks:
        raise NotEvaluable("no rank group found (no processes working together)")
    pinned = rank_cpus(ctx)
    if len(pinned) < 2:
        raise NotEvaluable("fewer than two ranks are pinned, so overlap is not a choice made")
    return [_overlap_finding(ctx, group, pinned) for group in overlap_groups(pinned)]


def overlap_groups(rank_cpus: dict[str, set[int]]) -> list[list[str]]:
    """Ranks of one host linked by shared CPUs (A shares with B, B with C: one group), each
    group sorted, found through a CPU → first-claimant map: linear in the CPUs claimed, not
    quadratic in the ranks."""
    parent = {rank: rank for rank in rank_cpus}

    def root(rank: str) -> str:
        while parent[rank] != rank:
            parent[rank] = parent[parent[rank]]
            rank = parent[rank]
        return rank

    claimant: dict[tuple[str, int], str] = {}  # CPU numbers of two hosts are different CPUs
    for rank in sorted(rank_cpus):
        prefix = host_prefix(rank)
        for cpu in rank_cpus[rank]:
            first = claimant.setdefault((prefix, cpu), rank)
            if first != rank:
                parent[root(rank)] = root(first)
    groups: dict[str, list[str]] = {}
    for rank in sorted(rank_cpus):
        groups.setdefault(root(rank), []).append(rank)
    return [members for members in groups.values() if len(members) > 1]


def _overlap_finding(
    ctx: RuleContext, members: list[str], rank_cpus: dict[str, set[int]]
) -> Finding:
    claims = Counter(cpu for rank in members for cpu in rank_cpus[rank])
    contested = {cpu for cpu, count in claims.items() if count > 1}
    # the worst: the most CPUs it shares, then the longest run delay of its threads
    shared = {rank: len(rank_cpus[rank] & contested) for rank in members}
    delays = {rank: _worst_run_delay(ctx, [ctx.graph.node(rank)]) for rank in members}
    ranked = sorted(members, key=lambda r: (-shared[r], -(delays[r] or 0.0), r))
    delay = max((d for d in delays.values() if d is not None), default=None)
    if delay is None:
        impact = "contention not measured (no run-queue delay in this snapshot): the overlap "
        impact += "is a risk the scheduler may or may not realise"
    else:
        impact = f"their threads waited up to {delay:.1f} % of the window for a CPU"
    plan = [ctx.analysis.bindings.get(r) for r in members]
    # on a one-node host there is no node to choose: NUMA advice would be noise
    nodes = len(ctx.analysis.numa_nodes.get(host_prefix(members[0]), {}))
    slice_of = " (a disjoint slice of its device's NUMA node)" if nodes > 1 else ""
    action = f"Give each rank CPUs of its own{slice_of}" + (
        ": the fix plan does, for every thread (taskset -a)." if all(plan) else "."
    )
    priority: Priority = "P2" if SHARED_CPUS_QUIET.reached(delay) else "P1"
    cpus = format_cpulist(contested)
    if len(members) == 2:
        return _pair_finding(ctx, members, cpus, rank_cpus, priority, impact, action)
    commands = map(ctx.analysis.plan_command, members) if len(members) <= GROUP_DETAIL else ()
    worst = {rank: format_cpulist(rank_cpus[rank]) for rank in ranked[:WORST_SHOWN]}
    named = ", ".join(ranked[:3]) + (f" and {len(members) - 3} more" if len(members) > 3 else "")
    return ctx.group_finding(
        key=f"{members[0]}+{len(members) - 1}-ranks",
        members=members,
        worst=worst,
        priority=priority,
        value=cpus,
        title=f"{len(members)} ranks may run on shared CPUs {cpus} ({named})",
        note=f"affinity of each process and its threads; {len(contested)} CPUs are claimed by "
        f"more than one of the {len(members)} ranks; those sharing the most first",
        impact=impact,
        action=action,
        command=" && ".join(filter(None, commands)) or None,
    )


def _pair_finding(
    ctx: RuleContext,
    pair: list[str],
    cpus: str,
    rank_cpus: dict[str, set[int]],
    priority: Priority,
    impact: str,
    action: str,
) -> Finding:
    first, second = pair
    procs = filter(None, map(ctx.graph.node, pair))
    via = sorted(t for proc in procs for t in ctx.analysis.foreign_threads(proc))
    threads = f" (through threads {', '.join(via[:4])})" if via else ""
    return ctx.finding(
        subject=f"{first}+{second}",
        value=cpus,
        priority=priority,
        title=f"{first} and {second} may both run on CPUs {cpus}{threads}",
        evidence=[
            Evidence(
                "aggregate",
                [first, second] + via[:6],
                {
                    first: format_cpulist(rank_cpus[first]),
                    second: format_cpulist(rank_cpus[second]),
                },
                note="affinity of each process and its threads",
            )
        ],
        impact=impact,
        action=action,
        command=" && ".join(filter(None, map(ctx.analysis.plan_command, pair))) or None,
    )


def _worst_run_delay(ctx: RuleContext, procs: list) -> float | None:
    delays = [
        t.get("run_delay_pct")
        for proc in procs
        for t in ctx.analysis.threads_of(proc)
        if t.get("run_delay_pct") is not None
    ]
    return max(delays) if delays else None
