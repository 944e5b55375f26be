"""Why a job's ranks wait for a CPU: judged once, read by the four CPU rules.

Host CPU busy (L1.cpu-saturation), load over the CPUs (L6.load-over-cpus), CPU pressure
(L6.psi-cpu) and the ranks' run-queue delay (L6.run-queue-delay) restate one cause. On a
small host a job with loader workers keeps every CPU busy by itself: that is its operating
point, not a problem. It is one when the ranks are measurably delayed (a share of the
window, and a share of the time they wanted a CPU) and something is to blame:

* **a hog** pinned onto the ranks' CPUs (L6.cpu-hog-on-rank-cpus names it, P0);
* **a CPU quota**: the job's cgroup is throttled (cpu.max);
* **the job itself**: its ranks and loader workers, running or runnable, want more CPU than
  the CPUs they may use (too many workers, or ranks pinned onto too few CPUs);
* **outside load**: processes outside the job take CPU time (noisy neighbours, named).

The run-queue finding carries that cause at P0/P1 (one finding per rank group, the host's
busy, load and PSI figures folded in as evidence); the host rules then say P2 and point at
it. A job whose ranks are not measurably delayed leaves the host rules at P2 too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from wp_mcp.graph import Node
from wp_mcp.graph.cpulist import format_cpulist
from wp_mcp.graph.query import cpu_set, host_prefix

from ..analysis import Group
from ..report import Evidence, Priority, safe
from ..rulebook import RuleContext
from ..thresholds import (
    BUSY_THREAD,
    CPU_BUSY,
    HOG_DEMAND,
    JOB_THROTTLED,
    LOAD_OVER_CPUS,
    NEIGHBOUR_CPU,
    OUTSIDE_LOAD,
    PSI_SOME,
    RANK_DELAY_SHARE,
    RANK_RUN_DELAY,
)

Cause = Literal["hog", "throttled", "job", "outside", "unexplained"]
NAMED = 4  # neighbours a finding names
_MEMO = "_cpu_contention"


@dataclass
class Delay:
    """A rank's most delayed busy thread over the window."""

    rank: str
    thread: Node
    delay: float  # % of the window runnable but not running
    share: float  # % of the time it wanted a CPU (running + runnable) spent waiting


@dataclass
class Contention:
    """One rank group on one host: who waited, who used the CPUs, and the verdict."""

    host: str  # host prefix
    group: Group
    job: set[str]  # the group's processes: ranks, loaders, launcher and its descendants
    cpus: int | None  # the CPUs the job's processes may use (the host's when unpinned)
    delayed: list[Delay] = field(default_factory=list)  # measurably delayed, worst first
    job_cpu: float = 0.0  # % of one CPU the job used
    job_demand: float = 0.0  # … plus its run-queue wait: what it wanted
    job_busy: int = 0  # the job's processes running or runnable ≥ BUSY_THREAD of a CPU
    throttled: float = 0.0  # % of the window the job's cgroup was throttled (the most)
    cgroup: str | None = None  # … that cgroup
    outside_cpu: float = 0.0  # % of one CPU used by other processes (not the profiler)
    neighbours: list[tuple[Node, float]] = field(default_factory=list)  # busiest first
    hogs: list[str] = field(default_factory=list)  # pinned onto the ranks' CPUs

    @property
    def cause(self) -> Cause:
        if self.hogs:
            return "hog"
        if JOB_THROTTLED.reached(self.throttled):
            return "throttled"
        if self.cpus and self.own_demand >= 100 * self.cpus and self.job_busy > self.cpus:
            return "job"
        if self.outside_loaded:
            return "outside"
        return "unexplained"

    @property
    def own_demand(self) -> float:
        """What the job would want with no one else on the host (% of one CPU): its CPU
        time plus the share of its wait that its own processes caused, in proportion to the
        CPU they took (outside load lengthens every wait; that part is not the job's)."""
        waited = self.job_demand - self.job_cpu
        used = self.job_cpu + self.outside_cpu
        return self.job_cpu + (waited * self.job_cpu / used if used else 0.0)

    @property
    def outside_loaded(self) -> bool:
        return OUTSIDE_LOAD.reached(self.outside_cpu) and bool(self.neighbours)

    @property
    def priority(self) -> Priority:
        """P1 when the ranks are measurably delayed by outside load or by the job's own
        oversubscription; P2 when a hog's P0 finding already says it, or nothing is to blame."""
        return "P1" if self.delayed and self.cause not in ("hog", "unexplained") else "P2"

    @property
    def subject(self) -> str:
        return "+".join(d.rank for d in self.delayed)


