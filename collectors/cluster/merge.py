"""One cluster graph from several host graphs: a pure function, no I/O.

- **Host-prefixed ids**: every node and edge of host ``h`` gets ``h/`` before its id
  (``graph/ids.py`` ``with_host``), so ``proc:1234`` on two hosts stays two processes.
- **Cross-host flows joined end to end**: a TCP/UDP socket on one host whose 4-tuple is the
  reverse of a socket's on another host is the other end of the same connection; the two
  get a ``peer`` edge (``cross_host: true``) and the processes holding them one ``talks_to``
  edge, derived as the ipc collector derives a local one (``ipc.socket_links``), plus what
  only two ends can tell: each side's own bytes and retransmissions (over the connection's
  life and, where the host collected a window, over the window: ``src_window_retrans``,
  ``src_window_data_segs_out``, ``src_window_dsack_dups`` and the ``dst_`` ones). A 4-tuple seen on more
  than one host (private addresses reused behind NAT or per-host bridges) is ambiguous and
  joins nothing; the count is recorded.
- **Ranks across hosts**: processes the node collection marked with ``rank``/``world_size``
  (from RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR… in their environment) are listed by
  rank; duplicate and missing ranks are named.
- **Clock skew**: each host graph may carry ``meta.clock`` (its clock's offset from the
  collecting driver's, measured by ``node.clock_offset``); the spread of those offsets is the
  cluster's skew, and each host's window start is corrected by its offset.

What the merge learned lands in ``meta.cluster``; hosts that returned nothing are listed
in ``meta.cluster["missing"]`` with the reason and as a ``failed`` collector status.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import orjson
from wp_mcp.graph import CollectorStatus, Edge, Graph, Meta, UserError, ids
from wp_mcp.graph.safetext import excerpt

from ..ipc import socket_links
from ..sockets import RawSocket, inet_peers, pair_key

MAX_HOST_LABEL = 63  # one DNS label
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
SOURCE = "cluster-merge"
_PAIRING = ("proto", "local_addr", "local_port", "remote_addr", "remote_port", "state")


def host_label(name: str) -> str:
    """A host name made fit for an id prefix: DNS-label characters only (``/`` and ``:``
    would make ``split_host`` misread the id), at most 63 of them."""
    label = _LABEL_UNSAFE.sub("-", name).strip("-.")[:MAX_HOST_LABEL]
    if not label:
        raise UserError(f"host name {excerpt(name)} has no letters or digits to prefix ids with")
    return label


def unique_labels(choices: list[list[str]]) -> list[str]:
    """One distinct id prefix per node from its names in order of preference (a host name,
    then what tells nodes with the same host name apart); a node none of whose names is
    free gets its first usable name with ``-2``, ``-3``… appended."""
    taken: set[str] = set()
    labels = []
    for index, names in enumerate(choices):
        usable = [label for label in map(_label_or_none, names) if label] or [f"node{index}"]
        free = [label for label in usable if label not in taken]
        label = free[0] if free else _numbered(usable[0], taken)
        taken.add(label)
        labels.append(label)
    return labels


def _label_or_none(name: str) -> str | None:
    try:
        return host_label(name)
    except UserError:
        return None


def _numbered(label: str, taken: set[str]) -> str:
    number = 2
    while f"{label[: MAX_HOST_LABEL - 6]}-{number}" in taken:
        number += 1
    return f"{label[: MAX_HOST_LABEL - 6]}-{number}"


def merge_hosts(graphs: dict[str, Graph], missing: dict[str, str] | None = None) -> Graph:
    """Merge host graphs (host name → its single-host graph) into one cluster graph.

    ``missing`` names hosts that returned no graph, with the reason (a partial cluster
    snapshot says which nodes it lacks). The input graphs are not modified.
    """
    labels = _labels(list(graphs) + list(missing or {}))
    nodes, edges = [], []
    for name, graph in graphs.items():
        label = labels[name]
        _refuse_multi_host(name, graph)
        nodes += _prefixed_nodes(graph, label)
        edges += _prefixed_edges(graph, label)
    merged, duplicate, dangling = Graph.from_validated(Meta(), nodes, edges)
    if duplicate is not None or dangling is not None:  # inputs were checked graphs: a bug
        raise UserError("host graphs could not be merged: a node or an edge end is missing")
    _merge_meta(merged, graphs, labels, missing or {})
    cluster = merged.meta.cluster  # type: ignore[attr-defined]
    cluster["flows"] = join_cross_host_flows(merged)
    cluster["ranks"] = ranks(merged)
    cluster["clock"] = clock_skew(merged, graphs, labels)
    return merged


# --------------------------------------------------------------------------- ids


def _labels(names: list[str]) -> dict[str, str]:
    labels = {name: host_label(name) for name in names}
    repeated = [label for label, count in Counter(labels.values()).items() if count > 1]
    if repeated:
        raise UserError(f"two hosts share the name {excerpt(repeated[0])}: name each host once")
    return labels


def _refuse_multi_host(name: str, graph: Graph) -> None:
    for node_id in graph.nodes:
        if ids.split_host(node_id)[0]:
            raise UserError(
                f"the graph of {excerpt(name)} already holds host-prefixed ids "
                f"({excerpt(node_id)}): merge single-host graphs"
            )
        return  # ids of one graph are all prefixed or none: the first tells


def _prefixed_nodes(graph: Graph, label: str) -> list:
    nodes = list(graph.nodes.values())
    copies = _deep_copies([node.__dict__ for node in nodes])
    for values in copies:
        values["id"] = ids.with_host(label, values["id"])
    return [type(node).from_dict(values) for node, values in zip(nodes, copies, strict=True)]


def _prefixed_edges(graph: Graph, label: str) -> list:
    edges = list(graph.edges())
    copies = _deep_copies([edge.__dict__ for edge in edges])
    for values in copies:
        values["src"] = ids.with_host(label, values["src"])
        values["dst"] = ids.with_host(label, values["dst"])
    return [type(edge).from_dict(values) for edge, values in zip(edges, copies, strict=True)]


def _deep_copies(values: list[dict]) -> list[dict]:
    """Deep copies of attribute dicts (merged graphs never share mutable values with their
    inputs), through one orjson round trip: attributes are JSON values, and this is ~20×
    faster than ``copy.deepcopy`` on a node graph."""
    return orjson.loads(orjson.dumps(values, option=orjson.OPT_NON_STR_KEYS))


def _merge_meta(merged: Graph, graphs: dict[str, Graph], labels: dict[str, str],
                missing: dict[str, str]) -> None:  # fmt: skip
    meta = merged.meta
    meta.hosts = [labels[name] for name in graphs]
    starts = [g.meta.started_at for g in graphs.values() if g.meta.started_at is not None]
    meta.started_at = min(starts) if starts else None
    windows = [g.meta.window_s for g in graphs.values() if g.meta.window_s is not None]
    meta.window_s = max(windows) if windows else None
    meta.origin = f"cluster of {len(graphs)} hosts"
    meta.tool_version = next((g.meta.tool_version for g in graphs.values()), None)
    # statuses are named like ids, host first, so every coverage line says which node
    for name, graph in graphs.items():
        for status in graph.meta.collectors:
            prefixed = ids.with_host(labels[name], status.name)
            meta.collectors.append(
                status.model_copy(update={"name": prefixed, "host": labels[name]})
            )
    for name, reason in missing.items():
        meta.collectors.append(CollectorStatus(name=ids.with_host(labels[name], "collection"),
                                               status="failed", reason=reason,
                                               host=labels[name]))  # fmt: skip
    meta.capabilities = _capabilities(graphs, labels)
    meta.cluster = {  # type: ignore[attr-defined]
        "hosts": {labels[name]: _host_facts(name, g) for name, g in graphs.items()},
        "missing": {labels[name]: reason for name, reason in missing.items()},
    }


def _capabilities(graphs: dict[str, Graph], labels: dict[str, str]) -> dict[str, Any]:
    """What every host had (a capability some hosts lacked reads as absent), and each host's."""
    per_host = {labels[name]: dict(g.meta.capabilities) for name, g in graphs.items()}
    common: dict[str, Any] = {}
    if per_host:
        first, *rest = per_host.values()
        common = {k: v for k, v in first.items() if all(o.get(k) == v for o in rest)}
    common["per_host"] = per_host
    return common


