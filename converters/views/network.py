"""Layer 4, network: hosts' TCP counters, NICs, RDMA devices, process-to-process flows over
TCP/UDP and the sockets behind them (look-alikes of one owner folded)."""

from __future__ import annotations

from functools import partial
from typing import Any

from wp_mcp.graph.model import Node

from ..facts import Facts, attr
from ..items import Item, aggregate, group_item, node_item
from ..lines import (
    NETWORK_TRANSPORTS,
    bus_line,
    escape_short,
    flow_items,
    host_items,
    kv,
    pair_kv,
    parts,
    spread,
)
from ..steps import job_items
from ..text import (
    fmt_byte_rate,
    fmt_bytes,
    fmt_count,
    fmt_ms,
    fmt_rate,
    id_ranges,
    quote,
    show_id,
    word,
)
from ..trace_lines import collective_items
from . import view

LEGEND = (
    "host retrans listen_ovf | nic state speed rx/tx err drop | A → B transport "
    "bytes rate flows retrans | collective kind ×calls/rank ranks bytes/call p50 p99 "
    "fastest_p50 wait_slowest | sock proto state local→remote sent/recv rate rtt(min) retrans q proc"
)


@view(
    "network",
    legend=LEGEND,
    narrow="kind=socket pid=N min_bytes=1M min_retrans=1",
    top=("collective", "talks_to", "socket", "nic"),
)
def network(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = host_items(graph.of_kind("host"), ("net",))
    items += job_items(graph)  # the exchanges' share of the step, over the rank links
    for nic in sorted(graph.of_kind("nic"), key=_nic_rank):
        items.append(node_item(nic, partial(_nic_line, nic), metrics=partial(_nic_metrics, nic)))
    for rdma in sorted(graph.of_kind("rdma_device"), key=lambda n: n.id):
        items.append(node_item(rdma, partial(bus_line, facts, rdma)))
    items += flow_items(facts, lambda t: t in NETWORK_TRANSPORTS)
    sockets = [s for s in graph.of_kind("socket") if (attr(s, "proto") or "") != "unix"]
    items += socket_items(facts, sockets)
    return collective_items(facts) + items


def _nic_rank(nic: Node) -> tuple[Any, ...]:
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


def socket_items(facts: Facts, sockets: list[Node]) -> list[Item]:
    """Sockets by traffic; look-alikes of one owner (same proto, state, addresses) folded."""
    sockets = sorted(sockets, key=_socket_rank)

    def key(sock: Node) -> tuple[Any, ...] | None:
        g = sock.__dict__.get  # Node.get without its default, minus a call: every socket
        if g("rtt_ms") is not None and (g("retrans_total") or 0) > 0:
            return None  # a flow with losses keeps its own line
        return (
            facts.holders(sock.id),
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
            procs=facts.holders(sock.id),
            metrics=partial(_socket_metrics, [sock]),
            edges=facts.graph.out_edges(sock.id, "peer"),
        )

    def many(group: list[Node]) -> Item:
        holders = facts.holders(group[0].id)
        item = group_item(
            group, "alike", partial(_socket_group_detail, facts, group), procs=holders,
            metrics=partial(_socket_metrics, group),
        )  # fmt: skip
        item.kind = "socket"
        return item

    return aggregate(sockets, key, one, many)


def _socket_rank(sock: Node) -> tuple[Any, ...]:
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
        spread("sent", sent),
        spread("recv", received),
        f"proc={id_ranges(holders, 2)}" if holders else None,
    )
