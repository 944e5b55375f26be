"""Layer 2 — Memory: available memory, swapping, major faults, PSI, NUMA nodes running out."""

from __future__ import annotations

from wp_mcp.graph import Node
from wp_mcp.graph.query import host_prefix, numa_id

from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule
from ..thresholds import (
    BIG_RESIDENT_NAMED,
    CGROUP_MEMORY_FULL,
    CGROUP_PSI,
    CGROUP_RECLAIM,
    MAJOR_FAULTS,
    MEM_AVAILABLE_LOW,
    MEM_AVAILABLE_P0,
    NODE_FREE_LOW,
    PROC_MAJOR_FAULTS,
    PSI_MEMORY_FULL_P0,
    PSI_SOME,
    SWAP_FAULTS_P1,
)
from .compute import USE_METHOD
from .limits import cgroup_name, limited, members, members_evidence, members_named, set_file

GIB = 1 << 30
NAMED = 4  # processes a memory finding names, per kind


def _who(ctx: RuleContext) -> tuple[str, list[Evidence]]:
    """Who waits on memory and who holds it: the processes faulting most (pages read back:
    they stall) and the biggest resident sets beside them (what squeezes them out) — a
    title suffix and the evidence."""
    procs = [p for p in ctx.graph.of_kind("process") if not ctx.analysis.is_profiler(p.id)]
    faulting = sorted(
        (p for p in procs if PROC_MAJOR_FAULTS.reached(p.get("major_faults_per_s"))),
        key=lambda p: -p.get("major_faults_per_s"),
    )[:NAMED]
    shown = {p.id for p in faulting}
    biggest = sorted(
        (p for p in procs if p.id not in shown and p.get("rss_bytes")),
        key=lambda p: -p.get("rss_bytes"),
    )
    big = [p for p in biggest if BIG_RESIDENT_NAMED.reached(p.get("rss_bytes") / (1 << 20))][:2]
    parts = []
    if faulting:
        parts.append("faulting " + ", ".join(
            f"{ctx.who(p)} {p.get('major_faults_per_s'):.0f}/s" for p in faulting))  # fmt: skip
    if big:
        parts.append("biggest resident " + ", ".join(
            f"{ctx.who(p)} {p.get('rss_bytes') / GIB:.1f} GiB" for p in big))  # fmt: skip
    if not parts:
        return "", []
    values = {p.id: p.get("major_faults_per_s") for p in faulting}
    values |= {p.id: p.get("rss_bytes") for p in big}
    note = "major faults/s of the processes faulting most, rss_bytes of the biggest beside them"
    evidence = Evidence("aggregate", [p.id for p in faulting + big], values, ctx.window_s, note)
    return ": " + "; ".join(parts), [evidence]


PSI_DOC = "proposed; PSI semantics per the kernel's Documentation/accounting/psi.rst"


@rule(
    "L2.mem-available-low",
    2,
    "Little memory available",
    "host mem_available_bytes / mem_total_bytes",
    f"{MEM_AVAILABLE_LOW} (P0 under {MEM_AVAILABLE_P0.value:g} %)",
)
def mem_available_low(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "mem_available_bytes", "mem_total_bytes"):
        share = host.get("mem_available_bytes") / host.get("mem_total_bytes") * 100
        if MEM_AVAILABLE_LOW.reached(share):
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=round(share, 1),
                    priority="P0" if MEM_AVAILABLE_P0.reached(share) else "P1",
                    title=f"Only {share:.1f} % of memory available "
                    f"({host.get('mem_available_bytes') / GIB:.1f} GiB)",
                    evidence=[ctx.entity(host, "mem_available_bytes", "mem_total_bytes")],
                    action="Reduce the biggest resident sets (see the memory layer's top "
                    "processes) or lower batch / cache sizes before the OOM killer picks a rank.",
                )
            )
    return out