def _host_facts(name: str, graph: Graph) -> dict[str, Any]:
    facts: dict[str, Any] = {"name": name, "started_at": graph.meta.started_at,
                             "window_s": graph.meta.window_s, "nodes": len(graph.nodes)}  # fmt: skip
    if getattr(graph.meta, "cancelled", False):
        facts["cancelled"] = True
    return facts


# --------------------------------------------------------------------------- flows


def join_cross_host_flows(graph: Graph) -> dict[str, int]:
    """Pair sockets whose ends are on two hosts; add their ``peer`` and ``talks_to`` edges."""
    candidates = _inet_sockets(graph)
    keys = Counter(pair_key(raw.attrs, reverse=False) for raw in candidates)
    ambiguous = {key for key, count in keys.items() if count > 1 and key is not None}
    usable = [raw for raw in candidates if pair_key(raw.attrs, reverse=False) not in ambiguous]
    peers = []
    for client, server in inet_peers(usable):
        if client.attrs["netns"] == server.attrs["netns"]:
            continue  # same host: its own collection paired it already
        a, b = client.attrs["node_id"], server.attrs["node_id"]
        graph.nodes[a].set("role", "client", SOURCE)
        graph.nodes[b].set("role", "server", SOURCE)
        peers.append(graph.link("peer", a, b, source=SOURCE, cross_host=True))
    links = socket_links(graph, peers)
    sides = _both_sides(graph, peers)
    for (src, dst, transport), link in links.items():
        graph.link("talks_to", src, dst, source=SOURCE, **link.attrs(transport),
                   cross_host=True, hosts=[ids.split_host(src)[0], ids.split_host(dst)[0]],
                   **sides.get((src, dst), Counter()))  # fmt: skip
    return {"cross_host_peers": len(peers), "cross_host_talks_to": len(links),
            "ambiguous_sockets": len(candidates) - len(usable)}  # fmt: skip


