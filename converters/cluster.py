"""What a cluster graph says about its hosts, for the summary and the cross-host rules:
each host's ranks, its traffic to other hosts and the loss on it, the nodes that did not
collect, the clock skew, and the worst hosts (docs/clusters.md).

One scan of the processes and one of the joined cross-host flows; no layer is built.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from wp_mcp.graph import ids, query
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Edge, Meta, Node
from wp_mcp.graph.safetext import escape

from .facts import Facts
from .index import index_for
from .items import Item
from .lines import kv, parts
from .text import fmt_bytes, fmt_pct, id_ranges, word

HOST_PARTS_KEPT = 8  # per-host graphs kept per cluster graph for the summary drill-down
WORST_HOSTS = 3
# A host below all of these is folded as quiet in the hosts view: the floors the cross-host
# rules start from (loss as L4.flow-retransmits, run delay as the straggler's margin, the
# "good" NUMA locality grade).
QUIET_LOSS = 0.005
QUIET_RUN_PCT = 10.0
QUIET_LOCALITY = 0.8


@dataclass(slots=True)
class HostTraffic:
    """What one host sent over joined cross-host flows, as its own sockets counted it."""

    sent: int = 0
    retrans: int = 0
    segments: int = 0  # data segments sent, as tcp_info counted them (none: loss unknown)
    ends: set[str] = field(default_factory=set)  # its processes at either end of those flows

    @property
    def loss(self) -> float:
        """Retransmitted / sent segments; 0 where no segment count was collected."""
        return self.retrans / self.segments if self.segments else 0.0


def cross_host_traffic(graph: Graph, transport: str | None = "tcp") -> dict[str, HostTraffic]:
    """Per host, its side of every joined cross-host ``talks_to`` edge (``transport`` only,
    or all when None): the merge keeps each side's own bytes and retransmissions."""
    return traffic_of(cross_host_edges(graph), transport)


def cross_host_edges(graph: Graph) -> list[Edge]:
    """The cross-host ``talks_to`` edges: those the merge joined, and any other whose two
    ends are on two hosts (a graph built whole, or imported): one pass over the edges."""
    return [
        edge
        for edge in graph.edges("talks_to")
        if edge.get("cross_host") or ids.split_host(edge.src)[0] != ids.split_host(edge.dst)[0]
    ]


def traffic_of(edges: list[Edge], transport: str | None) -> dict[str, HostTraffic]:
    """:func:`cross_host_traffic` of these cross-host edges."""
    traffic: dict[str, HostTraffic] = defaultdict(HostTraffic)
    for edge in edges:
        if transport not in (None, edge.get("transport")):
            continue
        # an edge without each side's counters (not joined by the merge): its bytes are
        # the source's
        sided = edge.get("src_bytes_sent") is not None or edge.get("dst_bytes_sent") is not None
        for end, side in ((edge.src, "src"), (edge.dst, "dst")):
            host = traffic[ids.split_host(end)[0]]
            if not sided and side == "src":
                host.sent += edge.get("bytes", 0) or 0
            host.sent += edge.get(f"{side}_bytes_sent", 0) or 0
            if edge.get(f"{side}_window_data_segs_out") is not None:
                # the window's deltas, less what DSACKs showed needless: what it loses now
                retrans = edge.get(f"{side}_window_retrans") or 0
                host.retrans += retrans - min(retrans, edge.get(f"{side}_window_dsack_dups") or 0)
                host.segments += edge.get(f"{side}_window_data_segs_out") or 0
            else:  # a graph merged without windows: the connections' lives
                host.retrans += edge.get(f"{side}_retrans_total", 0) or 0
                host.segments += edge.get(f"{side}_data_segs_out", 0) or 0
            host.ends.add(end)
    return dict(traffic)


def ranks_by_host(graph: Graph) -> dict[str, list[Node]]:
    """Processes marked with a RANK, per host, in rank order."""
    by_host: dict[str, list[Node]] = defaultdict(list)
    for proc in graph.of_kind("process"):
        if proc.get("rank") is not None:
            by_host[ids.split_host(proc.id)[0]].append(proc)
    for procs in by_host.values():
        procs.sort(key=lambda p: (p.get("rank"), p.id))
    return dict(by_host)


@dataclass(slots=True)
class HostSigns:
    """What stands out on one host besides its traffic: the processes driving one
    accelerator from another NUMA node than the device's, and the devices whose PCIe link
    trained below its capability (what L3.device-numa-mismatch and L3.pcie-downtrained judge)."""

    off_node: list[str] = field(default_factory=list)
    downtrained: list[str] = field(default_factory=list)