def contentions(ctx: RuleContext) -> list[Contention]:
    """Every rank group's CPU contention per host, once per analysis."""
    memo = ctx.analysis.__dict__
    if _MEMO not in memo:
        memo[_MEMO] = [c for g in ctx.analysis.groups for c in _of_group(ctx, g)]
    return memo[_MEMO]


def primary(ctx: RuleContext, host: Node) -> Contention | None:
    """The contention on ``host`` whose run-queue finding is the P0/P1 one, if any."""
    prefix = host_prefix(host.id)
    found = [c for c in contentions(ctx) if c.host == prefix and c.priority != "P2"]
    return max(found, key=lambda c: c.delayed[0].delay, default=None)


def job_on(ctx: RuleContext, host: Node) -> list[Contention]:
    prefix = host_prefix(host.id)
    return [c for c in contentions(ctx) if c.host == prefix]


def job_processes(ctx: RuleContext) -> set[str]:
    """Processes of every rank group (their delay is judged per group, not per thread)."""
    return {p for c in contentions(ctx) for p in c.job}


def _of_group(ctx: RuleContext, group: Group) -> list[Contention]:
    job = _job_of(ctx, group)
    hosts = sorted({host_prefix(m) for m in group.members})
    return [_judge(ctx, group, job, prefix) for prefix in hosts]


def _job_of(ctx: RuleContext, group: Group) -> set[str]:
    """The ranks, their loaders and descendants, and the launcher itself (not the
    launcher's other children: orphaned ranks' parent is init, whose descendants are all)."""
    analysis = ctx.analysis
    job = set(group.members)
    for member in group.members:
        job.update(analysis.dataloaders.get(member, ()))
        job |= analysis.descendants(member)
    parent = ctx.graph.node(group.parent) if group.parent else None
    if parent is not None and parent.get("pid") != 1:
        job.add(parent.id)
    return job - analysis.profiler


def _judge(ctx: RuleContext, group: Group, job: set[str], prefix: str) -> Contention:
    found = Contention(prefix, group, job, _job_cpus(ctx, group, ctx.host_cpus(group.members[0])))
    found.delayed = sorted(
        filter(None, (_delay(ctx, m) for m in group.members if host_prefix(m) == prefix)),
        key=lambda d: -d.delay,
    )
    outside = []
    for proc in processes_on(ctx, prefix):
        used = proc.get("cpu_pct")
        if used is None or proc.id in ctx.analysis.profiler:
            continue
        if proc.id in job:
            found.job_cpu += used
            found.job_demand += demand(proc)
            found.job_busy += BUSY_THREAD.reached(demand(proc))
            if (proc.get("cpu_throttled_pct") or 0.0) > found.throttled:
                found.throttled, found.cgroup = proc.get("cpu_throttled_pct"), proc.get("cgroup")
        else:
            found.outside_cpu += used
            outside.append((proc, used))
    outside.sort(key=lambda pair: (-pair[1], pair[0].id))
    found.neighbours = [(p, used) for p, used in outside if NEIGHBOUR_CPU.reached(used)]
    found.hogs = pinned_hogs(ctx, prefix, group, job)
    return found


def _job_cpus(ctx: RuleContext, group: Group, host_cpus: int | None) -> int | None:
    """How many CPUs the ranks and their loaders may run on together (their pinning), at
    most the host's."""
    workers = [w for m in group.members for w in ctx.analysis.dataloaders.get(m, ())]
    allowed: set[int] = set()
    for proc in filter(None, map(ctx.graph.node, [*group.members, *workers])):
        allowed |= ctx.analysis.affinity(proc)
    if not allowed:
        return host_cpus
    return min(len(allowed), host_cpus) if host_cpus else len(allowed)


