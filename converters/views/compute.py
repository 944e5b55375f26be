"""Layer 1, compute: hosts' CPU, accelerators' utilisation, processes by CPU with their
threads (idle and unmeasured look-alikes folded)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from wp_mcp.graph.model import Node

from ..facts import Facts, attr
from ..items import Item, aggregate, group_item, node_item
from ..lines import (
    cpu_metrics,
    cpus,
    device_items,
    escape_short,
    host_items,
    is_unmeasured,
    kv,
    named,
    pair,
    pair_kv,
    parts,
    sort_desc,
    users,
)
from ..text import fmt_bytes, fmt_pct, fmt_per_node, fmt_seconds, name_pattern, show_id
from . import view

LEGEND = (
    "host cpus busy steal load | dev util mem=used/total users | proc cpu thr "
    "sw=vol/invol context switches(/s or _total count) dev | (indented) thr cpu sw cpus=used "
    "on{numa:share}"
)
DEVICE_ATTRS = ("util_pct", "mem_used_bytes", "power_w", "temperature_c", "health")
THREAD_METRICS = ("cpu_pct", "cpu_time_s", "vol_ctxt_switches", "vol_switches_per_s", "state")


@view(
    "compute",
    legend=LEGEND,
    narrow="kind=thread pid=N name=GLOB min_cpu=N",
    top=("process", "thread", "gpu", "npu"),
)
def compute(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("cpu",))
    items += device_items(facts, _device_line, DEVICE_ATTRS)
    for process in sorted(graph.of_kind("process"), key=_busy_first):
        items.append(
            node_item(
                process,
                partial(_process_line, facts, process),
                procs=(process.id,),
                metrics=partial(cpu_metrics, process),
                edges=graph.out_edges(process.id, "uses_device"),
            )
        )
        threads = sorted(facts.threads_of.get(process.id, ()), key=_busy_first)
        items += thread_items(threads, (process.id,), _thread_line, indent=1)
    threads = graph.of_kind("thread")
    owner = facts.thread_owner
    orphans = [t for t in threads if t.id not in owner] if len(owner) < len(threads) else []
    items += thread_items(sorted(orphans, key=_busy_first), (), _thread_line)
    return items


def _busy_first(node: Node) -> tuple[Any, ...]:
    get = node.__dict__.get  # what attr() reads, without a call per attribute: every thread
    switches = (get("vol_ctxt_switches") or 0) + (get("invol_ctxt_switches") or 0)
    return (sort_desc(get("cpu_pct")), -switches, node.id)


def _device_line(facts: Facts, device: Node) -> str:
    g = device.get
    return parts(
        named(device),
        kv("util", g("util_pct"), fmt_pct),
        pair_kv("mem", g("mem_used_bytes"), g("mem_total_bytes"), fmt_bytes),
        kv("power_w", g("power_w")),
        kv("temp_c", g("temperature_c")),
        kv("health", g("health"), escape_short),
        users(facts, device),
    )


def switches(node: Node) -> str | None:
    """Voluntary/involuntary switches: rates when windowed, else the totals."""
    g = node.get
    if g("vol_switches_per_s") is not None or g("invol_switches_per_s") is not None:
        return f"sw={pair(g('vol_switches_per_s'), g('invol_switches_per_s'))}/s"
    shown = pair(g("vol_ctxt_switches"), g("invol_ctxt_switches"))
    return f"sw_total={shown}" if shown else None


def _process_line(facts: Facts, process: Node) -> str:
    g = process.get
    devices = facts.devices_of(process.id)
    return parts(
        named(process),
        kv("cpu", g("cpu_pct"), fmt_pct),
        kv("cpu_time", g("cpu_time_s"), fmt_seconds),
        kv("thr", g("num_threads")),
        switches(process),
        f"dev={','.join(show_id(d) for d in devices)}" if devices else None,
        kv("state", g("state"), escape_short),
    )


def _thread_line(thread: Node) -> str:
    g = thread.get
    return parts(
        named(thread),
        kv("cpu", g("cpu_pct"), fmt_pct),
        kv("cpu_time", g("cpu_time_s"), fmt_seconds),
        switches(thread),
        kv("cpus", g("cpus_used"), cpus),
        _numa_time(g("numa_cpu_time")),
        kv("state", g("state"), escape_short),
    )


def _numa_time(values: dict[str, float] | None) -> str | None:
    if not values:
        return None
    total = sum(v for v in values.values() if v)
    if not total:
        return None
    return "on" + fmt_per_node({k: v / total for k, v in values.items() if v})


def is_idle(node: Node) -> bool:
    """Measured over a window and doing nothing (no CPU, no switching)."""
    get = node.__dict__.get
    cpu = get("cpu_pct")
    if cpu is None or cpu >= 0.1:
        return False
    return (get("vol_switches_per_s") or 0) + (get("invol_switches_per_s") or 0) < 1


def thread_items(
    threads: list[Node],
    procs: tuple[str, ...],
    line: Callable[[Node], str],
    indent: int = 0,
) -> list[Item]:
    """Threads one per line, idle or unmeasured look-alikes folded into groups."""

    def key(thread: Node) -> tuple[Any, ...] | None:
        # All idle threads of a process share one line; unmeasured ones fold by name shape.
        if is_idle(thread):
            return ("idle",)
        if is_unmeasured(thread, THREAD_METRICS):
            return ("unmeasured", name_pattern(attr(thread, "name") or ""))
        return None

    def one(thread: Node) -> Item:
        owner = procs or ()
        return node_item(
            thread,
            partial(line, thread),
            procs=owner,
            metrics=partial(cpu_metrics, thread),
            indent=indent,
        )

    def many(group: list[Node]) -> Item:
        label = "idle" if is_idle(group[0]) else "unmeasured"
        return group_item(group, label, procs=procs, indent=indent)

    return aggregate(threads, key, one, many)
