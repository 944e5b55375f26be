"""Layer 6, control: hosts' load and CPU pressure, containers by throttling, processes and
threads waiting for a CPU or sharing a restricted CPU set (the rest folded)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from wp_mcp.graph.model import Node

from ..facts import Facts, attr
from ..items import Item, aggregate, group_item, node_item
from ..lines import (
    allowed,
    cpu_metrics,
    cpulist_size,
    cpus,
    escape_short,
    host_items,
    kv,
    named,
    parts,
    sort_desc,
)
from ..steps import job_items
from ..text import IdRanges, fmt_pct, fmt_rate, show_id
from . import view

LEGEND = (
    "host load psi_cpu | ctr throttled procs | cgroup quota used throttled procs | "
    "proc allowed thr_allowed "
    "shares_cpus_with run "
    "invol cpu | (indented) thr run invol"
)
# Below both, a process or thread shows no sign of waiting for a CPU and is folded. These are
# display cut-offs, not diagnoses: the rules apply their own thresholds to the graph.
RUN_DELAY_SHOWN_PCT = 1.0
INVOL_SHOWN_PER_S = 10.0


@view(
    "control",
    legend=LEGEND,
    narrow="pid=N min_run=N min_invol=N",
    top=("process", "container", "host"),
)
def control(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("ctl",))
    items += job_items(graph)  # who the job waits for, measured at its collectives
    containers = sorted(graph.of_kind("container"), key=_throttle_rank)
    items += _limit_items(facts, containers, "in_container", "cpu_throttled_pct", _container_line)
    # cgroups with a CPU quota (collectors/cgroups.py): the limit and how often it bit
    quotas = [c for c in graph.of_kind("cgroup") if attr(c, "cpu_quota_cpus") is not None]
    quotas.sort(key=_quota_rank)
    items += _limit_items(facts, quotas, "in_cgroup", "cpu_throttled_periods_pct", _quota_line)
    shared = _shared_affinity(facts)
    processes = sorted(graph.of_kind("process"), key=_contention_rank)

    def key(process: Node) -> tuple[Any, ...] | None:
        if process.id in shared or _contended(process):
            return None
        return ("ok",)

    def one(process: Node) -> Item:
        return node_item(
            process,
            partial(_process_line, facts, process, shared.get(process.id)),
            procs=(process.id,),
            metrics=partial(cpu_metrics, process),
        )

    def many(group: list[Node]) -> Item:
        return group_item(
            group,
            "no contention signal",
            f"(affinity not shared, run delay <{RUN_DELAY_SHOWN_PCT:g}% and invol "
            f"<{INVOL_SHOWN_PER_S:g}/s or unmeasured)",
            procs=tuple(p.id for p in group),
        )

    for item in aggregate(processes, key, one, many):
        items.append(item)
        if item.group is None:
            threads = [t for t in facts.threads_of.get(item.ids[0], ()) if _contended(t)]
            threads.sort(key=_contention_rank)
            process_allowed = attr(item.nodes[0], "cpus_allowed")
            items += [
                node_item(
                    t,
                    partial(_thread_line, t, process_allowed),
                    procs=item.ids,
                    metrics=partial(cpu_metrics, t),
                    indent=1,
                )
                for t in threads
            ]
    return items


def _limit_items(
    facts: Facts,
    limits: list[Node],
    membership: str,
    throttled: str,
    line: Callable[[Node, list[str]], str],
) -> list[Item]:
    """One item per container or cgroup, with its member processes and how throttled it was."""
    items = []
    for limit in limits:
        members = [e.src for e in facts.graph.in_edges(limit.id, membership)]
        items.append(
            node_item(
                limit,
                partial(line, limit, members),
                procs=tuple(members),
                metrics={"throttled": attr(limit, throttled) or 0},
            )
        )
    return items


def _throttle_rank(ctr: Node) -> tuple[Any, ...]:
    return (sort_desc(attr(ctr, "cpu_throttled_pct")), ctr.id)


def _container_line(ctr: Node, members: list[str]) -> str:
    g = ctr.get
    return parts(
        named(ctr),
        kv("runtime", g("runtime"), escape_short),
        kv("throttled", g("cpu_throttled_pct"), fmt_pct),
        kv("throttled", g("cpu_throttled_per_s"), fmt_rate),
        f"procs={len(members)}" if members else None,
    )


def _quota_rank(cgroup: Node) -> tuple[Any, ...]:
    return (sort_desc(attr(cgroup, "cpu_throttled_periods_pct")), cgroup.id)


def _quota_line(cgroup: Node, members: list[str]) -> str:
    g = cgroup.get
    return parts(
        show_id(cgroup.id),
        kv("quota", g("cpu_quota_cpus"), lambda v: f"{v:g}cpu"),
        kv("used", g("cpu_usage_pct"), fmt_pct),
        kv("throttled", g("cpu_throttled_periods_pct"), fmt_pct),
        f"procs={len(members)}" if members else None,
    )


def _contended(node: Node) -> bool:
    run = attr(node, "run_delay_pct")
    invol = attr(node, "invol_switches_per_s")
    return (run is not None and run >= RUN_DELAY_SHOWN_PCT) or (
        invol is not None and invol >= INVOL_SHOWN_PER_S
    )


def _contention_rank(node: Node) -> tuple[Any, ...]:
    return (
        sort_desc(attr(node, "run_delay_pct")),
        sort_desc(attr(node, "invol_switches_per_s")),
        -(attr(node, "invol_ctxt_switches") or 0),
        node.id,
    )


def _shared_affinity(facts: Facts) -> dict[str, IdRanges]:
    """Processes whose restricted CPU set (not all CPUs) is the same as another process's,
    each mapped to every process of that set (itself included), parsed once per set: each
    member's line shows the others from it."""
    by_set: dict[tuple[str, str], list[str]] = {}
    for process in facts.graph.of_kind("process"):
        allowed = attr(process, "cpus_allowed")
        size = cpulist_size(allowed)
        if not allowed or size is None:
            continue
        host = process.id.rpartition("/")[0] if "/" in process.id.split(":")[0] else ""
        total = facts.cpu_hosts.get(host)
        widest = total if total else _widest_affinity(facts)
        if size >= widest:
            continue
        by_set.setdefault((host, allowed), []).append(process.id)
    shared: dict[str, IdRanges] = {}
    for members in by_set.values():
        if len(members) > 1:
            shared.update(dict.fromkeys(members, IdRanges(members)))  # O(k), not O(k²)
    return shared