def _delay(ctx: RuleContext, rank: str) -> Delay | None:
    """The rank's most delayed busy thread, when the delay is measurable: a share of the
    window and a share of the time the thread wanted a CPU."""
    node = ctx.graph.node(rank)
    if node is None:
        return None
    worst = None
    for thread in ctx.analysis.threads_of(node):
        delay, used = thread.get("run_delay_pct"), thread.get("cpu_pct") or 0.0
        if delay is None or not BUSY_THREAD.reached(used):
            continue
        if worst is None or delay > worst.delay:
            worst = Delay(rank, thread, delay, 100 * delay / (delay + used))
    if worst and RANK_RUN_DELAY.reached(worst.delay) and RANK_DELAY_SHARE.reached(worst.share):
        return worst
    return None


def pinned_hogs(ctx: RuleContext, prefix: str, group: Group, job: set[str]) -> list[str]:
    """Other processes pinned within the group's pinned ranks' CPUs that ran or waited to
    run there (HOG_DEMAND): the ones L6.cpu-hog-on-rank-cpus reports at P0."""
    by_rank = rank_cpus(ctx)
    reserved = {
        cpu
        for rank in group.members
        if host_prefix(rank) == prefix
        for cpu in by_rank.get(rank, ())
    }
    if not reserved:
        return []
    total = ctx.host_cpus(next(iter(job)))
    ours = job | ctx.analysis.ranks | set(ctx.analysis.roles)
    hogs = []
    for proc in processes_on(ctx, prefix):
        allowed = cpu_set(proc.get("cpus_allowed"))
        if proc.id in ours or not allowed:
            continue
        pinned = allowed <= reserved and (total is None or len(allowed) < total)
        if pinned and proc.get("cpu_pct") is not None and HOG_DEMAND.reached(demand(proc)):
            hogs.append(proc.id)
    return hogs


def processes_on(ctx: RuleContext, prefix: str) -> list[Node]:
    """The processes of one host (indexed once per analysis: every rank group on every host
    reads its own host's, so a cluster costs one pass over its processes, not one each)."""
    memo = ctx.analysis.__dict__
    if "_processes_on" not in memo:
        by_host: dict[str, list[Node]] = {}
        for proc in ctx.graph.of_kind("process"):
            by_host.setdefault(host_prefix(proc.id), []).append(proc)
        memo["_processes_on"] = by_host
    return memo["_processes_on"].get(prefix, [])


def demand(proc: Node) -> float:
    """CPU a process ran plus what it waited runnable (% of one CPU): a hog that loses the
    CPU to a rank still takes turns from it."""
    return (proc.get("cpu_pct") or 0.0) + (proc.get("run_delay_pct") or 0.0)


def rank_cpus(ctx: RuleContext) -> dict[str, set[int]]:
    """CPUs each rank or any of its threads may run on, when narrower than the whole host
    (once per analysis: three rules read it)."""
    memo = ctx.analysis.__dict__
    if "_rank_cpus" not in memo:
        out = {}
        for rank in ctx.analysis.ranks:
            node = ctx.graph.node(rank)
            allowed = ctx.analysis.affinity(node) if node else set()
            total = ctx.host_cpus(rank)
            if allowed and (total is None or len(allowed) < total):
                out[rank] = allowed
        memo["_rank_cpus"] = out
    return memo["_rank_cpus"]


# --------------------------------------------------------------------------- words


def neighbour_words(ctx: RuleContext, found: Contention) -> str:
    """``pytest 42 %, python 20 % and 3 more (95 % of a CPU in all)``."""
    shown = [f"{safe(p.get('name') or p.id, 30)} {used:.0f} %" for p, used in found.neighbours]
    more = len(shown) - NAMED
    listed = ", ".join(shown[:NAMED]) + (f" and {more} more" if more > 0 else "")
    return f"{listed} ({found.outside_cpu:.0f} % of a CPU in all)"


def plain_neighbours(ctx: RuleContext, found: Contention) -> list[Node]:
    """The named neighbours that are no other rank group's processes (a job slowed by a
    second job is that job's neighbour: a finding about it names the second job by value
    only, so a diagnosis scoped to the second job does not take it for its own)."""
    others = {p for c in contentions(ctx) if c.group is not found.group for p in c.job}
    return [p for p, _ in found.neighbours if p.id not in others]


