"""The seven layers (docs/views.md) as lists of items, most significant first.

Each builder returns the items of one layer; each line carries the facts that layer's rules
read (see docs/views.md for the list per layer). Facts appear in one layer only where
possible, so reading every layer costs little more than the sum of what is new in each.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from wp_mcp.graph import query
from wp_mcp.graph.cpulist import format_cpulist, parse_cpulist
from wp_mcp.graph.model import Edge, Node

from .facts import Facts, attr
from .items import Item, aggregate, group_item, node_item
from .text import (
    fmt_byte_rate,
    fmt_bytes,
    fmt_count,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_per_node,
    fmt_rate,
    fmt_seconds,
    id_ranges,
    name_pattern,
    quote,
    show_id,
    word,
)

ACCELERATORS = ("gpu", "npu")
NETWORK_TRANSPORTS = ("tcp", "udp")
NOT_MEASURED = float("-inf")


def parts(*pieces: str | None) -> str:
    return " ".join(p for p in pieces if p)


def kv(name: str, value: object, fmt: Callable[[float], str] = fmt_num) -> str | None:
    return None if value is None else f"{name}={fmt(value)}"


def named(node: Node) -> str:
    """``proc:12 "python3"`` — the id and, when known, the quoted name."""
    name = attr(node, "name")
    return f"{show_id(node.id)} {quote(name, 40)}" if name is not None else show_id(node.id)


def pair(a: object, b: object, fmt: Callable[[float], str] = fmt_count) -> str | None:
    if a is None and b is None:
        return None
    return f"{fmt(a) if a is not None else '?'}/{fmt(b) if b is not None else '?'}"


def sort_desc(value: float | None) -> float:
    return -value if value is not None else -NOT_MEASURED


# --------------------------------------------------------------------------- shared lines


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


def pair_kv(name: str, a: object, b: object, fmt: Callable[[float], str]) -> str | None:
    shown = pair(a, b, fmt)
    return f"{name}={shown}" if shown else None


def psi_kv(psi: dict | None, resource: str) -> str | None:
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


def cpulist_size(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return len(parse_cpulist(text))
    except ValueError:
        return None


# --------------------------------------------------------------------------- 1 compute


def compute(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("cpu",))
    items += device_items(facts, "util")
    for process in sorted(graph.of_kind("process"), key=_busy_first):
        items.append(
            node_item(
                process,
                partial(_compute_process_line, facts, process),
                procs=(process.id,),
                metrics=partial(_cpu_metrics, process),
                edges=graph.out_edges(process.id, "uses_device"),
            )
        )
        threads = sorted(facts.threads_of.get(process.id, ()), key=_busy_first)
        items += thread_items(threads, (process.id,), _compute_thread_line, indent=1)
    orphans = [t for t in graph.of_kind("thread") if t.id not in facts.thread_owner]
    items += thread_items(sorted(orphans, key=_busy_first), (), _compute_thread_line)
    return items


def _busy_first(node: Node) -> tuple:
    switches = (attr(node, "vol_ctxt_switches") or 0) + (attr(node, "invol_ctxt_switches") or 0)
    return (sort_desc(attr(node, "cpu_pct")), -switches, node.id)


def _cpu_metrics(node: Node) -> dict[str, float]:
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


def switches(node: Node) -> str | None:
    """Voluntary/involuntary switches: rates when windowed, else the totals."""
    g = node.get
    if g("vol_switches_per_s") is not None or g("invol_switches_per_s") is not None:
        return f"sw={pair(g('vol_switches_per_s'), g('invol_switches_per_s'))}/s"
    shown = pair(g("vol_ctxt_switches"), g("invol_ctxt_switches"))
    return f"sw_total={shown}" if shown else None


def _compute_process_line(facts: Facts, process: Node) -> str:
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


def escape_short(value: object) -> str:
    return word(value, 24)


def cpus(value: object) -> str:
    return word(value, 60)


def _compute_thread_line(thread: Node) -> str:
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


def _numa_time(values: dict | None) -> str | None:
    if not values:
        return None
    total = sum(v for v in values.values() if v)
    if not total:
        return None
    return "on" + fmt_per_node({k: v / total for k, v in values.items() if v})


def is_idle(node: Node) -> bool:
    """Measured over a window and doing nothing (no CPU, no switching)."""
    cpu = attr(node, "cpu_pct")
    if cpu is None or cpu >= 0.1:
        return False
    rates = (attr(node, "vol_switches_per_s") or 0) + (attr(node, "invol_switches_per_s") or 0)
    return rates < 1


def is_unmeasured(node: Node, attrs: tuple[str, ...]) -> bool:
    return all(attr(node, a) is None for a in attrs)


THREAD_METRICS = ("cpu_pct", "cpu_time_s", "vol_ctxt_switches", "vol_switches_per_s", "state")


def thread_items(
    threads: list[Node],
    procs: tuple[str, ...],
    line: Callable[[Node], str],
    indent: int = 0,
) -> list[Item]:
    """Threads one per line, idle or unmeasured look-alikes folded into groups."""

    def key(thread: Node) -> tuple | None:
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
            metrics=partial(_cpu_metrics, thread),
            indent=indent,
        )

    def many(group: list[Node]) -> Item:
        label = "idle" if is_idle(group[0]) else "unmeasured"
        return group_item(group, label, procs=procs, indent=indent)

    return aggregate(threads, key, one, many)


def device_items(facts: Facts, focus: str) -> list[Item]:
    """Accelerators: ``util`` (compute), ``mem`` (memory) or ``map`` (interconnect)."""
    devices = [d for kind in ACCELERATORS for d in facts.graph.of_kind(kind)]
    devices.sort(key=lambda d: (sort_desc(attr(d, "util_pct")), attr(d, "index") or 0, d.id))
    line = {"util": _device_util_line, "mem": _device_mem_line, "map": _device_map_line}[focus]
    attrs = {
        "util": ("util_pct", "mem_used_bytes", "power_w", "temperature_c", "health"),
        "mem": ("mem_used_bytes", "mem_total_bytes"),
        "map": ("numa_node", "cpu_affinity", "pci_bus_id", "link_speed_gts"),
    }[focus]

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

    def key(device: Node) -> tuple | None:
        # Users are on the process lines (dev=) and in interconnect; not a reason to expand.
        return (device.kind,) if is_unmeasured(device, attrs) else None

    return aggregate(devices, key, one, many)


def _users(facts: Facts, device: Node) -> str | None:
    users = facts.users_of(device.id)
    return f"users={id_ranges(users, 3)}" if users else None


def _device_util_line(facts: Facts, device: Node) -> str:
    g = device.get
    return parts(
        named(device),
        kv("util", g("util_pct"), fmt_pct),
        pair_kv("mem", g("mem_used_bytes"), g("mem_total_bytes"), fmt_bytes),
        kv("power_w", g("power_w")),
        kv("temp_c", g("temperature_c")),
        kv("health", g("health"), escape_short),
        _users(facts, device),
    )


def _device_mem_line(facts: Facts, device: Node) -> str:
    g = device.get
    return parts(
        named(device),
        pair_kv("mem", g("mem_used_bytes"), g("mem_total_bytes"), fmt_bytes),
        _users(facts, device),
    )


def _device_map_line(facts: Facts, device: Node) -> str:
    g = device.get
    numa = facts.device_numa(device.id)
    return parts(
        show_id(device.id),
        f"numa={numa}" if numa is not None else "numa=?",
        kv("cpus", g("cpu_affinity"), cpus),
        kv("pci", g("pci_bus_id"), escape_short),
        link(device),
        _users(facts, device),
    )


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


# --------------------------------------------------------------------------- 2 memory


def memory(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("mem",))
    for numa in sorted(graph.of_kind("numa_node"), key=lambda n: (attr(n, "numa_id") or 0, n.id)):
        items.append(node_item(numa, partial(_numa_mem_line, numa)))
    items += [i for i in device_items(facts, "mem") if i.group is None]  # only measured ones

    def key(process: Node) -> tuple | None:
        if is_unmeasured(process, ("rss_bytes", "numa_pages", "major_faults")):
            return ("unmeasured",)
        return None

    def one(process: Node) -> Item:
        return node_item(
            process,
            partial(_memory_process_line, process),
            procs=(process.id,),
            metrics=partial(_memory_metrics, process),
            edges=graph.out_edges(process.id, "mem_on"),
        )

    def many(group: list[Node]) -> Item:
        return group_item(group, "no memory data", procs=tuple(p.id for p in group))

    processes = sorted(graph.of_kind("process"), key=_memory_rank)
    return items + aggregate(processes, key, one, many)


def _memory_metrics(process: Node) -> dict[str, float]:
    metrics = {"rss": attr(process, "rss_bytes"), "pages": _total_pages(process)}
    return {k: float(v) for k, v in metrics.items() if v is not None}


def _total_pages(process: Node) -> int | None:
    pages = attr(process, "numa_pages")
    return sum(pages.values()) if pages else None


def _memory_rank(process: Node) -> tuple:
    return (sort_desc(attr(process, "rss_bytes")), sort_desc(_total_pages(process)), process.id)


def _numa_mem_line(numa: Node) -> str:
    g = numa.get
    stats = g("numa_stats") or {}
    return parts(
        show_id(numa.id),
        pair_kv("free", g("mem_free_bytes"), g("mem_total_bytes"), fmt_bytes),
        kv("hit", stats.get("numa_hit")),
        kv("miss", stats.get("numa_miss")),
        kv("other_node", stats.get("other_node")),
    )


def _memory_process_line(process: Node) -> str:
    g = process.get
    pages = g("numa_pages")
    return parts(
        named(process),
        kv("rss", g("rss_bytes"), fmt_bytes),
        kv("majflt_total", g("major_faults")),
        kv("majflt", g("major_faults_per_s"), fmt_rate),
        f"pages={fmt_count(sum(pages.values()))}" if pages else None,
    )


# --------------------------------------------------------------------------- 3 interconnect


def interconnect(facts: Facts) -> list[Item]:
    graph = facts.graph
    numas = sorted(graph.of_kind("numa_node"), key=lambda n: (attr(n, "numa_id") or 0, n.id))
    items = [node_item(n, partial(_numa_map_line, n)) for n in numas]
    items += device_items(facts, "map")
    for kind in ("nic", "rdma_device", "pci_bridge"):
        for node in sorted(graph.of_kind(kind), key=lambda n: n.id):
            items.append(
                node_item(
                    node,
                    partial(_bus_line, facts, node),
                    edges=graph.out_edges(node.id, "local_to")
                    + graph.out_edges(node.id, "attached"),
                )
            )
    items += path_items(facts)

    def key(process: Node) -> tuple | None:
        if is_unmeasured(process, ("numa_cpu_share", "numa_page_share", "numa_locality")):
            return ("unmeasured",)
        return None

    def one(process: Node) -> Item:
        locality = attr(process, "numa_locality")
        return node_item(
            process,
            partial(_placement_line, facts, process),
            procs=(process.id,),
            metrics={"locality": locality} if locality is not None else {},
            edges=graph.out_edges(process.id, "cpu_on") + graph.out_edges(process.id, "mem_on"),
        )

    def many(group: list[Node]) -> Item:
        return group_item(group, "no NUMA data", procs=tuple(p.id for p in group))

    processes = sorted(graph.of_kind("process"), key=partial(_placement_rank, facts))
    return items + aggregate(processes, key, one, many)


def _placement_rank(facts: Facts, process: Node) -> tuple:
    """Device workers first, then the worst locality."""
    locality = attr(process, "numa_locality")
    return (
        0 if facts.devices_of(process.id) else 1,
        locality if locality is not None else 2.0,
        process.id,
    )


def _numa_map_line(numa: Node) -> str:
    g = numa.get
    distances = g("distances") or {}
    row = ",".join(str(distances[k]) for k in sorted(distances, key=_numeric_key))
    return parts(
        show_id(numa.id),
        kv("cpus", g("cpulist"), cpus),
        kv("mem", g("mem_total_bytes"), fmt_bytes),
        f"dist={word(row, 200)}" if row else None,
    )


def _numeric_key(text: str) -> tuple:
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def _bus_line(facts: Facts, node: Node) -> str:
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


def _ports(ports: list | None) -> str | None:
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


def path_items(facts: Facts) -> list[Item]:
    """Device↔device paths grouped by class (NCCL's LOC/NVL/PIX/PXB/PHB/SYS)."""
    by_class: dict[str, list[Edge]] = {}
    for edge in facts.paths:
        by_class.setdefault(str(attr(edge, "path_class") or "?"), []).append(edge)
    items = []
    for path_class in sorted(by_class):
        edges = sorted(by_class[path_class], key=lambda e: (e.src, e.dst))
        items.append(
            Item(
                ids=(),
                kind="path",
                render=partial(_path_line, path_class, edges),
                edges=tuple(edges),
                measure={"bw": min((attr(e, "bandwidth_gbps") or 0) for e in edges)},
            )
        )
    return items


def _path_line(path_class: str, edges: list[Edge]) -> str:
    pairs = [f"{show_id(e.src)}-{show_id(e.dst)}" for e in edges[:6]]
    more = f" +{len(edges) - 6}" if len(edges) > 6 else ""
    bandwidths = sorted({attr(e, "bandwidth_gbps") for e in edges if attr(e, "bandwidth_gbps")})
    bw = f" bw={fmt_num(bandwidths[0])}Gb/s" if bandwidths else ""
    return f"{len(edges)}× path {word(path_class, 8)}{bw} {' '.join(pairs)}{more}"


def _placement_line(facts: Facts, process: Node) -> str:
    g = process.get
    cpu_share, page_share = g("numa_cpu_share"), g("numa_page_share")
    devices = facts.devices_of(process.id)
    device_numas = {d: facts.device_numa(d) for d in devices}
    shown_devices = [f"{show_id(d)}@{n if n is not None else '?'}" for d, n in device_numas.items()]
    return parts(
        named(process),
        f"dev={','.join(shown_devices)}" if shown_devices else None,
        _device_remote(cpu_share, page_share, device_numas),
        f"cpu{fmt_per_node(cpu_share)}" if cpu_share else None,
        f"mem{fmt_per_node(page_share)}" if page_share else None,
        kv("loc", g("numa_locality"), lambda v: f"{v:.2f}"),
        _allowed(facts, process),
    )


def _allowed(facts: Facts, process: Node) -> str | None:
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


def _device_remote(
    cpu_share: dict | None, page_share: dict | None, device_numas: dict[str, int | None]
) -> str | None:
    """Says when a device worker runs or keeps its memory away from its device's node."""
    wanted = {str(n) for n in device_numas.values() if n is not None}
    if not wanted:
        return None
    flags = []
    if cpu_share and max(cpu_share, key=cpu_share.get) not in wanted:
        flags.append("cpu")
    if page_share and max(page_share, key=page_share.get) not in wanted:
        flags.append("mem")
    return f"REMOTE({'+'.join(flags)}≠dev)" if flags else None


# --------------------------------------------------------------------------- 4 network


def network(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("net",))
    for nic in sorted(graph.of_kind("nic"), key=_nic_rank):
        items.append(node_item(nic, partial(_nic_line, nic), metrics=partial(_nic_metrics, nic)))
    for rdma in sorted(graph.of_kind("rdma_device"), key=lambda n: n.id):
        items.append(node_item(rdma, partial(_bus_line, facts, rdma)))
    items += flow_items(facts, lambda t: t in NETWORK_TRANSPORTS)
    sockets = [s for s in graph.of_kind("socket") if (attr(s, "proto") or "") != "unix"]
    items += socket_items(facts, sockets)
    return items


def _nic_rank(nic: Node) -> tuple:
    rate = (attr(nic, "rx_bytes_per_s") or 0) + (attr(nic, "tx_bytes_per_s") or 0)
    return (-rate, nic.id)


def _nic_metrics(nic: Node) -> dict[str, float]:
    rate = (attr(nic, "rx_bytes_per_s") or 0) + (attr(nic, "tx_bytes_per_s") or 0)
    errors = sum(attr(nic, a) or 0 for a in ("rx_errors", "tx_errors", "rx_dropped", "tx_dropped"))
    return {"rate": rate, "errors": errors}


def _nic_line(nic: Node) -> str:
    g = nic.get
    return parts(
        show_id(nic.id),
        kv("state", g("operstate"), escape_short),
        kv("speed_mbps", g("speed_mbps")),
        kv("mtu", g("mtu")),
        pair_kv("rx/tx", g("rx_bytes_per_s"), g("tx_bytes_per_s"), fmt_byte_rate),
        pair_kv("err", g("rx_errors"), g("tx_errors"), fmt_count),
        pair_kv("drop", g("rx_dropped"), g("tx_dropped"), fmt_count),
        kv("numa", g("numa_node")),
    )


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
            render=partial(_flow_line, facts, edge),
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


def _flow_line(facts: Facts, edge: Edge) -> str:
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


SOCKET_METRICS = ("bytes_sent", "bytes_received", "send_bytes_per_s", "recv_bytes_per_s")


def socket_items(facts: Facts, sockets: list[Node]) -> list[Item]:
    """Sockets by traffic; look-alikes of one owner (same proto, state, addresses) folded."""
    sockets = sorted(sockets, key=_socket_rank)

    def key(sock: Node) -> tuple | None:
        g = sock.get
        if g("rtt_ms") is not None and (g("retrans_total") or 0) > 0:
            return None  # a flow with losses keeps its own line
        return (
            tuple(facts.holders(sock.id)),
            g("proto"),
            g("state"),
            g("local_addr"),
            g("remote_addr"),
            g("remote_port"),
            g("path") is not None,
        )

    def one(sock: Node) -> Item:
        return node_item(
            sock,
            partial(_socket_line, facts, sock),
            procs=tuple(facts.holders(sock.id)),
            metrics=partial(_socket_metrics, [sock]),
            edges=facts.graph.out_edges(sock.id, "peer"),
        )

    def many(group: list[Node]) -> Item:
        holders = tuple(facts.holders(group[0].id))
        item = group_item(
            group, "alike", _socket_group_detail(facts, group), procs=holders,
            metrics=partial(_socket_metrics, group),
        )  # fmt: skip
        item.kind = "socket"
        return item

    return aggregate(sockets, key, one, many)


def _socket_rank(sock: Node) -> tuple:
    moved = (attr(sock, "bytes_sent") or 0) + (attr(sock, "bytes_received") or 0)
    rate = (attr(sock, "send_bytes_per_s") or 0) + (attr(sock, "recv_bytes_per_s") or 0)
    return (-rate, -moved, sock.id)


def _socket_metrics(group: list[Node]) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for name, attrs in (
        ("bytes", ("bytes_sent", "bytes_received")),
        ("rate", ("send_bytes_per_s", "recv_bytes_per_s")),
        ("retrans", ("retrans_total",)),
    ):
        values = [attr(s, a) for s in group for a in attrs if attr(s, a) is not None]
        if values:
            metrics[name] = float(sum(values))
    rtts = [attr(s, "rtt_ms") for s in group if attr(s, "rtt_ms") is not None]
    if rtts:
        metrics["rtt"] = float(max(rtts))
    return metrics


def endpoint(addr: object, port: object) -> str | None:
    if addr is None and port is None:
        return None
    text = f"{addr if addr is not None else '*'}:{port if port is not None else '*'}"
    return word(text, 64)


def _socket_line(facts: Facts, sock: Node) -> str:
    g = sock.get
    local = endpoint(g("local_addr"), g("local_port"))
    remote = endpoint(g("remote_addr"), g("remote_port"))
    peers = [e.dst for e in facts.graph.out_edges(sock.id, "peer")]
    holders = facts.holders(sock.id)
    return parts(
        show_id(sock.id),
        escape_short(g("proto") or "?"),
        escape_short(g("state")) if g("state") else None,
        f"{local or '?'}→{remote}" if remote else local,
        kv("path", g("path"), quote),
        pair_kv("sent/recv", g("bytes_sent"), g("bytes_received"), fmt_bytes),
        pair_kv("rate", g("send_bytes_per_s"), g("recv_bytes_per_s"), fmt_byte_rate),
        _rtt(sock),
        kv("retrans_total", g("retrans_total")),
        kv("retrans", g("retrans_per_s"), fmt_rate),
        kv("lost", g("lost")),
        kv("rto", g("rto_ms"), fmt_ms),
        pair_kv("q", g("rx_queue"), g("tx_queue"), fmt_count),
        f"peer={','.join(show_id(p) for p in peers[:2])}" if peers else None,
        f"proc={id_ranges(holders, 2)}" if holders else None,
    )


def _rtt(sock: Node) -> str | None:
    rtt, low = attr(sock, "rtt_ms"), attr(sock, "min_rtt_ms")
    if rtt is None:
        return None
    return f"rtt={fmt_ms(rtt)}" + (f"(min {fmt_ms(low)})" if low is not None else "")


def _socket_group_detail(facts: Facts, group: list[Node]) -> str:
    first = group[0].get
    sent = [attr(s, "bytes_sent") for s in group if attr(s, "bytes_sent") is not None]
    received = [attr(s, "bytes_received") for s in group if attr(s, "bytes_received") is not None]
    holders = facts.holders(group[0].id)
    ports = sorted(attr(s, "local_port") for s in group if attr(s, "local_port") is not None)
    local = word(first("local_addr"), 40) if first("local_addr") else None
    return parts(
        escape_short(first("proto") or "?"),
        escape_short(first("state")) if first("state") else None,
        f"{local}:{ports[0]}..{ports[-1]}" if local and ports else local,
        f"→{endpoint(first('remote_addr'), first('remote_port'))}"
        if first("remote_addr")
        else None,
        _spread("sent", sent),
        _spread("recv", received),
        f"proc={id_ranges(holders, 2)}" if holders else None,
    )


def _spread(name: str, values: list[float]) -> str | None:
    """Total and the per-entity range: ``sent=1.3M(29K..30K each)``."""
    if not values:
        return None
    low, high = min(values), max(values)
    each = fmt_bytes(low) if low == high else f"{fmt_bytes(low)}..{fmt_bytes(high)}"
    return f"{name}={fmt_bytes(sum(values))}({each} each)"


# --------------------------------------------------------------------------- 5 storage


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


# --------------------------------------------------------------------------- 6 control


def control(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("ctl",))
    for ctr in sorted(graph.of_kind("container"), key=_throttle_rank):
        members = [e.src for e in graph.in_edges(ctr.id, "in_container")]
        items.append(
            node_item(
                ctr,
                partial(_container_line, ctr, members),
                procs=tuple(members),
                metrics={"throttled": attr(ctr, "cpu_throttled_pct") or 0},
            )
        )
    shared = _shared_affinity(facts)
    processes = sorted(graph.of_kind("process"), key=_contention_rank)

    def key(process: Node) -> tuple | None:
        if process.id in shared or _contended(process):
            return None
        return ("ok",)

    def one(process: Node) -> Item:
        return node_item(
            process,
            partial(_control_process_line, facts, process, shared.get(process.id, ())),
            procs=(process.id,),
            metrics=partial(_cpu_metrics, process),
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
            allowed = attr(item.nodes[0], "cpus_allowed")
            items += [
                node_item(
                    t,
                    partial(_control_thread_line, t, allowed),
                    procs=item.ids,
                    metrics=partial(_cpu_metrics, t),
                    indent=1,
                )
                for t in threads
            ]
    return items


def _throttle_rank(ctr: Node) -> tuple:
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


# Below both, a process or thread shows no sign of waiting for a CPU and is folded. These are
# display cut-offs, not diagnoses: the rules apply their own thresholds to the graph.
RUN_DELAY_SHOWN_PCT = 1.0
INVOL_SHOWN_PER_S = 10.0


def _contended(node: Node) -> bool:
    run = attr(node, "run_delay_pct")
    invol = attr(node, "invol_switches_per_s")
    return (run is not None and run >= RUN_DELAY_SHOWN_PCT) or (
        invol is not None and invol >= INVOL_SHOWN_PER_S
    )


def _contention_rank(node: Node) -> tuple:
    return (
        sort_desc(attr(node, "run_delay_pct")),
        sort_desc(attr(node, "invol_switches_per_s")),
        -(attr(node, "invol_ctxt_switches") or 0),
        node.id,
    )


def _shared_affinity(facts: Facts) -> dict[str, tuple[str, ...]]:
    """Processes whose restricted CPU set (not all CPUs) is the same as another process's."""
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
    shared: dict[str, tuple[str, ...]] = {}
    for members in by_set.values():
        if len(members) > 1:
            for member in members:
                shared[member] = tuple(m for m in members if m != member)
    return shared


def _widest_affinity(facts: Facts) -> int:
    cached = facts.__dict__.get("_widest")
    if cached is None:
        sizes = [cpulist_size(attr(p, "cpus_allowed")) or 0 for p in facts.graph.of_kind("process")]
        cached = facts.__dict__["_widest"] = max(sizes, default=0)
    return cached


def _control_process_line(facts: Facts, process: Node, sharing: tuple[str, ...]) -> str:
    g = process.get
    return parts(
        named(process),
        _allowed(facts, process),
        f"shares_cpus_with={id_ranges(sharing, 3)}" if sharing else None,
        kv("run", g("run_delay_pct"), fmt_pct),
        kv("invol", g("invol_switches_per_s"), fmt_rate),
        kv("cpu", g("cpu_pct"), fmt_pct),
    )


def _control_thread_line(thread: Node, process_allowed: str | None) -> str:
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


# --------------------------------------------------------------------------- 7 data

IPC_KINDS = ("pipe", "shm", "mqueue")


def data(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = flow_items(facts, lambda t: t not in NETWORK_TRANSPORTS)
    objects = [n for kind in IPC_KINDS for n in graph.of_kind(kind)]
    objects += [s for s in graph.of_kind("socket") if (attr(s, "proto") or "") == "unix"]
    objects.sort(key=lambda n: (-(attr(n, "size_bytes") or 0), n.kind, n.id))

    def key(obj: Node) -> tuple:
        return (obj.kind, attr(obj, "shm_type"), tuple(facts.holders(obj.id)))

    def one(obj: Node) -> Item:
        return node_item(
            obj,
            partial(_ipc_line, facts, obj),
            procs=tuple(facts.holders(obj.id)),
            metrics={"size": attr(obj, "size_bytes")}
            if attr(obj, "size_bytes") is not None
            else {},
            edges=graph.in_edges(obj.id, "holds"),
        )

    def many(group: list[Node]) -> Item:
        holders = facts.holders(group[0].id)
        sizes = [attr(n, "size_bytes") for n in group if attr(n, "size_bytes") is not None]
        detail = parts(
            _spread("size", sizes),
            f"proc={id_ranges(holders, 3)}" if holders else "no holder",
        )
        return group_item(group, "alike", detail, procs=tuple(holders))

    return items + aggregate(objects, key, one, many)


def _ipc_line(facts: Facts, obj: Node) -> str:
    g = obj.get
    holders = facts.holders(obj.id)
    peers = [e.dst for e in facts.graph.out_edges(obj.id, "peer")]
    return parts(
        show_id(obj.id),
        escape_short(g("shm_type")) if g("shm_type") else None,
        kv("path", g("path"), quote),
        kv("size", g("size_bytes"), fmt_bytes),
        f"peer={','.join(show_id(p) for p in peers[:2])}" if peers else None,
        f"proc={id_ranges(holders, 3)}" if holders else "no holder",
    )


LAYERS: dict[str, Callable[[Facts], list[Item]]] = {
    "compute": compute,
    "memory": memory,
    "interconnect": interconnect,
    "network": network,
    "storage": storage,
    "control": control,
    "data": data,
}

LEGENDS = {
    "compute": "host cpus busy steal load | dev util mem=used/total users | proc cpu thr "
    "sw=vol/invol context switches(/s or _total count) dev | (indented) thr cpu sw cpus=used "
    "on{numa:share}",
    "memory": "host avail=free/total swap majflt psi | numa free=free/total hit miss | dev mem | "
    "proc rss majflt pages=resident page count(numa_maps, base pages; per-node shares in "
    "interconnect)",
    "interconnect": "numa cpus mem dist=SLIT row | dev numa cpus pci link users | nic/rdma | "
    "N× path CLASS pairs | proc dev=id@numa REMOTE(cpu/mem≠dev) cpu{numa:share} "
    "mem{numa:share} loc=P(cpu and pages on one node, 0..1) allowed thr_allowed=threads "
    "pinned elsewhere",
    "network": "host retrans listen_ovf | nic state speed rx/tx err drop | A → B transport "
    "bytes rate flows retrans | sock proto state local→remote sent/recv rate rtt(min) retrans q proc",
    "storage": "host iowait psi_io | disk util await queue r/w iops | proc r/w | thr state=D",
    "control": "host load psi_cpu | ctr throttled procs | proc allowed thr_allowed "
    "shares_cpus_with run "
    "invol cpu | (indented) thr run invol",
    "data": "A → B transport bytes rate | pipe/shm/mq/unix-sock path size peer proc=holders",
}