def _inet_sockets(graph: Graph) -> list[RawSocket]:
    """TCP/UDP sockets (listeners tell which end serves) as the sockets collector's pairing
    reads them, the host label standing in for the namespace (so loopback pairs stay within
    one host)."""
    found = []
    for index, node in enumerate(graph.of_kind("socket")):
        if node.get("proto") not in ("tcp", "udp") or node.get("local_port") is None:
            continue
        attrs = {name: node.get(name) for name in _PAIRING if node.get(name) is not None}
        if "remote_port" in attrs and "remote_addr" not in attrs:
            continue
        attrs["netns"] = ids.split_host(node.id)[0]
        attrs["node_id"] = node.id
        found.append(RawSocket(inode=index, attrs=attrs))
    return found


def _both_sides(graph: Graph, peers: list[Edge]) -> dict[tuple[str, str], Counter[str]]:
    """Each end's own counters per (client process, server process): the bytes the sender
    says it sent against those the receiver says it received, and each side's
    retransmissions (loss shows on the side that sends into the lossy link)."""
    totals: dict[tuple[str, str], Counter[str]] = {}
    for edge in peers:
        client, server = graph.nodes[edge.src], graph.nodes[edge.dst]
        for src in {e.src for e in graph.in_edges(client.id, "holds")}:
            for dst in {e.src for e in graph.in_edges(server.id, "holds")}:
                if src == dst:
                    continue
                counts = totals.setdefault((src, dst), Counter())
                counts["src_bytes_sent"] += client.get("bytes_sent", 0)
                counts["dst_bytes_received"] += server.get("bytes_received", 0)
                counts["dst_bytes_sent"] += server.get("bytes_sent", 0)
                counts["src_bytes_received"] += client.get("bytes_received", 0)
                counts["src_retrans_total"] += client.get("retrans_total", 0)
                counts["dst_retrans_total"] += server.get("retrans_total", 0)
                counts["src_data_segs_out"] += client.get("data_segs_out", 0)
                counts["dst_data_segs_out"] += server.get("data_segs_out", 0)
                for side, end in (("src", client), ("dst", server)):
                    if end.get("window_data_segs_out") is not None:  # the window's deltas
                        for name in ("window_retrans", "window_data_segs_out",
                                     "window_dsack_dups"):  # fmt: skip
                            counts[f"{side}_{name}"] += end.get(name) or 0
    return totals


