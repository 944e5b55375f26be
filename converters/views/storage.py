"""Layer 5, storage: hosts' I/O wait, disks by utilisation, processes by I/O rate and threads
in uninterruptible sleep (state D)."""

from __future__ import annotations

from functools import partial

from wp_mcp.graph.model import Node

from ..facts import Facts, attr
from ..items import Item, node_item
from ..lines import escape_short, host_items, kv, named, pair_kv, parts, sort_desc
from ..text import fmt_byte_rate, fmt_bytes, fmt_count, fmt_ms, fmt_pct, show_id
from . import view

LEGEND = "host iowait psi_io | disk util await queue r/w iops | proc r/w | thr state=D"


@view("storage", legend=LEGEND, narrow="min_util=N min_io=1M", top=("disk", "process", "thread"))
def storage(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("io",))
    disks = sorted(graph.of_kind("disk"), key=lambda d: (sort_desc(attr(d, "util_pct")), d.id))
    items += [
        node_item(d, partial(_disk_line, d), metrics=partial(_disk_metrics, d)) for d in disks
    ]
    readers = [p for p in graph.of_kind("process") if _io_rate(p) is not None]
    readers.sort(key=lambda p: (-(_io_rate(p) or 0), p.id))
    items += [
        node_item(p, partial(_io_line, p), procs=(p.id,), metrics={"io": _io_rate(p) or 0})
        for p in readers
    ]
    stuck = [t for t in graph.of_kind("thread") if str(attr(t, "state") or "").startswith("D")]
    items += [
        node_item(
            t,
            partial(_stuck_line, facts, t),
            procs=(facts.thread_owner[t.id],) if t.id in facts.thread_owner else (),
        )
        for t in sorted(stuck, key=lambda t: t.id)
    ]
    return items


def _disk_metrics(disk: Node) -> dict[str, float]:
    metrics = {"util": attr(disk, "util_pct"), "await": attr(disk, "await_ms")}
    return {k: float(v) for k, v in metrics.items() if v is not None}


def _disk_line(disk: Node) -> str:
    g = disk.get
    return parts(
        named(disk),
        kv("util", g("util_pct"), fmt_pct),
        kv("await", g("await_ms"), fmt_ms),
        kv("queue", g("queue_depth")),
        pair_kv("r/w", g("read_bytes_per_s"), g("write_bytes_per_s"), fmt_byte_rate),
        pair_kv("iops", g("reads_per_s"), g("writes_per_s"), fmt_count),
    )


def _io_rate(process: Node) -> float | None:
    rates = [attr(process, "io_read_bytes_per_s"), attr(process, "io_write_bytes_per_s")]
    totals = [attr(process, "io_read_bytes"), attr(process, "io_write_bytes")]
    if any(r is not None for r in rates):
        return float(sum(r or 0 for r in rates))
    if any(t for t in totals):
        return 0.0
    return None


def _io_line(process: Node) -> str:
    g = process.get
    return parts(
        named(process),
        pair_kv("r/w", g("io_read_bytes_per_s"), g("io_write_bytes_per_s"), fmt_byte_rate),
        pair_kv("r/w_total", g("io_read_bytes"), g("io_write_bytes"), fmt_bytes),
    )


def _stuck_line(facts: Facts, thread: Node) -> str:
    owner = facts.thread_owner.get(thread.id)
    return parts(
        named(thread),
        f"state={escape_short(attr(thread, 'state'))}",
        f"proc={show_id(owner)}" if owner else None,
    )
