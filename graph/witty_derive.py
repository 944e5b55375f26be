"""What a witty import derives from the file's entities and edges: the typed attributes
and semantic edges our layers and rules read (per-NUMA CPU and page shares, locality,
context switches, allowed CPUs; ``parent_of``, ``local_to``, ``cpu_on``, ``mem_on``,
``holds``, ``talks_to``).

Derivation works on the importer's plain dicts, before validation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from . import ids
from .witty_spec import DERIVED_MARK

Doc = dict[str, Any]  # an entity or an edge as the importer holds it: plain JSON
Add = Callable[[Doc], None]  # add a derived edge's record: {src, dst, kind, ..., "derived"}
Between = Callable[[str, tuple[str, ...], tuple[str, ...]], list[Doc]]
_NUMBER = (int, float)


def derive(nodes: dict[str, Doc], edges: list[Doc]) -> list[Doc]:
    """Set the typed attributes our layers and rules read on ``nodes`` (our id -> its
    attributes) and return the records of the edges derived from them and ``edges``."""
    by_kind: dict[str, list[Doc]] = defaultdict(list)
    for edge in edges:
        by_kind[edge["kind"]].append(edge)

    def between(kind: str, src_kinds: tuple[str, ...], dst_kinds: tuple[str, ...]) -> list[Doc]:
        """Edges of one kind whose ends are of the expected kinds (odd files link anything)."""
        return [
            e for e in by_kind.get(kind, ())
            if nodes[e["src"]]["kind"] in src_kinds and nodes[e["dst"]]["kind"] in dst_kinds
        ]  # fmt: skip

    # derived edges' records: src, dst, kind, attributes, then the mark
    derived: list[Doc] = []
    add = derived.append

    # process tree from ppid
    processes = [n for n in nodes.values() if n["kind"] == "process"]
    for process in processes:
        ppid = process.get("ppid")
        parent = ids.process(ppid) if isinstance(ppid, int) else None
        if parent in nodes and parent != process["id"] and nodes[parent]["kind"] == "process":
            add({"src": parent, "dst": process["id"], "kind": "parent_of", "derived": DERIVED_MARK})
    for edge in between("in_container", ("process",), ("container",)):
        nodes[edge["src"]]["container_id"] = nodes[edge["dst"]].get("container_id")
    # device -> NUMA node
    for edge in between("affine_to", ("npu", "gpu"), ("numa_set",)):
        members = [
            f"numa:{i}" for i in nodes[edge["dst"]].get("numa_ids", []) if f"numa:{i}" in nodes
        ]
        for numa_id in members:
            add({"src": edge["src"], "dst": numa_id, "kind": "local_to", "confidence": 1.0,
                 "derived": DERIVED_MARK})  # fmt: skip
        if len(members) == 1:
            nodes[edge["src"]]["numa_node"] = nodes[members[0]].get("numa_id")
    # per-entity NUMA access statistics
    for edge in by_kind.get("numa_access", ()):
        entity = nodes[edge["src"]]
        if entity["kind"] == "thread":
            _derive_thread_status(entity, edge.get("proc_status"))
        elif entity["kind"] == "process":
            _derive_process_numa(entity, edge.get("numa_access_info"), nodes, add)
    thread_counts: dict[str, int] = defaultdict(int)
    for edge in between("has_thread", ("process",), ("thread",)):
        thread_counts[edge["src"]] += 1
    for process_id, count in thread_counts.items():
        nodes[process_id]["num_threads"] = count
    _derive_socket_flows(nodes, between, add)
    return derived


def _derive_thread_status(thread: Doc, status: Any) -> None:
    if not isinstance(status, dict):
        return
    thread["vol_ctxt_switches"] = status.get("voluntary_ctxt_switches")
    thread["invol_ctxt_switches"] = status.get("involuntary_ctxt_switches")
    thread["cpus_allowed"] = status.get("cpus_allowed_list") or None
    thread["cpus_used"] = status.get("cpus_accessed_list") or None
    thread["mems_allowed"] = status.get("mems_allowed_list") or None


def _derive_process_numa(process: Doc, info: Any, nodes: dict[str, Doc], add: Add) -> None:
    if not isinstance(info, dict):
        return
    status = info.get("proc_status")
    if isinstance(status, dict):
        process["vol_ctxt_switches"] = status.get("voluntary_ctxt_switches")
        process["invol_ctxt_switches"] = status.get("involuntary_ctxt_switches")
        process["cpus_allowed"] = status.get("cpus_allowed_list") or None
        process["mems_allowed"] = status.get("mems_allowed_list") or None
    affinity = info.get("numa_affinity_info")
    affinity = affinity if isinstance(affinity, dict) else {}
    pages = _per_node(affinity.get("mem_pages_in_each_numa"))
    total_pages = info.get("total_pages")
    if isinstance(total_pages, dict):
        process["numa_pages"] = {
            str(k): int(v) for k, v in total_pages.items() if isinstance(v, _NUMBER)
        }
    cpu_share = _normalise(_per_node(affinity.get("cpu_runtime_pct_in_each_numa")))
    page_share = _normalise(pages)
    if cpu_share:
        process["numa_cpu_share"] = cpu_share
    if page_share:
        process["numa_page_share"] = page_share
    if cpu_share and page_share:
        process["numa_locality"] = round(
            sum(share * page_share.get(node, 0.0) for node, share in cpu_share.items()), 4
        )
    if "cpu_mem_access_cosine_similarity" in affinity:
        process["numa_locality_cosine"] = affinity["cpu_mem_access_cosine_similarity"]
    process_id = process["id"]
    for node, share in cpu_share.items():
        numa_id = f"numa:{node}"
        if numa_id in nodes:
            add({"src": process_id, "dst": numa_id, "kind": "cpu_on", "share": share,
                 "derived": DERIVED_MARK})  # fmt: skip
    for node, share in page_share.items():
        numa_id = f"numa:{node}"
        if numa_id in nodes:
            add({"src": process_id, "dst": numa_id, "kind": "mem_on", "share": share,
                 "pages": int(pages.get(node, 0)), "derived": DERIVED_MARK})  # fmt: skip


def _derive_socket_flows(nodes: dict[str, Doc], between: Between, add: Add) -> None:
    """Sockets belong to threads; threads send to sockets: pair them into process flows."""
    owner: dict[str, str] = {}
    for edge in between("belongs_to", ("socket",), ("thread",)):
        pid = nodes[edge["dst"]].get("pid")
        process = ids.process(pid) if pid is not None else None
        if process is not None and process in nodes:
            owner[edge["src"]] = process
    for socket_id, process in owner.items():
        add({"src": process, "dst": socket_id, "kind": "holds", "derived": DERIVED_MARK})
    flows: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"bytes": 0, "flows": 0, "start": None, "end": None, "transport": None}
    )
    for edge in between("sends_to", ("thread",), ("socket",)):
        pid = nodes[edge["src"]].get("pid")
        sender = ids.process(pid) if pid is not None else None
        receiver = owner.get(edge["dst"])
        flow = edge.get("data_flow")
        flow = flow if isinstance(flow, dict) else {}
        size = flow.get("data_size")
        size = int(size) if isinstance(size, _NUMBER) else None  # (text counts no bytes)
        socket = nodes[edge["dst"]]
        if size is not None:
            socket["bytes_sent"] = size
        if sender is None or sender not in nodes or receiver is None or sender == receiver:
            continue
        total = flows[(sender, receiver)]
        total["bytes"] += size or 0
        total["flows"] += 1
        total["transport"] = str(edge.get("connection_type") or socket.get("proto") or "").lower()
        start, end = flow.get("start_time"), flow.get("end_time")
        if isinstance(start, _NUMBER):
            total["start"] = start if total["start"] is None else min(total["start"], start)
        if isinstance(end, _NUMBER):
            total["end"] = end if total["end"] is None else max(total["end"], end)
    for (sender, receiver), total in flows.items():
        attrs = {
            "transport": total["transport"] or None,
            "bytes": total["bytes"],
            "flows": total["flows"],
        }
        start, end = total["start"], total["end"]
        if start is not None and end is not None and end > start:
            window = (end - start) / 1e9  # witty stamps are nanoseconds
            attrs["window_s"] = round(window, 3)
            attrs["bytes_per_s"] = round(total["bytes"] / window, 1)
        add({"src": sender, "dst": receiver, "kind": "talks_to", **attrs, "derived": DERIVED_MARK})


# ============================================================================ export


def _per_node(values: Any) -> dict[str, float]:
    """Each NUMA node's non-zero number (a list by node, or a dict)."""
    if isinstance(values, list):
        values = dict(enumerate(values))
    elif not isinstance(values, dict):
        return {}
    return {
        str(node): float(value)
        for node, value in values.items()
        if value and isinstance(value, _NUMBER)
    }


def _normalise(values: dict[str, float]) -> dict[str, float]:
    total = sum(values.values())
    if total <= 0:
        return {}
    return {node: round(value / total, 4) for node, value in values.items()}