@rule(
    "L2.swapping",
    2,
    "Swap in use",
    "host swap_used_bytes",
    f"> 0 (P1 with {SWAP_FAULTS_P1})",
    f"{USE_METHOD}: swapping is memory saturation",
    "published",
)
def swapping(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "swap_used_bytes"):
        used = host.get("swap_used_bytes")
        if used > 0:
            faults = host.get("major_faults_per_s") or 0
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=used,
                    priority="P1" if SWAP_FAULTS_P1.reached(faults) else "P2",
                    title=f"{used / GIB:.2f} GiB swapped out",
                    evidence=[ctx.entity(host, "swap_used_bytes", "major_faults_per_s")],
                    action="Keep the job's memory resident: lower memory use, or "
                    "`sysctl vm.swappiness=1` on a dedicated training host.",
                    command="sysctl -w vm.swappiness=1",
                )
            )
    return out


@rule(
    "L2.major-faults",
    2,
    "Major page faults",
    "host major_faults_per_s",
    str(MAJOR_FAULTS),
)
def major_faults(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "major_faults_per_s"):
        rate = host.get("major_faults_per_s")
        if MAJOR_FAULTS.reached(rate):
            named, who = _who(ctx)
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=rate,
                    priority="P1",
                    title=f"{rate:.0f} major page faults/s: pages are read back from disk" + named,
                    evidence=[ctx.entity(host, "major_faults_per_s", "mem_available_bytes"), *who],
                    action="Memory is short or files are mmapped from slow storage: keep "
                    "datasets/checkpoints in page cache or on local NVMe, free memory.",
                )
            )
    return out


def psi_findings(
    ctx: RuleContext, resource: str, stalled: str, action: str, p0_full: float | None = None
) -> list[Finding]:
    """The three PSI rules (cpu, memory, io) in one: ``some_avg10 ≥ 10 %`` is P1, and P0 when
    ``full_avg10`` reaches ``p0_full`` (every task stalled at once)."""
    hosts = [
        h
        for h in ctx.graph.of_kind("host")
        if (h.get("psi") or {}).get(f"{resource}_some_avg10") is not None
    ]
    if not hosts:
        raise NotEvaluable("no PSI in this snapshot (kernel booted without psi=1?)")
    out = []
    for host in hosts:
        psi = host.get("psi")
        some, full = psi[f"{resource}_some_avg10"], psi.get(f"{resource}_full_avg10") or 0
        if not PSI_SOME.reached(some):
            continue
        out.append(
            ctx.finding(
                subject=host.id,
                value=some,
                priority="P0" if p0_full is not None and full >= p0_full else "P1",
                title=f"Tasks {stalled} {some:.0f} % of the last 10 s",
                evidence=[Evidence("entity", [host.id], dict(psi), ctx.window_s)],
                action=action,
            )
        )
    return out


@rule(
    "L2.psi-memory",
    2,
    "Tasks stalled on memory (PSI)",
    "psi memory_some_avg10",
    f"{PSI_SOME} (P0 when memory_full_avg10 {PSI_MEMORY_FULL_P0})",
    PSI_DOC,
)
def psi_memory(ctx: RuleContext) -> list[Finding]:
    found = psi_findings(
        ctx,
        "memory",
        "stalled on memory",
        "Memory reclaim stalls the job: free memory, avoid overcommitting page cache for "
        "datasets, check for swapping.",
        p0_full=PSI_MEMORY_FULL_P0.value,
    )
    named, who = _who(ctx) if found else ("", [])
    for finding in found:
        finding.title += named
        finding.evidence += who
    return found


