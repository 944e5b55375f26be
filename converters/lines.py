"""The pieces of compact-text lines that several views share (docs/compact-text.md).

A piece used by one view only lives in that view's module (``converters/views/``); what is
here is the common vocabulary: ``key=value`` pairs, a node's id and name, a host's values per
layer, accelerators, PCIe links, process affinity and process-to-process flows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from wp_mcp.graph import query
from wp_mcp.graph.cpulist import format_cpulist, parse_cpulist
from wp_mcp.graph.model import Edge, Node

from .facts import Facts, attr
from .items import Item, aggregate, group_item, node_item
from .text import (
    fmt_byte_rate,
    fmt_bytes,
    fmt_count,
    fmt_num,
    fmt_pct,
    fmt_rate,
    id_ranges,
    quote,
    show_id,
    word,
)

ACCELERATORS = ("gpu", "npu")
NETWORK_TRANSPORTS = ("tcp", "udp")
NOT_MEASURED = float("-inf")


def parts(*pieces: str | None) -> str:
    return " ".join(p for p in pieces if p)


def kv(name: str, value: object, fmt: Callable[[Any], str] = fmt_num) -> str | None:
    return None if value is None else f"{name}={fmt(value)}"


def named(node: Node) -> str:
    """``proc:12 "python3"`` — the id and, when known, the quoted name."""
    name = attr(node, "name")
    return f"{show_id(node.id)} {quote(name, 40)}" if name is not None else show_id(node.id)


def pair(a: object, b: object, fmt: Callable[[Any], str] = fmt_count) -> str | None:
    if a is None and b is None:
        return None
    return f"{fmt(a) if a is not None else '?'}/{fmt(b) if b is not None else '?'}"


def pair_kv(name: str, a: object, b: object, fmt: Callable[[Any], str]) -> str | None:
    shown = pair(a, b, fmt)
    return f"{name}={shown}" if shown else None


def sort_desc(value: float | None) -> float:
    return -value if value is not None else -NOT_MEASURED


def escape_short(value: object) -> str:
    return word(value, 24)


def cpus(value: object) -> str:
    return word(value, 60)


def cpulist_size(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return len(parse_cpulist(text))
    except ValueError:
        return None


def is_unmeasured(node: Node, attrs: tuple[str, ...]) -> bool:
    get = node.__dict__.get
    # a loop, not all() over a generator (twice the cost): asked of every thread
    for name in attrs:  # noqa: SIM110
        if get(name) is not None:
            return False
    return True


def cpu_metrics(node: Node) -> dict[str, float]:
    """What the min_cpu/sw/invol/run/rss filters test on a process or thread."""
    metrics: dict[str, float] = {}
    for name, field_name in (
        ("cpu", "cpu_pct"),
        ("sw", "vol_switches_per_s"),
        ("invol", "invol_switches_per_s"),
        ("run", "run_delay_pct"),
        ("rss", "rss_bytes"),
    ):
        value = attr(node, field_name)
        if value is not None:
            metrics[name] = float(value)
    return metrics


def spread(name: str, values: list[float]) -> str | None:
    """Total and the per-entity range: ``sent=1.3M(29K..30K each)``."""
    if not values:
        return None
    low, high = min(values), max(values)
    each = fmt_bytes(low) if low == high else f"{fmt_bytes(low)}..{fmt_bytes(high)}"
    return f"{name}={fmt_bytes(sum(values))}({each} each)"


# --------------------------------------------------------------------------- hosts


def host_line(node: Node, fields: tuple[str, ...]) -> str:
    name = attr(node, "hostname") or attr(node, "name")
    head = f"{show_id(node.id)} {quote(name, 60)}" if name else show_id(node.id)
    return parts(head, host_facts(node, fields))


def host_facts(node: Node, fields: tuple[str, ...]) -> str:
    """The host's values for one layer ("" when it has none)."""
    g = node.get
    pieces: dict[str, str | None] = {
        "cpu": parts(
            kv("cpus", g("cpus")),
            kv("busy", g("cpu_busy_pct"), fmt_pct),
            kv("steal", g("cpu_steal_pct"), fmt_pct),
            kv("load", g("load1")),
            kv("virt", g("virtualized"), escape_short),
        ),
        "mem": parts(
            pair_kv("avail", g("mem_available_bytes"), g("mem_total_bytes"), fmt_bytes),
            pair_kv("swap", g("swap_used_bytes"), g("swap_total_bytes"), fmt_bytes),
            kv("majflt", g("major_faults_per_s"), fmt_rate),
            psi_kv(g("psi"), "memory"),
        ),
        "io": parts(kv("iowait", g("cpu_iowait_pct"), fmt_pct), psi_kv(g("psi"), "io")),
        "net": parts(
            kv("retrans", g("tcp_retrans_per_s"), fmt_rate),
            kv("listen_ovf", g("tcp_listen_overflows_per_s"), fmt_rate),
        ),
        "ctl": parts(
            kv("load", g("load1")),
            kv("cpus", g("cpus")),
            psi_kv(g("psi"), "cpu"),
            kv("numa_balancing", g("numa_balancing")),
        ),
    }
    return parts(*(pieces[f] for f in fields))


def psi_kv(psi: dict[str, Any] | None, resource: str) -> str | None:
    if not psi:
        return None
    shown = [
        f"{word(k.removeprefix(resource + '_'), 24)}={fmt_num(v)}"
        for k, v in sorted(psi.items())
        if k.startswith(resource) and isinstance(v, int | float)
    ]
    return f"psi_{resource}[{' '.join(shown)}]" if shown else None


