"""Our graph as a witty-profiler document: every entity and edge import read, written back
as it was read (renamed fields renamed back, derived attributes and edges left out); a graph
we collected ourselves gets the fields witty readers expect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from . import ids
from .graph import Graph
from .model import Edge, Node
from .outfile import write_output
from .witty_spec import (
    DERIVED_MARK,
    EXPORT_EDGE_TYPES,
    GENERIC_EDGE_KIND,
    GENERIC_ENTITY_KIND,
    KIND_TO_ENTITY,
    NAMESPACE_DEFAULT,
)

Doc = dict[str, Any]


def to_witty(graph: Graph) -> dict[str, Any]:
    """Our graph as a witty-profiler document (wrapped if it was imported wrapped)."""
    entities: dict[str, dict[str, Any]] = {}
    for node in graph.nodes.values():
        entity = _entity_of(node)
        if entity is not None:
            entities[node.id] = entity
    for node in graph.of_kind("thread"):
        entity = entities[node.id]
        if "process" not in entity:
            pid = node.get("pid")
            entity["process"] = entities.get(ids.process(pid)) if pid is not None else None
    edges: list[dict[str, Any]] = []
    for edge in graph.edges():
        if edge.get("derived") == DERIVED_MARK:
            continue
        record = _edge_of(graph, edge, entities)
        if record is not None:
            edges.append(record)
    doc: dict[str, Any] = {"nodes": list(entities.values()), "edges": edges}
    extra = getattr(graph.meta, "witty_extra", None)
    if isinstance(extra, dict):
        doc.update(extra)
    env = getattr(graph.meta, "witty_env", None)
    return {"env": env, "content": doc} if env is not None else doc


def dump_witty(graph: Graph, path: str | Path) -> Path:
    """Write through the one safe writer: atomic, 0600, regular files only."""
    return write_output(path, orjson.dumps(to_witty(graph), option=orjson.OPT_NON_STR_KEYS))


def _entity_of(node: Node) -> dict[str, Any] | None:
    spec = KIND_TO_ENTITY.get(node.kind)
    attrs = node.attrs()
    attrs.pop("id")
    attrs.pop("kind")
    attrs.pop("source", None)
    if node.kind == GENERIC_ENTITY_KIND:
        entity_type = attrs.pop("entity_type", "UnknownEntity")
        return {"entity_namespace": attrs.pop("entity_namespace", NAMESPACE_DEFAULT),
                "entity_type": entity_type, "details": attrs.pop("details", {}), **attrs}  # fmt: skip
    if spec is None:
        return None
    back = {ours: theirs for theirs, ours in spec.renames.items()}
    entity: dict[str, Any] = {
        "entity_namespace": attrs.pop("entity_namespace", NAMESPACE_DEFAULT),
        "entity_type": spec.entity_type,
        "details": attrs.pop("details", {}),
    }
    native = not any(
        name in attrs for name in ("device_type", "socket_type", "cpu_set", "numa_id_str")
    )
    for name, value in attrs.items():
        if name in spec.derived:
            continue
        entity[back.get(name, name)] = value
    if native:
        _fill_collected_entity(node, entity)
    return entity


def _fill_collected_entity(node: Node, entity: dict[str, Any]) -> None:
    """Entities of graphs we collected ourselves: add the fields witty readers expect."""
    if node.kind == "socket":
        entity.setdefault("socket_type", str(node.get("proto", "")).upper() or None)
        entity.setdefault("socket_addr", node.get("local_addr"))
        entity.setdefault("socket_port", node.get("local_port"))
        entity.setdefault("socket_thread", None)
        entity.setdefault("socket_process", None)
    elif node.kind in ("npu", "gpu"):
        entity.setdefault("device_type", node.kind)
        entity.setdefault("device_id", "device-id-unknown")
    elif node.kind == "numa_node" and node.get("distances"):
        entity.setdefault("distance_to_all_numa", node.get("distances"))


def _edge_of(graph: Graph, edge: Edge, entities: dict[str, Doc]) -> dict[str, Any] | None:
    src, dst = entities.get(edge.src), entities.get(edge.dst)
    if src is None or dst is None:
        return None
    attrs = edge.attrs()
    for name in ("src", "dst", "kind", "key", "source"):
        attrs.pop(name, None)
    if edge.kind == GENERIC_EDGE_KIND:
        edge_type = attrs.pop("edge_type", "UnknownEdge")
    else:
        src_kind = graph.nodes[edge.src].kind if edge.kind == "numa_access" else None
        edge_type = EXPORT_EDGE_TYPES.get((edge.kind, src_kind))
        if edge_type is None:
            return None
    attrs.setdefault("weight", None)
    return {"edge_type": edge_type, **attrs, "source_node": src, "target_node": dst}


# ============================================================================ helpers