@rule(
    "L2.numa-node-exhausted",
    2,
    "A process needs more memory than is free on its NUMA node",
    "numa_node mem_free_bytes vs the biggest resident set running on it",
    f"free {NODE_FREE_LOW} and a process there holds more than what is free",
)
def numa_node_exhausted(ctx: RuleContext) -> list[Finding]:
    nodes = ctx.having("numa_node", "mem_free_bytes", "mem_total_bytes")
    procs = [p for p in ctx.graph.of_kind("process") if p.get("rss_bytes")]
    if not procs:
        raise NotEvaluable("no process rss_bytes in this snapshot")
    out = []
    for node in nodes:
        free, total = node.get("mem_free_bytes"), node.get("mem_total_bytes")
        number = numa_id(node)
        if not NODE_FREE_LOW.reached(free / total * 100):
            continue
        residents = [p for p in procs if _home_node(ctx, p) == number]
        if not residents:
            continue
        biggest = max(residents, key=lambda p: p.get("rss_bytes"))
        if biggest.get("rss_bytes") <= free:
            continue
        one_node = len(ctx.analysis.numa_nodes.get(host_prefix(node.id), {})) == 1
        out.append(
            ctx.finding(
                subject=node.id,
                value=round(free / total * 100, 1),
                priority="P1",
                evidence=[
                    ctx.entity(node, "mem_free_bytes", "mem_total_bytes"),
                    ctx.entity(biggest, "rss_bytes", "numa_page_share", "mems_allowed"),
                ],
                **(
                    _host_short(ctx, biggest, free)
                    if one_node
                    else _node_short(ctx, biggest, free, number)
                ),  # fmt: skip
            )
        )
    return out


def _node_short(ctx: RuleContext, biggest: Node, free: float, number: int | None) -> dict:
    """Title, impact and fix on a host of several nodes: room is on another node."""
    pages_home = ctx.analysis.page_share(biggest).get(number) if number is not None else None
    spilled = pages_home is not None and pages_home < 0.8
    return {
        "title": f"NUMA node {number} has {free / GIB:.1f} GiB free while "
        f"{ctx.label(biggest.id)} holds {biggest.get('rss_bytes') / GIB:.1f} GiB there",
        "impact": "new allocations spill to remote nodes or trigger reclaim"
        + (" (its pages already spill)" if spilled else ""),
        "action": f"Give {biggest.id} a node with room, or spread it with "
        "`numactl --interleave=all`, or shrink it; keep other big consumers off node "
        f"{number}.",
        "command": f"numastat -p {biggest.get('pid')}",
    }


def _host_short(ctx: RuleContext, biggest: Node, free: float) -> dict:
    """On a host with one NUMA node the node is the host: no other node to bind to or spill
    onto, so the fix is memory, not placement."""
    return {
        "title": f"Only {free / GIB:.1f} GiB of memory free while {ctx.label(biggest.id)} "
        f"holds {biggest.get('rss_bytes') / GIB:.1f} GiB",
        "impact": "new allocations must reclaim page cache first, then swap or meet the OOM killer",
        "action": f"Shrink {biggest.id} (batch size, caches, per-worker copies of the dataset) "
        "or move other memory-heavy work off this host; see L2.mem-available-low for what "
        "is reclaimable.",
        "command": f"grep -E 'VmRSS|VmSwap' /proc/{biggest.get('pid')}/status",
    }


def _home_node(ctx: RuleContext, proc) -> int | None:
    cpu = ctx.analysis.cpu_share(proc)
    if cpu:
        return max(cpu, key=lambda n: cpu[n])
    pages = ctx.analysis.page_share(proc)
    if pages:
        return max(pages, key=lambda n: pages[n])
    nodes = ctx.analysis.numa_nodes.get(host_prefix(proc.id), {})
    return next(iter(nodes)) if len(nodes) == 1 else None


@rule(
    "L2.memory-bandwidth",
    2,
    "Memory bandwidth saturated",
    "DRAM bandwidth per NUMA node",
    "≥ 80 % of peak",
)
def memory_bandwidth(ctx: RuleContext) -> list[Finding]:
    raise NotEvaluable("needs uncore PMU memory-controller counters; this snapshot has none")