def _widest_affinity(facts: Facts) -> int:
    cached = facts.__dict__.get("_widest")
    if cached is None:
        sizes = [cpulist_size(attr(p, "cpus_allowed")) or 0 for p in facts.graph.of_kind("process")]
        cached = facts.__dict__["_widest"] = max(sizes, default=0)
    return cached


def _process_line(facts: Facts, process: Node, sharing: IdRanges | None) -> str:
    g = process.get
    return parts(
        named(process),
        allowed(facts, process),
        f"shares_cpus_with={sharing.text(3, without=process.id)}" if sharing is not None else None,
        kv("run", g("run_delay_pct"), fmt_pct),
        kv("invol", g("invol_switches_per_s"), fmt_rate),
        kv("cpu", g("cpu_pct"), fmt_pct),
    )


def _thread_line(thread: Node, process_allowed: str | None) -> str:
    g = thread.get
    allowed = g("cpus_allowed")
    return parts(
        named(thread),
        kv("run", g("run_delay_pct"), fmt_pct),
        kv("invol", g("invol_switches_per_s"), fmt_rate),
        kv("cpu", g("cpu_pct"), fmt_pct),
        # Only when it differs from its process's (a pinned thread).
        kv("allowed", allowed, cpus) if allowed != process_allowed else None,
    )
