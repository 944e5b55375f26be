"""How far a rank runs from its accelerator's NUMA node, as a finding.

Layer 3's ``L3.device-numa-mismatch`` rule reports misplaced ranks with these findings, and
the topology skill reports the same fact the same way (under that rule's id): one wording,
one grouping, one command for both.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from wp_mcp.graph.cpulist import format_cpulist
from wp_mcp.graph.query import host_prefix

from .analysis import GRADES, Placement
from .report import Evidence, Finding, Priority
from .rulebook import GROUP_DETAIL, WORST_SHOWN, RuleContext
from .thresholds import ON_DEVICE_NODE_WRONG

VENDOR_AFFINITY = (
    "proposed grading: vendors bind each rank to its device's NUMA node "
    "(nvidia-smi topo -m and npu-smi info -t topo print that CPU affinity)"
)
GOOD = GRADES[0][0]  # the share graded "good"
PLACEMENT_THRESHOLD = f"{ON_DEVICE_NODE_WRONG} is the wrong node (P0); under {GOOD:g} mild (P1)"


def _placement_priority(place: Placement) -> Priority:
    return "P0" if ON_DEVICE_NODE_WRONG.reached(place.cpu_on_device_node) else "P1"


def placement_finding(ctx: RuleContext, place: Placement) -> Finding:
    """The headline Layer 3 finding; the topology skill reports the same fact the same way."""
    proc = ctx.graph.nodes[place.process]
    node = place.device_node
    binding = ctx.analysis.bindings.get(place.process)
    launch, live = ctx.analysis.bind_commands(proc, node)
    if binding is not None:
        launch, live = binding.launch, ctx.analysis.plan_command(place.process)
    cpulist = ctx.analysis.numa_cpulist(host_prefix(proc.id), node)
    away = place.dominant_cpu_node
    return ctx.finding(
        subject=place.process,
        value=round(place.cpu_on_device_node, 3),
        priority=_placement_priority(place),
        title=f"{ctx.label(place.process)} uses {place.device} (NUMA {node}) but runs "
        f"{place.cpu_share.get(away, 0):.0%} of its CPU time on NUMA {away}",
        evidence=[
            Evidence(
                "entity",
                [place.device],
                {"numa_node": node, "how": place.device_node_how},
                note=f"device home node, CPUs {cpulist}" if cpulist else None,
            ),
            Evidence(
                "entity",
                [place.process],
                {
                    "cpu_share": {str(k): round(v, 3) for k, v in sorted(place.cpu_share.items())},
                    "page_share": {
                        str(k): round(v, 3) for k, v in sorted(place.page_share.items())
                    },
                },
                ctx.window_s,
            ),
            Evidence("edge", [place.process, place.device], {"uses_device": 1}),
            *_thread_evidence(ctx, proc),
        ],
        impact=placement_impact(ctx, place),
        action=_placement_action(ctx, place, launch),
        command=live or launch,
        certain=place.device_node_certain,
        threshold=PLACEMENT_THRESHOLD,
    )


# SLIT distances: 10 is local; a node of the same socket is closer than 2x that.
CROSS_SOCKET_DISTANCE = 20


def placement_impact(ctx: RuleContext, place: Placement) -> str:
    """Where the CPU time runs, measured against the device's node by the distance matrix."""
    prefix = host_prefix(place.process)
    node = place.device_node
    near: list[tuple[float, str]] = []
    far: list[tuple[float, str]] = []
    unknown: list[tuple[float, str]] = []
    for other, share in sorted(place.cpu_share.items(), key=lambda kv: -kv[1]):
        if other == node:
            continue
        distance = ctx.analysis.distance(prefix, node, other)
        # every share counts in the sums; only those that round to 1 % or more are named
        part = f"{share:.0%} on node {other}" + (f" (distance {distance})" if distance else "")
        part = part if share >= 0.005 else ""
        if distance is None:
            unknown.append((share, part))
        else:
            (far if distance >= CROSS_SOCKET_DISTANCE else near).append((share, part))
    clauses = (
        (far, f"of its CPU time crosses sockets to reach {place.device}"),
        (near, f"runs on a same-socket neighbour of node {node}"),
        (unknown, f"runs off node {node} at an unknown distance"),
    )
    parts = [f"{_total(g):.0%} {what} ({_named(g)})" for g, what in clauses if _total(g) >= 0.005]
    if place.pages_on_device_node is not None:
        parts.append(f"{1 - place.pages_on_device_node:.0%} of its pages are off node {node}")
    return "; ".join(parts) or f"its CPU time is {place.cpu_on_device_node:.0%} on node {node}"