def host_signs(facts: Facts) -> dict[str, HostSigns]:
    """Per host prefix, its off-node accelerator users and downtrained links: one pass over
    the processes and one over the linked devices."""
    graph = facts.graph
    signs: dict[str, HostSigns] = defaultdict(HostSigns)
    for proc in graph.of_kind("process"):
        devices = facts.accelerators_of(proc.id)
        if len(devices) != 1:
            continue
        home, _, _ = query.device_numa_node(graph, devices[0])
        shares = query.cpu_share(graph, proc)
        if home is not None and shares and max(shares, key=lambda n: shares[n]) != home:
            signs[ids.split_host(proc.id)[0]].off_node.append(proc.id)
    for kind in query.LINKED_KINDS:
        for device in graph.of_kind(kind):
            if query.link_downtrained(device):
                signs[ids.split_host(device.id)[0]].downtrained.append(device.id)
    return dict(signs)


def unfinished_nodes(graph: Graph) -> dict[str, str]:
    """Hosts whose ``<host>/collection`` status is not ok (missing, failed, cancelled), with
    the status and reason."""
    out = {}
    for status in graph.meta.collectors:
        host, name = ids.split_host(status.name)
        if host and name == "collection" and status.status != "ok":
            out[host] = f"{status.status}: {status.reason}" if status.reason else status.status
    return out


def cluster_facts(graph: Graph) -> dict[str, Any] | None:
    """The cluster part of the summary; None for a single-host graph."""
    if len(graph.meta.hosts) < 2:
        return None
    signs = host_signs(index_for(graph).facts)
    ranks = ranks_by_host(graph)
    cross = cross_host_edges(graph)
    traffic = traffic_of(cross, transport=None)
    clock = (getattr(graph.meta, "cluster", None) or {}).get("clock") or {}
    total = HostTraffic(
        sum(t.sent for t in traffic.values()),
        sum(t.retrans for t in traffic.values()),
        sum(t.segments for t in traffic.values()),
    )
    return {
        "ranks": sum(len(p) for p in ranks.values()),
        "ranks_per_host": sorted({len(p) for p in ranks.values()}),
        "hosts_with_ranks": len(ranks),
        "unfinished": unfinished_nodes(graph),
        "skew_s": clock.get("skew_s") if clock.get("measured") else None,
        "cross_host_flows": len(cross),
        "cross_host_bytes": total.sent,
        "cross_host_loss": total.loss,
        "worst": _worst_hosts(traffic, ranks),
        "off_node": _most(signs, "off_node"),
        "downtrained": _most(signs, "downtrained"),
    }


def _most(signs: dict[str, HostSigns], what: str) -> dict[str, Any]:
    """How many of one sign on how many hosts, and the hosts with most of it."""
    counts = {host: len(getattr(sign, what)) for host, sign in signs.items()}
    counts = {host: n for host, n in counts.items() if n}
    worst = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:WORST_HOSTS]
    return {"count": sum(counts.values()), "hosts": len(counts), "worst": worst}


def _worst_hosts(
    traffic: dict[str, HostTraffic], ranks: dict[str, list[Node]]
) -> list[tuple[str, str]]:
    """(host, why) for the hosts losing most of what they send across hosts, then the host
    of the rank that waits longest for a CPU (what the cross-host rules look at first)."""
    lossy = sorted((t.loss, h) for h, t in traffic.items() if t.retrans)
    worst = [(h, f"loss {loss:.1%}") for loss, h in reversed(lossy[-WORST_HOSTS:])]
    delays = [(p.get("run_delay_pct"), h, p) for h, ps in ranks.items() for p in ps
              if p.get("run_delay_pct") is not None]  # fmt: skip
    if delays:
        delay, host, proc = max(delays, key=lambda d: (d[0], d[1]))
        worst.append((host, f"rank {proc.get('rank')} run-delay {delay:.0f}%"))
    return worst


