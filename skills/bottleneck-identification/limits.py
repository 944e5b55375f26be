"""What the cgroup-limit rules share (compute, memory, storage): a cgroup's processes as
evidence, and the command that changes one of its settings."""

from __future__ import annotations

import shlex

from wp_mcp.graph import Node

from ..report import Evidence, safe
from ..rulebook import NotEvaluable, RuleContext

MEMBERS_SHOWN = 8


def limited(ctx: RuleContext, attr: str, what: str) -> list[Node]:
    """The cgroups that carry ``attr`` (a limit or its counters); not evaluable without."""
    found = [c for c in ctx.graph.of_kind("cgroup") if c.get(attr) is not None]
    if not ctx.graph.of_kind("cgroup"):
        raise NotEvaluable(
            "no cgroup counters in this snapshot (the cgroups collector did not run)"
        )
    if not found:
        raise NotEvaluable(f"no cgroup of these processes has {what}")
    return found


def members(ctx: RuleContext, cgroup: Node, by: str) -> list[Node]:
    """Its processes (not the profiler's), the largest ``by`` first."""
    procs = [
        p
        for p in ctx.graph.predecessors(cgroup.id, "in_cgroup")
        if p.kind == "process" and not ctx.analysis.is_profiler(p.id)
    ]
    return sorted(procs, key=lambda p: (-(p.get(by) or 0), p.id))


def members_evidence(ctx: RuleContext, procs: list[Node], *attrs: str) -> Evidence:
    shown = procs[:MEMBERS_SHOWN]
    values = {a: [p.get(a) for p in shown] for a in attrs}
    values["roles"] = [ctx.analysis.roles.get(p.id, "-") for p in shown]
    note = "its processes" + (f", the first {MEMBERS_SHOWN} shown" if procs[MEMBERS_SHOWN:] else "")
    return Evidence("aggregate", [p.id for p in procs], values, ctx.window_s, note=note)


def members_named(ctx: RuleContext, procs: list[Node]) -> str:
    """``python3 (pid 200, rank), python3 (pid 201, rank) and 3 more``."""
    named = ", ".join(ctx.label(p.id) for p in procs[:3])
    return named + (f" and {len(procs) - 3} more" if procs[3:] else "")


def set_file(cgroup: Node, file: str, value: str) -> str | None:
    """``echo VALUE > DIR/FILE`` for the cgroup's directory, quoted for a shell."""
    directory = cgroup.get("directory")
    if not directory:
        return None
    return f"echo {shlex.quote(value)} > {shlex.quote(f'{directory}/{file}')}"


def cgroup_name(cgroup: Node) -> str:
    """``cgroup /job.slice (memory)``: its path, escaped, and its hierarchy."""
    return f"cgroup {safe(cgroup.get('path') or cgroup.id, 80)} ({cgroup.get('hierarchy')})"
