"""What an imported training trace says, in the views: one line per collective kind of the
job (the network layer) and the job's lines in the summary (ranks, steps, time split,
straggler, collectives), from the ``trace_*`` attributes and ``meta.trace`` that
graph/trace.py writes (docs/traces.md)."""

from __future__ import annotations

from functools import partial
from typing import Any

from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Node

from .facts import Facts, attr
from .items import Item
from .text import fmt_bytes, fmt_ms, fmt_pct, word

DEVICE_SPLIT = (("compute", "trace_compute_pct"), ("comm", "trace_comm_pct"),
                ("memcpy", "trace_memcpy_pct"), ("idle", "trace_idle_pct"),
                ("host-wait", "trace_host_wait_pct"))  # fmt: skip


def job(graph: Graph) -> dict[str, Any]:
    summary = getattr(graph.meta, "trace", None)
    return summary if isinstance(summary, dict) else {}


def ranks(graph: Graph) -> list[Node]:
    found = [p for p in graph.of_kind("process") if attr(p, "trace_rank") is not None]
    return sorted(found, key=lambda p: (attr(p, "trace_rank"), p.id))


def collectives(graph: Graph) -> dict[str, dict[str, Any]]:
    """Per kind, over the traced ranks: calls per rank, bytes per call, p50/p99 (µs; the
    median over ranks of each rank's), the job's latency (fastest rank per call) and the
    ranks' wait for the slowest (ms)."""
    summary, traced = job(graph), ranks(graph)
    out: dict[str, dict[str, Any]] = {}
    for proc in traced:
        for kind, facts in (attr(proc, "trace_collectives") or {}).items():
            if isinstance(facts, dict):
                out.setdefault(kind, {"ranks": [], "rows": []})["rows"].append(facts)
                out[kind]["ranks"].append(proc.id)
    for kind, entry in out.items():
        rows = entry.pop("rows")
        middle = sorted(rows, key=lambda r: r.get("p50_us", 0))[len(rows) // 2]
        count = middle.get("count") or 0
        entry.update(
            count=count,
            bytes_per_call=middle["bytes"] / count if middle.get("bytes") and count else None,
            p50_us=middle.get("p50_us"),
            p99_us=middle.get("p99_us"),
            latency_us=(summary.get("latency_p50_us") or {}).get(kind),
            wait_ms=(summary.get("waited_by_kind_ms") or {}).get(kind),
        )
    return dict(sorted(out.items(), key=lambda kv: -(kv[1]["count"] * (kv[1]["p50_us"] or 0))))


def _us(value: float | None) -> str | None:
    if not isinstance(value, (int, float)):
        return None
    return fmt_ms(value / 1000) if value >= 1000 else f"{value:.0f}µs"


def collective_line(kind: str, entry: dict[str, Any], backend: str | None) -> str:
    fields = [f"collective {word(kind, 40)} ×{entry['count']}/rank ranks={len(entry['ranks'])}"]
    if entry["bytes_per_call"]:
        fields.append(f"bytes={fmt_bytes(entry['bytes_per_call'])}/call")
    fields += [f"p50={_us(entry['p50_us'])}", f"p99={_us(entry['p99_us'])}"]
    if entry["latency_us"] is not None:
        fields.append(f"fastest_p50={_us(entry['latency_us'])}")
    if entry["wait_ms"] is not None:
        fields.append(f"wait_slowest={fmt_ms(entry['wait_ms'])}")
    if backend:
        fields.append(word(backend, 20))
    return " ".join(fields)


def collective_items(facts: Facts) -> list[Item]:
    """The network layer's lines for the job's collectives, the costliest kind first."""
    graph = facts.graph
    backend = next(
        (attr(p, "trace_backend") for p in ranks(graph) if attr(p, "trace_backend")), None
    )
    items = []
    for kind, entry in collectives(graph).items():
        ids = tuple(entry["ranks"])
        items.append(Item(ids=ids, kind="collective", render=partial(collective_line, kind, entry, backend),
                          procs=ids, measure={"bytes": (entry["bytes_per_call"] or 0) * entry["count"]}))  # fmt: skip
    return items


def summary_lines(graph: Graph) -> list[str]:
    """The job as the trace says it: ranks, steps, time split, straggler; the collectives."""
    summary, traced = job(graph), ranks(graph)
    if not traced:
        return []
    world = summary.get("world_size")
    backend = attr(traced[0], "trace_backend")
    head = f"trace: {len(traced)}" + (f" of {world}" if world else "") + " ranks"
    head += f" ({word(backend, 20)})" if backend else ""
    steps = summary.get("steps_judged")
    if isinstance(steps, list) and len(steps) == 3:
        head += f" steps {steps[0]}–{steps[1]}" if steps[2] > 1 else f" step {steps[0]}"
    step_ms = summary.get("step_ms") or attr(traced[0], "trace_step_ms")
    if step_ms:
        head += f" step_p50={fmt_ms(step_ms)}"
    straggler = summary.get("straggler_rank")
    if straggler is not None:
        cause = (summary.get("straggler_cause") or {}).get("phase")
        head += f" | straggler rank {straggler} ({fmt_pct(summary.get('skew_pct') or 0)} of step"
        head += f", {word(cause, 12)})" if cause else ")"
    elif "waited_ms" in summary:
        head += " | straggler none"
    lines = [head, "time: " + _split(graph, traced)]
    kinds = collectives(graph)
    if kinds:
        shown = []
        for kind, entry in list(kinds.items())[:4]:
            size = f" {fmt_bytes(entry['bytes_per_call'])}" if entry["bytes_per_call"] else ""
            shown.append(f"{word(kind, 30)} ×{entry['count']} p50={_us(entry['p50_us'])}{size}")
        more = f" +{len(kinds) - 4} kinds" if len(kinds) > 4 else ""
        lines.append("collectives: " + ", ".join(shown) + more)
    if summary.get("alignment"):
        lines.append(f"alignment: {word(summary['alignment'], 160)}")
    return lines


def _split(graph: Graph, traced: list[Node]) -> str:
    """The job's time split: the devices' shares (mean over them) for a device trace, else
    the ranks' step shares in input, communication (waits excluded) and the rest."""
    devices = [d for d in graph.iter_nodes(["gpu", "npu"]) if attr(d, "trace_idle_pct") is not None]
    if devices:
        means = []
        for label, key in DEVICE_SPLIT:
            values = [attr(d, key) for d in devices if attr(d, key) is not None]
            if values:
                means.append(f"{label} {fmt_pct(sum(values) / len(values))}")
        return f"{len(devices)} devices " + " ".join(means)
    shares = []
    for label, key in (("input", "trace_input_wait_pct"), ("comm", "trace_comm_own_pct")):
        values = [attr(p, key) for p in traced if attr(p, key) is not None]
        if values:
            shares.append((label, sum(values) / len(values)))
    rest = max(0.0, 100 - sum(v for _, v in shares))
    return "steps " + " ".join(f"{label} {fmt_pct(v)}" for label, v in [*shares, ("other", rest)])
