"""Snapshot diff: what appeared, what vanished and what changed beyond noise.

Used to verify an optimisation ("after numactl, is the worker's locality up and its CPU
share down?"). Two snapshots of one host are compared node by node and edge by edge:

- a node or edge present on one side only *appeared* or *vanished*; a process whose pid
  was reused (same id, different start time) counts as one vanished and one appeared;
- an attribute present on both sides *changed* when the difference is larger than the
  noise of its unit (percent points for ``_pct``, relative change for rates and sizes,
  absolute change for 0..1 shares);
- cumulative counters (CPU seconds, bytes since start, switch counts…) always grow between
  two snapshots, so they are not compared; their rates are.

The result renders to compact text within a token budget and pages with a cursor, like
every other view.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.query import StepJob, no_step_timeline, step_jobs
from wp_mcp.graph.safetext import escape, excerpt

from .text import quote, show_id

if TYPE_CHECKING:
    from typing_extensions import TypeIs
    from wp_mcp.graph import Edge, Graph, Node

# Attributes that say nothing about a change: provenance, identity, counters since start,
# and placement that moves every few milliseconds.
_IGNORED = frozenset(
    {
        "source", "id", "kind", "src", "dst", "key", "start_time", "pid", "tid", "ppid",
        "inode", "state", "last_cpu", "cpus_used", "cpu_time_s", "vol_ctxt_switches",
        "invol_ctxt_switches", "major_faults", "io_read_bytes", "io_write_bytes", "bytes_sent",
        "bytes_received", "bytes", "retrans_total", "lost", "numa_stats", "numa_cpu_time",
        "numa_pages", "pages", "rx_queue", "tx_queue", "window_s", "step_rounds",
        # tcp_info and socket-memory counters since the connection opened (their window_*
        # deltas are what changes), and a qdisc's counters since it was set up
        "busy_time_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "dsack_dups", "reord_seen",
        "rto_count", "bytes_retrans", "segs_out", "data_segs_out", "sk_drops", "qdisc_drops",
        "qdisc_overlimits", "qdisc_requeues", "qdiscs",
    }
)  # fmt: skip

PCT_NOISE_POINTS = 5.0  # a _pct value must move by more than this many points
REL_NOISE = 0.2  # rates, sizes, latencies: more than 20 % relative change
SHARE_NOISE = 0.05  # 0..1 shares and localities: more than 0.05 absolute
AGGREGATE_OVER = 5  # more appeared/vanished entities of one kind than this → one line


@dataclass(frozen=True)
class Change:
    """One attribute of one entity that moved beyond noise."""

    entity: str  # node id, or "src -kind-> dst" for an edge
    kind: str  # the node's or edge's kind
    attr: str
    before: Any
    after: Any
    weight: float  # how far beyond noise, for ordering (larger first)


@dataclass
class GraphDiff:
    appeared: list[Node | Edge] = field(default_factory=list)
    vanished: list[Node | Edge] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    reused_pids: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)  # the jobs' steps/s before → after

    def counts(self) -> dict[str, int]:
        return {
            "appeared": len(self.appeared),
            "vanished": len(self.vanished),
            "changed": len(self.changed),
        }

    @property
    def empty(self) -> bool:
        return not (self.appeared or self.vanished or self.changed)


@dataclass
class DiffPage:
    text: str
    tokens: int
    next_cursor: str | None
    page: int
    pages: int
    counts: dict[str, int]


def diff_graphs(before: Graph, after: Graph) -> GraphDiff:
    """Compare two graphs (usually two snapshots of one host)."""
    result = GraphDiff()
    for node_id, old in before.nodes.items():
        new = after.nodes.get(node_id)
        if new is None or new.kind != old.kind:
            result.vanished.append(old)
        elif _pid_reused(old, new):
            result.vanished.append(old)
            result.appeared.append(new)
            result.reused_pids.append(node_id)
        else:
            result.changed.extend(_attr_changes(show_id(node_id), old, new))
    for node_id, new_node in after.nodes.items():
        old_node = before.nodes.get(node_id)
        if old_node is None or old_node.kind != new_node.kind:
            result.appeared.append(new_node)

    old_edges = {edge.ident: edge for edge in before.edges()}
    new_edges = {edge.ident: edge for edge in after.edges()}
    reused = set(result.reused_pids)
    for ident, old_edge in old_edges.items():
        new_edge = new_edges.get(ident)
        if new_edge is None or old_edge.src in reused or old_edge.dst in reused:
            result.vanished.append(old_edge)
        else:
            result.changed.extend(_attr_changes(_edge_label(old_edge), old_edge, new_edge))
    for ident, new_edge in new_edges.items():
        if ident not in old_edges or new_edge.src in reused or new_edge.dst in reused:
            result.appeared.append(new_edge)

    result.changed.sort(key=lambda c: (-c.weight, c.entity, c.attr))
    result.steps = step_lines(before, after)
    return result


def step_lines(before: Graph, after: Graph) -> list[str]:
    """What the jobs' step timelines say of the change, one line per job: steps/s before
    → after (the measure of a fix), or which side could not measure it and why."""
    old, new = step_jobs(before), step_jobs(after)
    if not old and not new:
        return []
    if not old or not new:
        missing, there = ("before", new) if not old else ("after", old)
        reason = no_step_timeline(before if not old else after)
        shown = ", ".join(f"{j.steps_per_s:.1f} steps/s" for j in there)
        return [f"steps/s: {shown} {'after' if not old else 'before'}; not measured "
                f"{missing} ({escape(reason, 160, 'line')})"]  # fmt: skip
    pairs = _paired_jobs(old, new)
    return [_step_line(a, b) for a, b in pairs]


def _paired_jobs(old: list[StepJob], new: list[StepJob]) -> list[tuple[StepJob, StepJob]]:
    """Jobs of the same ranks; when each side has one job, those two (a restarted job)."""
    by_label = {job.label: job for job in new}
    pairs = [(job, by_label[job.label]) for job in old if job.label in by_label]
    if not pairs and len(old) == len(new) == 1:
        pairs = [(old[0], new[0])]
    return pairs


def _step_line(old: StepJob, new: StepJob) -> str:
    a, b = old.steps_per_s, new.steps_per_s
    change = f" ({(b - a) / a:+.0%})" if a else ""
    p50 = (old.figure("step_ms_p50"), new.figure("step_ms_p50"))
    p99 = (old.figure("step_ms_p99"), new.figure("step_ms_p99"))
    return (
        f"steps/s {a:.1f} → {b:.1f}{change} · step p50 {_ms(p50[0])} → {_ms(p50[1])} · "
        f"p99 {_ms(p99[0])} → {_ms(p99[1])} · job {show_id(new.label)} (step timeline)"
    )


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} ms"


def render_diff(
    diff: GraphDiff,
    *,
    before_id: str,
    after_id: str,
    max_tokens: int = 4000,
    cursor: str | None = None,
    lead: list[str] | None = None,
    again: str = "call wp_diff again with cursor={cursor!r}",
) -> DiffPage:
    """Compact text of a diff, one page within ``max_tokens`` (cursor for the next page).

    ``lead`` lines (the findings resolved, new and unchanged, composed by the caller that
    ran the skills) come before the attribute changes, so the first page answers "did the
    change work?" and the raw detail follows behind the cursor.
    """
    from wp_mcp.converters.tokens import count_tokens, take_lines

    body = _body_lines(diff)
    counts = diff.counts()
    lead = [*diff.steps, *(lead or [])]
    header = (
        f"# diff {before_id} → {after_id} · appeared {counts['appeared']} · "
        f"vanished {counts['vanished']} · changed {counts['changed']} (beyond noise: "
        f"pct ±{PCT_NOISE_POINTS:g} pts, rates/sizes ±{REL_NOISE:.0%}, shares ±{SHARE_NOISE:g})"
    )
    if not body:
        same = "no difference beyond noise: the two snapshots match on every compared attribute"
        text = "\n".join([header, *(lead or []), same])
        return DiffPage(text, count_tokens(text), None, 1, 1, counts)
    legend = ["legend: ~ changed entity attr before→after · + appeared · - vanished"]
    if len(diff.changed) > AGGREGATE_OVER:
        legend.append(_most_changed(diff.changed))
    if lead:
        legend.insert(0, "## what changed in the graph")
    lines = [*(lead or []), *legend, *body]
    start = _decode_cursor(cursor, len(lines))
    budget = max_tokens - count_tokens(header) - 40  # footer room
    taken = take_lines(lines, start, budget)
    end = start + len(taken)
    per_page = max(1, len(taken))
    page = start // per_page + 1
    pages = max(page, page + -(-(len(lines) - end) // per_page))
    parts = [f"{header} · page {page}/{pages}", *taken]
    next_cursor = None
    if end < len(lines):
        next_cursor = _encode_cursor(end)
        parts.append(f"(cut: {len(lines) - end} more lines; {again.format(cursor=next_cursor)})")
    text = "\n".join(parts)
    return DiffPage(text, count_tokens(text), next_cursor, page, pages, counts)


# --------------------------------------------------------------------------- comparing


def _pid_reused(old: Node, new: Node) -> bool:
    if old.kind != "process":
        return False
    a, b = old.get("start_time"), new.get("start_time")
    return a is not None and b is not None and abs(a - b) > 0.5


def _attr_changes(entity: str, old: Node | Edge, new: Node | Edge) -> Iterable[Change]:
    before, after = old.attrs(), new.attrs()
    for attr in sorted(before.keys() & after.keys()):
        if attr in _IGNORED:
            continue
        weight = _beyond_noise(attr, before[attr], after[attr])
        if weight > 0:
            yield Change(entity, old.kind, attr, before[attr], after[attr], weight)


def _beyond_noise(attr: str, a: Any, b: Any) -> float:
    """How far beyond noise the move from ``a`` to ``b`` is; 0 when within noise."""
    if a == b:
        return 0.0
    if _is_number(a) and _is_number(b):
        return _numeric_weight(attr, float(a), float(b))
    if isinstance(a, dict) and isinstance(b, dict):
        keys = a.keys() | b.keys()
        if all(_is_number(a.get(k, 0)) and _is_number(b.get(k, 0)) for k in keys):
            moves = [abs(float(a.get(k, 0)) - float(b.get(k, 0))) for k in keys]
            scale = SHARE_NOISE if _looks_like_share(a, b) else None
            if scale is None:
                return max(
                    (_numeric_weight(attr, float(a.get(k, 0)), float(b.get(k, 0))) for k in keys),
                    default=0.0,
                )
            return max(moves, default=0.0) / scale if max(moves, default=0.0) > scale else 0.0
    # strings, lists, flags: any difference is a real change (affinity, binding, model…)
    return 1.0


def _numeric_weight(attr: str, a: float, b: float) -> float:
    delta = abs(b - a)
    if attr.endswith("_pct"):
        return delta / PCT_NOISE_POINTS if delta > PCT_NOISE_POINTS else 0.0
    if attr in ("share", "numa_locality", "confidence") or (0 <= a <= 1 and 0 <= b <= 1):
        return delta / SHARE_NOISE if delta > SHARE_NOISE else 0.0
    scale = max(abs(a), abs(b))
    rel = delta / scale if scale else 0.0
    return rel / REL_NOISE if rel > REL_NOISE else 0.0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _looks_like_share(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    values = [float(v) for v in (*a.values(), *b.values())]
    return all(0 <= v <= 1 for v in values)


# --------------------------------------------------------------------------- rendering


def _body_lines(diff: GraphDiff) -> list[str]:
    lines = [_change_line(change) for change in diff.changed]
    lines += _presence_lines("+", diff.appeared, set(diff.reused_pids))
    lines += _presence_lines("-", diff.vanished, set(diff.reused_pids))
    return lines


def _most_changed(changes: list[Change], top: int = 8) -> str:
    """Which attributes moved most often: where to look when thousands of values moved."""
    tally = Counter(f"{change.kind}.{change.attr}" for change in changes)
    common = ", ".join(f"{escape(name)} {count}" for name, count in tally.most_common(top))
    more = f", … {len(tally) - top} more" if len(tally) > top else ""
    return f"most changed: {common}{more}"


def _change_line(change: Change) -> str:
    return f"~ {change.entity} {escape(change.attr)} {_fmt(change.before)}→{_fmt(change.after)}"


def _presence_lines(sign: str, items: list[Node | Edge], reused: set[str]) -> list[str]:
    nodes = [item for item in items if not _is_edge(item)]
    edges = [item for item in items if _is_edge(item)]
    lines: list[str] = []
    by_kind: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        by_kind[node.kind].append(node)
    for kind, group in sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if len(group) > AGGREGATE_OVER:
            sample = ", ".join(show_id(node.id) for node in group[:3])
            lines.append(f"{sign} {len(group)}× {kind} ({sample}, …)")
            continue
        for node in group:
            label = f" {quote(node.name)}" if node.name else ""
            note = " (pid reused)" if node.id in reused else ""
            lines.append(f"{sign} {show_id(node.id)} {kind}{label}{note}")
    edge_kinds: dict[str, list[Edge]] = defaultdict(list)
    for edge in edges:
        edge_kinds[edge.kind].append(edge)
    for kind, edge_group in sorted(edge_kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if len(edge_group) > AGGREGATE_OVER:
            sample = ", ".join(_edge_label(edge) for edge in edge_group[:2])
            lines.append(f"{sign} {len(edge_group)}× edge {kind} ({sample}, …)")
            continue
        lines.extend(f"{sign} {_edge_label(edge)}" for edge in edge_group)
    return lines


def _is_edge(item: Node | Edge) -> TypeIs[Edge]:
    return hasattr(item, "src")  # without importing the model (a Node has no src)


def _edge_label(edge: Edge) -> str:
    return f"{show_id(edge.src)} -{edge.kind}-> {show_id(edge.dst)}"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.4g}"
    if isinstance(value, dict):
        inner = ",".join(f"{escape(str(k))}:{_fmt(v)}" for k, v in sorted(value.items()))
        return "{" + inner + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if isinstance(value, str):
        return quote(value)
    return escape(str(value))


def _encode_cursor(offset: int) -> str:
    return f"d{offset}"


def _decode_cursor(cursor: str | None, total: int) -> int:
    if cursor is None:
        return 0
    if cursor.startswith("d") and cursor[1:].isdigit() and int(cursor[1:]) < max(total, 1):
        return int(cursor[1:])
    raise UserError(
        f"unknown diff cursor {excerpt(cursor)}: use the next_cursor of the previous wp_diff answer, "
        "or call wp_diff without a cursor for the first page"
    )