def cluster_lines(facts: dict[str, Any], width: int) -> list[str]:
    """Two lines: ranks, the nodes that did not collect (their reasons are on the coverage
    line) and skew; cross-host traffic and the worst hosts. ``width`` is the summary's room
    for top lines: when it is short, host names are cut and lists shortened to one."""
    name_chars, listed = (30, 4) if width >= 36 else (12, 4) if width else (12, 1)
    per_host = "-".join(str(n) for n in sorted({min(facts["ranks_per_host"], default=0),
                                                max(facts["ranks_per_host"], default=0)}))  # fmt: skip
    ranks = f"{facts['ranks']} ranks ({per_host}/host)" if facts["ranks"] else "no ranks marked"
    unfinished = list(facts["unfinished"])
    more = f",+{len(unfinished) - listed}" if len(unfinished) > listed else ""
    named = ",".join(word(h, name_chars) for h in unfinished[:listed])
    nodes = (
        f"not collected {len(unfinished)}: {named}{more}" if unfinished else "every node collected"
    )
    skew = facts["skew_s"]
    clock = f"clock skew {skew * 1000:.1f}ms" if skew is not None else "clock skew unmeasured"
    # the loss and the straggler are two causes: both named even when room is short
    worst = ", ".join(f"{word(h, name_chars)} {why}" for h, why in facts["worst"][: max(listed, 2)])
    signs = [
        _sign_text(facts[key], what, name_chars, 3 if width >= 56 else 1 if width >= 36 else 0)
        for key, what in (("off_node", "off-node"), ("downtrained", "downtrained"))
        if facts.get(key, {}).get("count")
    ]
    return [
        f"cluster: {ranks} | {nodes} | {clock}",
        f"cross-host: {facts['cross_host_flows']:,} flows {fmt_bytes(facts['cross_host_bytes'])} "
        f"loss {facts['cross_host_loss']:.2%} | worst: {worst or 'none stands out'}",
        "hosts: " + (" | ".join(signs) or "no off-node rank, no downtrained link"),
    ]


def _sign_text(sign: dict[str, Any], what: str, name_chars: int, listed: int) -> str:
    """``off-node 106 on 53 (h3 4, h7 3, h9 2 …)``: subjects, on how many hosts, the most."""
    named = ", ".join(f"{word(h, name_chars)} {n}" for h, n in sign["worst"][:listed])
    more = " …" if sign["hosts"] > listed else ""
    return f"{what} {sign['count']} on {sign['hosts']}" + (f" ({named}{more})" if named else "")


def host_part(graph: Graph, hosts: set[str]) -> Graph:
    """The part of a cluster graph on ``hosts``: their nodes, the edges between them and
    their collector statuses (what the summary of a one-host drill-down counts; its
    cross-host flows are in the paged views' host filter). Nodes are shared, not copied; a
    few parts are kept per graph."""
    index = index_for(graph)
    key = tuple(sorted(hosts))
    with index._lock:
        part = index.parts.get(key)
        if part is None:
            part = index.parts[key] = _build_part(graph, hosts)
            while len(index.parts) > HOST_PARTS_KEPT:
                index.parts.popitem(last=False)
        return part


def _build_part(graph: Graph, hosts: set[str]) -> Graph:
    def on_hosts(node_id: str) -> bool:
        return ids.split_host(node_id)[0] in hosts

    edges = [e for e in graph.edges() if on_hosts(e.src) and on_hosts(e.dst)]
    keep = [node for node_id, node in graph.nodes.items() if on_hosts(node_id)]
    meta = Meta(
        hosts=[h for h in graph.meta.hosts if h in hosts],
        started_at=graph.meta.started_at,
        window_s=graph.meta.window_s,
        collectors=[c for c in graph.meta.collectors if ids.split_host(c.name)[0] in hosts],
        tool_version=graph.meta.tool_version,
        origin=graph.meta.origin,
    )
    part, _, _ = Graph.from_validated(meta, keep, edges)
    return part


# --------------------------------------------------------------------------- hosts view


def hosts_view(facts: Facts) -> list[Item]:
    """One line per host, worst first: the nodes that did not collect, then by the loss on
    what a host sends across hosts, its slowest rank's run delay, its ranks' NUMA locality.
    The step between the summary and one host's drill-down (``host`` filter)."""
    graph = facts.graph
    ranks = ranks_by_host(graph)
    traffic = cross_host_traffic(graph, transport=None)
    signs = host_signs(facts)
    host_nodes = {ids.split_host(n.id)[0]: n for n in graph.of_kind("host")}
    present = graph.meta.hosts or sorted(host_nodes)
    lone = present[0] if len(present) == 1 else None  # a single-host graph's ids are bare
    rows = [
        _host_row(h, host_nodes.get(key), ranks.get(key, []), traffic.get(key),
                  signs.get(key) or HostSigns())
        for h in present
        for key in ("" if h == lone else h,)
    ]  # fmt: skip
    rows.sort(key=lambda row: row.order)
    missing = [
        _missing_item(h, why) for h, why in unfinished_nodes(graph).items() if h not in present
    ]
    standing_out = [row.item for row in rows if not row.quiet]
    return missing + standing_out + _fold_quiet([row for row in rows if row.quiet])