@rule(
    "L2.cgroup-memory-limit",
    2,
    "A cgroup's memory limit makes its processes read pages back from disk",
    "cgroup major faults or refaults/s while at its limit (memory.events, memory.stat)",
    f"{CGROUP_RECLAIM} at {CGROUP_MEMORY_FULL} or with limit events in the window, or memory "
    f"PSI {CGROUP_PSI}; P0 on an OOM kill",
    "proposed; cgroup v2 memory.high/memory.max, memory.events (the kernel's cgroup-v2.rst)",
)
def cgroup_memory_limit(ctx: RuleContext) -> list[Finding]:
    """The limit is the subject: the processes reclaiming under it are its evidence, the
    largest resident first (a neighbour inside the same cgroup shows there too)."""
    out, measured = [], False
    for cgroup in limited(ctx, "memory_limit_bytes", "a memory limit"):
        limit = cgroup.get("memory_limit_bytes")
        reclaim = _reclaim_rate(cgroup)
        psi = (cgroup.get("psi") or {}).get("memory_some_pct")
        procs = members(ctx, cgroup, "rss_bytes")
        if (reclaim is None and psi is None) or not procs or not limit:
            continue
        measured = True
        kills = cgroup.get("memory_oom_kill_events") or 0
        events = (cgroup.get("memory_high_events") or 0) + (cgroup.get("memory_max_events") or 0)
        used = 100 * (cgroup.get("memory_current_bytes") or 0) / limit
        at_limit = CGROUP_MEMORY_FULL.reached(used) or events > 0
        stalled = CGROUP_RECLAIM.reached(reclaim) or CGROUP_PSI.reached(psi)
        if not kills and not (at_limit and stalled):
            continue
        file = cgroup.get("memory_limit_file") or "memory.max"
        why = (
            f"OOM-killed {kills} process(es)"
            if kills
            else (f"{reclaim or 0:.0f} pages/s read back from disk at {used:.0f} % of it")
        )
        faulting = sorted(
            (p for p in procs if (p.get("major_faults_per_s") or 0) > 0),
            key=lambda p: (-p.get("major_faults_per_s"), p.id),
        )
        if faulting:
            why += f", by {members_named(ctx, faulting)}"
        largest = procs[0]
        holder = f"; the largest resident: {ctx.label(largest.id)}" + (
            f" ({largest.get('rss_bytes') / (1 << 20):.0f} MiB)" if largest.get("rss_bytes") else ""
        )
        out.append(
            ctx.finding(
                subject=cgroup.id,
                value=reclaim if reclaim is not None else psi,
                priority="P0" if kills else "P1",
                title=f"The memory limit of {cgroup_name(cgroup)} "
                f"({limit / (1 << 20):.0f} MiB, {file}): {why}{holder}",
                evidence=[
                    ctx.entity(
                        cgroup,
                        "memory_limit_bytes",
                        "memory_current_bytes",
                        "memory_anon_bytes",
                        "memory_file_bytes",
                        "memory_major_faults_per_s",
                        "memory_refaults_per_s",
                        "memory_high_events",
                        "memory_max_events",
                        "memory_oom_kill_events",
                        "psi",
                    ),  # fmt: skip
                    members_evidence(ctx, procs, "rss_bytes", "major_faults_per_s"),
                ],
                impact="what does not fit under the limit is evicted and read back from disk "
                "(a memory-mapped dataset, code, anonymous pages): its processes wait on it",
                action=f"Raise the cgroup's memory limit ({file}; --memory, k8s limits, "
                "systemd MemoryHigh=/MemoryMax= set it) above its working set, anonymous memory "
                "plus the files it maps: at least twice the present limit, then check that its "
                "major faults and memory.events stop growing; or move what else lives in it out.",
                command=set_file(cgroup, file, str(2 * limit)),
            )
        )
    if not measured:
        raise NotEvaluable("no reclaim counters over a window for a cgroup with a memory limit")
    return out


def _reclaim_rate(cgroup: Node) -> float | None:
    rates = [cgroup.get(a) for a in ("memory_major_faults_per_s", "memory_refaults_per_s")]
    known = [r for r in rates if r is not None]
    return max(known) if known else None