def neighbour_evidence(ctx: RuleContext, found: Contention) -> Evidence:
    """The outside processes by CPU used (see plain_neighbours)."""
    named = plain_neighbours(ctx, found)
    values = {p.id: round(used, 1) for p, used in found.neighbours[: NAMED * 2]}
    note = "CPU used by processes outside the job (% of one CPU), busiest first"
    ids = [p.id for p in named] or [d.rank for d in found.delayed]  # never the host's id
    return Evidence("aggregate", ids, values, ctx.window_s, note)


def delay_evidence(ctx: RuleContext, found: Contention) -> Evidence:
    values = {
        d.thread.id: {"run_delay_pct": round(d.delay, 1), "cpu_pct": d.thread.get("cpu_pct"),
                      "waiting_share_pct": round(d.share, 1),
                      "cpus_allowed": format_cpulist(cpu_set(d.thread.get("cpus_allowed")))}
        for d in found.delayed
    }  # fmt: skip
    ids = [d.rank for d in found.delayed] + [d.thread.id for d in found.delayed]
    note = f"{found.group.label}: each delayed rank's most delayed busy thread"
    return Evidence("aggregate", ids, values, ctx.window_s, note)


def job_evidence(ctx: RuleContext, found: Contention) -> Evidence:
    values = {
        "job_cpu_pct": round(found.job_cpu, 1),
        "job_demand_pct": round(found.job_demand, 1),
        "job_own_demand_pct": round(found.own_demand, 1),
        "busy_processes": found.job_busy,
        "cpus": found.cpus,
    }
    note = "the job's processes: CPU used, used + waited, and what of that its own processes "
    note += "caused (% of one CPU)"
    return Evidence("aggregate", sorted(found.job)[:12], values, ctx.window_s, note)


def host_evidence(ctx: RuleContext, host: Node, found: Contention) -> Evidence:
    """The host's CPU figures the host rules would report on their own, folded in. Its ids
    are the delayed ranks, not the host: a host id would make the finding concern every job
    on the host (skills/job_scope.py keeps findings naming a job's host)."""
    values = {a: host.get(a) for a in ("cpu_busy_pct", "load1", "cpus") if host.get(a) is not None}
    psi = (host.get("psi") or {}).get("cpu_some_avg10")
    if psi is not None:
        values["psi_cpu_some_avg10"] = psi
    note = f"{host.id} CPU busy, load and pressure while they waited (L1.cpu-saturation, "
    note += "L6.load-over-cpus, L6.psi-cpu)"
    return Evidence("aggregate", [d.rank for d in found.delayed], values, ctx.window_s, note)


# --------------------------------------------------------------------------- host rules

# The host rules restating CPU contention, in the order one of them speaks for the rest
# when no rank group is there to judge.
HOST_RULES = ("L1.cpu-saturation", "L6.load-over-cpus", "L6.psi-cpu")


def _fires(ctx: RuleContext, rule_id: str, host: Node) -> bool:
    if rule_id == "L1.cpu-saturation":
        return CPU_BUSY.reached(host.get("cpu_busy_pct"))
    if rule_id == "L6.load-over-cpus":
        cpus, load = ctx.host_cpus(host.id), host.get("load1")
        return bool(cpus) and load is not None and LOAD_OVER_CPUS.reached(load / cpus)
    return PSI_SOME.reached((host.get("psi") or {}).get("cpu_some_avg10"))


def host_priority(ctx: RuleContext, host: Node) -> tuple[Priority, str]:
    """The priority of a host CPU rule's finding on ``host`` and what its title adds.

    With a rank group on the host the job's delay decides (L6.run-queue-delay carries the
    cause): the host rules are P2. Without one, the first host rule that fires is the P1
    and the others point at it."""
    jobs = job_on(ctx, host)
    if jobs:
        delayed = [c for c in jobs if c.delayed]
        if delayed:
            main = primary(ctx, host) or delayed[0]
            return "P2", f"; the ranks' wait and its cause: L6.run-queue-delay@{main.subject}"
        return "P2", "; the job's ranks are not measurably delayed (its operating point)"
    first = next(r for r in HOST_RULES if _fires(ctx, r, host))
    if first == ctx.rule.id:
        return "P1", ""
    return "P2", f"; the same cause: {first}@{host.id}"