@dataclass(slots=True)
class _HostRow:
    order: tuple[Any, ...]
    item: Item
    quiet: bool  # nothing stands out: below every floor of the cross-host rules
    rank_count: int


def _fold_quiet(rows: list[_HostRow]) -> list[Item]:
    """Quiet hosts folded per rank count (3 or more alike), so the hosts that stand out lead
    and a thousand healthy hosts cost a line."""
    by_ranks: dict[int, list[_HostRow]] = defaultdict(list)
    for row in rows:
        by_ranks[row.rank_count].append(row)
    items: list[Item] = []
    for count, alike in sorted(by_ranks.items()):
        if len(alike) < 3:
            items += [row.item for row in alike]
            continue
        names = [row.item.name or "" for row in alike]

        def render(count: int = count, names: list[str] = names) -> str:
            return (
                f"{len(names)}× host ranks={count} quiet (loss<{QUIET_LOSS:.1%} "
                f"run-max<{QUIET_RUN_PCT:g}% loc≥{QUIET_LOCALITY:g}, no off-node rank or "
                f"downtrained link) {id_ranges(names, 3)}"
            )

        items.append(
            Item(
                ids=tuple(i for row in alike for i in row.item.ids),
                kind="host",
                render=render,
                procs=tuple(p for row in alike for p in row.item.procs),
                name=names[0],
                group={"group": "quiet hosts", "count": len(names), "ranks_per_host": count},
            )
        )
    return items


def _host_row(
    host: str, node: Node | None, ranks: list[Node], sent: HostTraffic | None, signs: HostSigns
) -> _HostRow:
    delays = [p.get("run_delay_pct") for p in ranks if p.get("run_delay_pct") is not None]
    local = [p.get("numa_locality") for p in ranks if p.get("numa_locality") is not None]
    metrics = {
        "cpu": node.get("cpu_busy_pct") if node is not None else None,
        "run": max(delays) if delays else None,
        "locality": sum(local) / len(local) if local else None,
        "bytes": sent.sent if sent else None,
        "retrans": sent.retrans if sent else None,
        "off_node": len(signs.off_node) or None,
        "downtrained": len(signs.downtrained) or None,
    }
    loss = sent.loss if sent else 0.0
    numbers = sorted(int(p.get("rank")) for p in ranks)

    def render() -> str:
        return parts(
            word(host, 40),
            f"ranks={len(numbers)} ({numbers[0]}-{numbers[-1]})" if numbers else "ranks=0",
            kv("cpu", metrics["cpu"], fmt_pct),
            f"xhost-sent={fmt_bytes(sent.sent)} loss={loss:.2%}" if sent else None,
            kv("run-max", metrics["run"], fmt_pct),
            kv("loc", metrics["locality"], lambda v: f"{v:.2f}"),
            kv("off-node", metrics["off_node"], str),
            kv("downtrained", metrics["downtrained"], str),
        )

    item = Item(
        ids=(node.id,) if node is not None else (),
        kind="host",
        render=render,
        procs=tuple(p.id for p in ranks),
        name=host,
        measure={k: float(v) for k, v in metrics.items() if v is not None},
        nodes=(node,) if node is not None else (),
    )
    quiet = (
        loss < QUIET_LOSS
        and (metrics["run"] or 0.0) < QUIET_RUN_PCT
        and (metrics["locality"] if metrics["locality"] is not None else 1.0) >= QUIET_LOCALITY
        and not signs.off_node
        and not signs.downtrained
    )
    # hosts where something stands out first, each by what stands out most
    order = (quiet, -loss, -(metrics["run"] or 0.0), -len(signs.downtrained),
             -len(signs.off_node), metrics["locality"] or 1.0, host)  # fmt: skip
    return _HostRow(order, item, quiet, len(numbers))


def _missing_item(host: str, why: str) -> Item:
    return Item(
        ids=(),
        kind="host",
        render=lambda: f"{word(host, 40)} not collected ({escape(why, 80)})",
        name=host,
        group={"group": "not collected", "host": word(host, 40), "reason": escape(why, 80)},
    )
