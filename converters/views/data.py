"""Layer 7, data: process-to-process flows over local transports, then shared memory,
pipes, message queues and unix sockets by size (look-alikes of one holder set folded)."""

from __future__ import annotations

from functools import partial
from typing import Any

from wp_mcp.graph.model import Node

from ..facts import Facts, attr
from ..items import Item, aggregate, group_item, node_item
from ..lines import NETWORK_TRANSPORTS, escape_short, flow_items, kv, parts, spread
from ..text import fmt_bytes, id_ranges, quote, show_id
from . import view

LEGEND = "A → B transport bytes rate | pipe/shm/mq/unix-sock path size peer proc=holders"
IPC_KINDS = ("pipe", "shm", "mqueue")


@view(
    "data",
    legend=LEGEND,
    narrow="kind=shm pid=N min_size=1M",
    top=("talks_to", "shm", "pipe", "socket", "mqueue"),
)
def data(facts: Facts) -> list[Item]:
    graph = facts.graph
    items = flow_items(facts, lambda t: t not in NETWORK_TRANSPORTS)
    objects = [n for kind in IPC_KINDS for n in graph.of_kind(kind)]
    objects += [s for s in graph.of_kind("socket") if (attr(s, "proto") or "") == "unix"]
    objects.sort(key=lambda n: (-(attr(n, "size_bytes") or 0), n.kind, n.id))

    def key(obj: Node) -> tuple[Any, ...]:
        return (obj.kind, attr(obj, "shm_type"), facts.holders(obj.id))

    def one(obj: Node) -> Item:
        return node_item(
            obj,
            partial(_ipc_line, facts, obj),
            procs=facts.holders(obj.id),
            metrics={"size": attr(obj, "size_bytes")}
            if attr(obj, "size_bytes") is not None
            else {},
            edges=graph.in_edges(obj.id, "holds"),
        )

    def many(group: list[Node]) -> Item:
        holders = facts.holders(group[0].id)
        return group_item(group, "alike", partial(_group_detail, group, holders), procs=holders)

    return items + aggregate(objects, key, one, many)


def _group_detail(group: list[Node], holders: tuple[str, ...]) -> str:
    sizes = [attr(n, "size_bytes") for n in group if attr(n, "size_bytes") is not None]
    return parts(
        spread("size", sizes),
        f"proc={id_ranges(holders, 3)}" if holders else "no holder",
    )


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