# --------------------------------------------------------------------------- ranks


def ranks(graph: Graph) -> dict[str, Any]:
    """The ranks found across hosts: rank → process id, with duplicates and missing ranks."""
    by_rank: dict[int, list[str]] = {}
    sizes: set[int] = set()
    masters: set[str] = set()
    for proc in graph.of_kind("process"):
        rank = proc.get("rank")
        if rank is None:
            continue
        by_rank.setdefault(int(rank), []).append(proc.id)
        if proc.get("world_size") is not None:
            sizes.add(int(proc.get("world_size")))
        if proc.get("master_addr"):
            masters.add(f"{proc.get('master_addr')}:{proc.get('master_port', '?')}")
    if not by_rank:
        return {"found": 0}
    # a rank's launcher (torchrun) carries no RANK; processes of one rank that are parent
    # and child keep the deepest (the worker), siblings count as duplicates
    owners = {rank: _worker(graph, procs) for rank, procs in sorted(by_rank.items())}
    found: dict[str, Any] = {
        "found": len(owners),
        "by_rank": {str(rank): procs[0] for rank, procs in owners.items()},
        "hosts": dict(Counter(ids.split_host(p)[0] for procs in owners.values() for p in procs)),
    }
    duplicates = {str(rank): procs for rank, procs in owners.items() if len(procs) > 1}
    if duplicates:
        found["duplicates"] = duplicates
    if len(sizes) == 1:
        size = sizes.pop()
        found["world_size"] = size
        found["missing"] = [rank for rank in range(size) if rank not in owners]
    elif sizes:
        found["world_sizes_disagree"] = sorted(sizes)
    if masters:
        found["masters"] = sorted(masters)
    return found


def _worker(graph: Graph, procs: list[str]) -> list[str]:
    """Drop processes whose child in the list carries the same rank (a wrapper's env)."""
    parents = {e.src for p in procs for e in graph.in_edges(p, "parent_of")}
    return [p for p in procs if p not in parents] or procs


# --------------------------------------------------------------------------- clock


def clock_skew(graph: Graph, graphs: dict[str, Graph], labels: dict[str, str]) -> dict[str, Any]:
    """Each host's clock offset from the driver's and the spread between hosts (the skew);
    window starts corrected by the offsets show how aligned the windows really were."""
    hosts: dict[str, Any] = {}
    for name, host_graph in graphs.items():
        clock = getattr(host_graph.meta, "clock", None)
        if isinstance(clock, dict) and clock.get("offset_s") is not None:
            hosts[labels[name]] = clock
    if not hosts:
        return {"measured": False, "reason": "no host graph carries a clock reading"}
    offsets = [float(c["offset_s"]) for c in hosts.values()]
    result: dict[str, Any] = {
        "measured": True,
        "hosts": hosts,
        "skew_s": round(max(offsets) - min(offsets), 6),
        "uncertainty_s": round(max(float(c.get("uncertainty_s", 0)) for c in hosts.values()), 6),
    }
    starts = [
        started - float(hosts[labels[name]]["offset_s"])
        for name in graphs
        if labels[name] in hosts and (started := graphs[name].meta.started_at) is not None
    ]
    if starts:
        result["window_start_spread_s"] = round(max(starts) - min(starts), 6)
    return result