def _total(parts: list[tuple[float, str]]) -> float:
    return sum(share for share, _ in parts)


def _named(parts: list[tuple[float, str]]) -> str:
    named = [p for _, p in parts if p]
    return ", ".join(named) if named else "each under 1 %"


def _placement_action(ctx: RuleContext, place: Placement, launch: str) -> str:
    binding = ctx.analysis.bindings.get(place.process)
    if binding is None:
        return (
            f"Bind {place.process} to NUMA {place.device_node} (the node of {place.device}): "
            f"launch it with `{launch}`, or move the running process with the command below."
        )
    # the ranks bound on this node of this host, not on its namesakes of other hosts
    same_node = ctx.analysis.plan_by_node.get((host_prefix(place.process), binding.node), [])
    peers = [f"{b.process} → CPUs {b.cpus}" for b in same_node if b.process != place.process]
    shared = f" (the node's other ranks get their own: {'; '.join(peers)})" if peers else ""
    loaders = [b.process for b in ctx.analysis.plan_of.get(place.process, []) if b.serves]
    if loaders:
        shared += f"; its data loaders {', '.join(loaders)} move with it"
    return (
        f"Give {place.process} CPUs {binding.cpus} of NUMA {binding.node} (the node of "
        f"{place.device}) and its memory there{shared}: the command below moves the running "
        f"process and all its threads; to make it last, start this rank with `{launch}`."
    )


def _thread_evidence(ctx: RuleContext, proc) -> list[Evidence]:
    """Threads pinned elsewhere than their process: the process's affinity hides them."""
    foreign = ctx.analysis.foreign_threads(proc)
    if not foreign:
        return []
    shown = dict(sorted(foreign.items())[:6])
    return [
        Evidence(
            "aggregate",
            list(shown),
            {t: format_cpulist(cpus) for t, cpus in shown.items()},
            note=f"{len(foreign)} threads allowed other CPUs than the process's "
            f"{proc.get('cpus_allowed')}",
        )
    ]


def placement_findings(ctx: RuleContext, misplaced: list[Placement]) -> list[Finding]:
    """One finding per misplaced rank while few ranks share a device node and a grade; one
    finding for the node's ranks beyond that (the Fix plan still lists each rank); in a
    cluster graph, one per priority naming its hosts (``RuleContext.by_cause``)."""
    by_cause: dict[tuple[str, int, Priority], list[Placement]] = defaultdict(list)
    for place in misplaced:
        priority = _placement_priority(place)
        by_cause[(host_prefix(place.process), place.device_node, priority)].append(place)
    out: list[Finding] = []
    for (prefix, node, priority), places in by_cause.items():
        if len(places) <= GROUP_DETAIL:
            out += [placement_finding(ctx, place) for place in places]
        else:
            out.append(_misplaced_group(ctx, prefix, node, priority, places))
    return ctx.by_cause(out)


def _misplaced_group(
    ctx: RuleContext, prefix: str, node: int, priority: Priority, places: list[Placement]
) -> Finding:
    places = sorted(places, key=lambda p: (p.cpu_on_device_node, p.process))
    devices = Counter(p.device for p in places)
    away = Counter(p.dominant_cpu_node for p in places)
    runs_on = ", ".join(f"NUMA {n} ({count})" for n, count in away.most_common(4))
    cpulist = ctx.analysis.numa_cpulist(prefix, node)
    where = f"{prefix}/" if prefix else ""
    worst = {p.process: round(p.cpu_on_device_node, 3) for p in places[:WORST_SHOWN]}
    return ctx.group_finding(
        key=f"{where}numa:{node}:{'wrong-node' if priority == 'P0' else 'mild'}",
        members=[p.process for p in places],
        worst=worst,
        priority=priority,
        title=f"{len(places)} ranks use devices on NUMA {node} "
        f"({', '.join(sorted(devices)[:4])}{' …' if len(devices) > 4 else ''}) but run "
        f"mostly on {runs_on}; worst {', '.join(list(worst)[:3])}",
        note=f"share of CPU time on NUMA {node}, worst {len(worst)} of {len(places)} ranks"
        + (f"; the node's CPUs are {cpulist}" if cpulist else ""),
        impact=placement_impact(ctx, places[0]) + f" (the worst of {len(places)})",
        action=f"Bind each of these ranks to NUMA {node}, the node of its device, on CPUs of "
        "its own and with its memory there (the Fix plan, when offered, lists each rank's "
        "command).",
        certain=all(p.device_node_certain for p in places),
    )