def host_items(graph_hosts: list[Node], fields: tuple[str, ...]) -> list[Item]:
    """One line per host that has values for this layer."""
    graph_hosts = [h for h in graph_hosts if host_facts(h, fields)]
    return [node_item(h, partial(host_line, h, fields)) for h in graph_hosts]


# --------------------------------------------------------------------------- devices


DeviceLine = Callable[[Facts, Node], str]


def device_items(facts: Facts, line: DeviceLine, attrs: tuple[str, ...]) -> list[Item]:
    """Accelerators, busiest first, each drawn by the layer's ``line``; those with none of
    the layer's ``attrs`` folded per kind."""
    devices = [d for kind in ACCELERATORS for d in facts.graph.of_kind(kind)]
    devices.sort(key=lambda d: (sort_desc(attr(d, "util_pct")), attr(d, "index") or 0, d.id))

    def one(device: Node) -> Item:
        return node_item(
            device,
            partial(line, facts, device),
            procs=tuple(facts.users_of(device.id)),
            metrics={"util": attr(device, "util_pct")}
            if attr(device, "util_pct") is not None
            else {},
            edges=facts.graph.out_edges(device.id, "local_to"),
        )

    def many(group: list[Node]) -> Item:
        return group_item(group, "no data", procs=())

    def key(device: Node) -> tuple[Any, ...] | None:
        # Users are on the process lines (dev=) and in interconnect; not a reason to expand.
        return (device.kind,) if is_unmeasured(device, attrs) else None

    return aggregate(devices, key, one, many)


def users(facts: Facts, device: Node) -> str | None:
    found = facts.users_of(device.id)
    return f"users={id_ranges(found, 3)}" if found else None


def link(node: Node) -> str | None:
    """PCIe link, with the maximum when it trained lower (downtraining)."""
    g = node.get
    speed, width = g("link_speed_gts"), g("link_width")
    if speed is None and width is None:
        return None
    now = (
        f"{fmt_num(speed) if speed is not None else '?'}GT/s×{width if width is not None else '?'}"
    )
    top_speed, top_width = g("link_max_speed_gts"), g("link_max_width")
    slower = top_speed is not None and speed is not None and speed < top_speed
    narrower = top_width is not None and width is not None and width < top_width
    if slower or narrower:
        return f"link={now}(max {fmt_num(top_speed or speed)}GT/s×{top_width or width} DOWN)"
    return f"link={now}"


def bus_line(facts: Facts, node: Node) -> str:
    """A NIC, RDMA device or PCI bridge: where it sits and how it is linked."""
    g = node.get
    numa = g("numa_node")
    attached = [e.dst for e in facts.graph.out_edges(node.id, "attached")]
    return parts(
        named(node),
        kv("numa", numa) if numa is not None and numa >= 0 else None,
        kv("pci", g("pci_bus_id"), escape_short),
        kv("speed_mbps", g("speed_mbps")),
        link(node),
        _ports(g("ports")),
        f"nic={','.join(show_id(a) for a in attached)}" if attached else None,
    )


def _ports(ports: list[Any] | None) -> str | None:
    if not ports:
        return None
    shown = []
    for port in ports[:4]:
        if isinstance(port, dict):
            shown.append(
                word(
                    f"{port.get('port', '?')}:{port.get('state', '?')}:{port.get('rate_gbps', '?')}G",
                    40,
                )
            )
    return f"ports={','.join(shown)}" if shown else None


# --------------------------------------------------------------------------- processes


def allowed(facts: Facts, process: Node) -> str | None:
    """The process's CPU affinity and, when threads are pinned elsewhere, theirs too: the
    main thread's list alone hides an acl_thread pinned to another node."""
    allowed = attr(process, "cpus_allowed")
    if not allowed:
        return None
    threads = facts.threads_of.get(process.id, [])
    foreign = query.foreign_thread_cpus(process, threads)
    if not foreign:
        return f"allowed={word(allowed, 40)}"
    cpus = format_cpulist(set().union(*foreign.values()))
    return f"allowed={word(allowed, 40)} thr_allowed={word(cpus, 40)}"


def flow_items(facts: Facts, wanted: Callable[[str], bool], indent: int = 0) -> list[Item]:
    """talks_to edges (process → process), the biggest first."""
    edges = [e for e in facts.talks_to if wanted(str(attr(e, "transport") or "?"))]
    edges.sort(
        key=lambda e: (-(attr(e, "bytes") or 0), -(attr(e, "bytes_per_s") or 0), e.src, e.dst)
    )
    return [
        Item(
            ids=(),
            kind="talks_to",
            render=partial(flow_line, facts, edge),
            procs=(edge.src, edge.dst),
            name=facts.name_of(edge.src),
            measure={
                k: float(v)
                for k, v in (("bytes", attr(edge, "bytes")), ("rate", attr(edge, "bytes_per_s")))
                if v is not None
            },
            edges=(edge,),
            indent=indent,
        )
        for edge in edges
    ]


def flow_line(facts: Facts, edge: Edge) -> str:
    g = edge.get

    def end(node_id: str) -> str:
        node = facts.graph.nodes.get(node_id)
        return named(node) if node is not None else show_id(node_id)

    return parts(
        f"{end(edge.src)} → {end(edge.dst)}",
        escape_short(g("transport") or "?"),
        kv("bytes", g("bytes"), fmt_bytes),
        kv("rate", g("bytes_per_s"), fmt_byte_rate),
        kv("window", g("window_s"), lambda v: f"{fmt_num(v)}s"),
        kv("flows", g("flows")),
        kv("retrans", g("retrans_total")),
    )
