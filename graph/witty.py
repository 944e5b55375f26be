"""openEuler witty-profiler graphs: import into our model, export back.

Their format is denormalised: ``{"nodes": [...], "edges": [...]}`` (optionally wrapped as
``{"env": {...}, "content": graph}``), every entity has ``entity_namespace``, ``entity_type``
and ``details`` plus type fields, every edge embeds full copies of both endpoints, and no
ids are serialised — identity comes from each type's key fields.

Import keeps every field of every entity and edge verbatim (renamed only where our model has
the same fact under its own name, and renamed back on export), and *derives* what our layers
and rules read: typed attributes (per-NUMA CPU and page shares, locality, context switches,
allowed CPUs…) and semantic edges (``local_to``, ``cpu_on``, ``mem_on``, ``parent_of``,
``holds``, ``talks_to``). Derived edges carry ``derived: "witty"`` and derived node
attributes are listed per type, so export writes back exactly what was read.
"""

from __future__ import annotations

from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from . import ids
from .blake import blake2b
from .check import check_graph
from .cpulist import parse_cpulist
from .errors import FormatError
from .gcpause import cyclic_gc_paused
from .graph import Graph
from .model import (
    EDGE_CLASSES,
    Edge,
    ElementsError,
    Meta,
    validate_edges,
    validate_nodes,
    wrap_trusted,
)
from .rawio import parse_json, read_bytes
from .safetext import excerpt
from .witty_derive import Doc, derive
from .witty_export import dump_witty, to_witty
from .witty_spec import (
    DERIVED_MARK,
    ENTITY_SPECS,
    GENERIC_EDGE_KIND,
    GENERIC_ENTITY_KIND,
    IDENTITY_FIELDS,
    KIND_OF_TYPE,
    MAX_NUMA_NODES,
    NAMESPACE_DEFAULT,
    EntitySpec,
    edge_kind,
)

__all__ = [
    "DERIVED_MARK", "GENERIC_EDGE_KIND", "TRIMMED_MIN_BYTES", "NeedsFullCopies", "dump_witty",
    "from_witty", "is_witty", "load_witty", "read_trimmed", "to_witty",
]  # fmt: skip

_NOT_YET = object()  # a node's id or kind before ``_Importer.entity`` knows it
# A smaller file is parsed whole: importing msgspec and making the trimmed decoder (12-17 ms)
# costs what trimming a capture's copies saves on ~2 MB of it (at 5 MB trimming saves 15 ms
# of 110, at 50 MB 0.15-0.3 s)
TRIMMED_MIN_BYTES = 2 << 20
# an entity type's key fields read from an entity: one value, or a tuple of several
_IDENTITY_GETTERS = {kind: itemgetter(*fields) for kind, fields in IDENTITY_FIELDS.items()}


# ============================================================================ import


def is_witty(doc: Any) -> bool:
    """Whether a parsed document looks like a witty-profiler graph (bare or wrapped)."""
    if isinstance(doc, dict) and "content" in doc and "env" in doc:
        doc = doc["content"]
    if not (isinstance(doc, dict) and isinstance(doc.get("nodes"), list)):
        return False
    if "format" in doc or not isinstance(doc.get("edges"), list):
        return False
    sample = doc["nodes"][:1] + [
        e.get("source_node") for e in doc["edges"][:1] if isinstance(e, dict)
    ]
    return all(isinstance(item, dict) and "entity_type" in item for item in sample)


class NeedsFullCopies(Exception):
    """An edge's end is an entity known only through its embedded copy, which the trimmed
    document does not hold: the whole document must be read."""


def load_witty(path: str | Path, max_bytes: int | None = None) -> Graph:
    origin = str(path)
    data = read_bytes(path, max_bytes)
    with cyclic_gc_paused():
        graph = read_trimmed(data, origin)
        return graph if graph is not None else from_witty(parse_json(data, origin), origin)


def read_trimmed(
    data: bytes | bytearray, origin: str, min_bytes: int | None = None
) -> Graph | None:
    """The graph of a witty file read with its edges' end copies trimmed to key fields
    (``graph/witty_decode.py``), or None where the whole document must be parsed: a file
    under ``min_bytes`` (default ``TRIMMED_MIN_BYTES``), one the trimmed decode does not
    describe, not a witty graph, or one with an entity known only through a copy. The same
    reader reads both: the same graph."""
    if len(data) < (TRIMMED_MIN_BYTES if min_bytes is None else min_bytes):
        return None
    from .witty_decode import decode_trimmed  # msgspec: only where a large file is read

    doc = decode_trimmed(data)
    if doc is None or not is_witty(doc):
        return None
    try:
        return from_witty(doc, origin, copies_trimmed=True)
    except NeedsFullCopies:
        return None


def from_witty(doc: Any, origin: str = "<witty>", copies_trimmed: bool = False) -> Graph:
    """``copies_trimmed``: the edges are ``witty_decode.TrimmedEdge`` structs, their ends
    key structs (what ``read_trimmed`` decodes); an end not read before raises
    ``NeedsFullCopies``."""
    env = None
    if isinstance(doc, dict) and "content" in doc and "env" in doc:
        env, doc = doc["env"], doc["content"]
    if not isinstance(doc, dict):
        raise FormatError(
            f"{origin}: expected a witty-profiler graph object, got {type(doc).__name__}"
        )
    for key in ("nodes", "edges"):
        if not isinstance(doc.get(key), list):
            raise FormatError(f"{origin}: witty-profiler graph needs a {key!r} list")
    importer = _Importer(origin)
    with cyclic_gc_paused():
        for position, entity in enumerate(doc["nodes"]):
            importer.entity(entity, f"nodes[{position}]")
        if copies_trimmed:
            records, idents = importer.trimmed_edges(doc["edges"])
            importer.valid_edges = len(records) if _trimmed_edges_valid_as_built() else 0
        else:
            records = list(map(importer.edge, doc["edges"], range(len(doc["edges"]))))
            idents = None
        importer.add_edges(records, list(range(len(records))), idents)
        graph = importer.finish()
    graph.meta.origin = f"witty-profiler import: {Path(origin).name}"
    if env is not None:
        graph.meta.witty_env = env  # type: ignore[attr-defined]  # Meta keeps extra keys
    extra_keys = {k: v for k, v in doc.items() if k not in ("nodes", "edges")}
    if extra_keys:
        graph.meta.witty_extra = extra_keys  # type: ignore[attr-defined]
    return graph


class _Importer:
    """Builds plain attribute dicts first, derives on them, then validates everything in bulk
    (one pydantic call per list is several times faster than one per element)."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.nodes: dict[str, dict[str, Any]] = {}  # our id -> attributes (with id and kind)
        self.where: dict[str, str] = {}  # our id -> position in the file, for error messages
        self.edges: list[dict[str, Any]] = []
        # an edge's position in the file's edges, for error messages; None: derived by
        # import (the message names its kind)
        self.edge_where: list[int | None] = []
        self.edge_idents: set[tuple[Any, ...]] = set()
        # how many of the first edges validation could neither refuse nor change (a trimmed
        # document's: ``_trimmed_edges_valid_as_built``); the rest are validated
        self.valid_edges = 0
        self.node_ids: dict[tuple[Any, ...], str] = {}  # identity key -> our id
        self.raw: dict[
            str, dict[str, Any]
        ] = {}  # our id -> the entity as first read (to spot stale copies)

    def fail(self, where: str, message: str) -> FormatError:
        return FormatError(f"{self.origin}: {where}: {message}")

    # ------------------------------------------------------------------ entities

    def known(self, data: Any) -> str | None:
        """The id of an entity already read, found by its type's key fields (every edge
        embeds both its ends: most copies are of an entity read before); None for anything
        else, which ``entity`` reads or refuses."""
        try:
            entity_type = data["entity_type"]
            return self.node_ids.get((entity_type, _IDENTITY_GETTERS[entity_type](data)))
        except (KeyError, TypeError):  # no dict, no known type, a key field missing or odd
            return None

    def entity(self, data: Any, where: str) -> str:
        """Add (or find) the node for one witty entity and return its id (what ``known``
        finds, found the same way; the file's own list of entities is mostly new ones)."""
        if not isinstance(data, dict):
            raise self.fail(where, f"expected an entity object, got {type(data).__name__}")
        entity_type = data.get("entity_type")
        if not isinstance(entity_type, str):
            raise self.fail(where, "entity has no 'entity_type' string")
        getter = _IDENTITY_GETTERS.get(entity_type)
        try:
            key = (entity_type, getter(data)) if getter else self.identity(entity_type, data, where)
            known = self.node_ids.get(key)
        except (KeyError, TypeError):  # a key field missing or unhashable: said, or made so
            key = self.identity(entity_type, data, where)
            known = self.node_ids.get(key)
        if known is not None:
            return known
        spec = ENTITY_SPECS.get(entity_type)
        attrs = self.attributes(spec, data, where)
        node_id = self.node_id(entity_type, key, data)
        kind = spec.kind if spec else GENERIC_ENTITY_KIND
        if spec and spec.kind == "npu" and data.get("device_type") == "gpu":
            kind = "gpu"
            index: Any = attrs.get("index")
            node_id = ids.gpu(index)
        # an entity's own "id" or "kind" field is kept where it came (as in a merge)
        if attrs["id"] is _NOT_YET:
            attrs["id"] = node_id
        if attrs["kind"] is _NOT_YET:
            attrs["kind"] = kind
        self.nodes[node_id] = attrs
        self.where[node_id] = where
        self.node_ids[key] = node_id
        self.raw[node_id] = data
        return node_id

    def identity(self, entity_type: str, data: dict[str, Any], where: str) -> tuple[Any, ...]:
        """(type, key): the key is the value of a type's one key field, or the tuple of its
        key fields (as ``_IDENTITY_GETTERS`` read them), or a digest of an unknown entity."""
        fields = IDENTITY_FIELDS.get(entity_type)
        if fields is None:
            return (entity_type, _digest(data))
        missing = [name for name in fields if name not in data and name != "ppid"]
        if missing:
            raise self.fail(where, f"{entity_type} lacks its key field {missing[0]!r}")
        values = tuple(_hashable(data.get(name)) for name in fields)
        return (entity_type, values if len(values) > 1 else values[0])

    def node_id(self, entity_type: str, key: tuple[Any, ...], data: dict[str, Any]) -> str:
        match entity_type:
            case "ProcessEntity":
                base = ids.process(data["pid"])
                # the same pid under another parent is pid reuse: a different process
                return f"{base}@{data.get('ppid')}" if base in self.nodes else base
            case "ThreadEntity":
                return ids.thread(data["tid"])
            case "SocketEntity":
                proto = str(data.get("socket_type") or "sock")
                return ids.socket_endpoint(proto, str(data["socket_addr"]), data["socket_port"])
            case "NPUEntity":
                base = ids.npu(data["id"])
                return base if base not in self.nodes else f"{base}@{data.get('cpu_affinity')}"
            case "NumaEntity":
                return ids.numa(data["numa_id"])
            case "NumaSetEntity":
                return f"numaset:{data['numa_id_str']}"
            case "ContainerEntity":
                return ids.container(str(data["container_id"]))
        return f"witty:{entity_type}:{key[1][:12]}"

    def attributes(
        self, spec: EntitySpec | None, data: dict[str, Any], where: str
    ) -> dict[str, Any]:
        # the node's own id and kind first (set by ``entity``), then every field in its place
        # (renamed where our model has it under its own name), then what a default says is
        # left out
        renames = spec.renames if spec else {}
        attrs = {"id": _NOT_YET, "kind": _NOT_YET}
        if renames.keys().isdisjoint(data):
            attrs.update(data)
        else:
            for name, value in data.items():
                attrs[renames.get(name, name)] = value
        if spec is not None:
            del attrs["entity_type"]
        if "entity_namespace" in attrs and attrs["entity_namespace"] == NAMESPACE_DEFAULT:
            del attrs["entity_namespace"]
        if "details" in attrs and attrs["details"] == {}:
            del attrs["details"]
        if spec is not None:
            self.derive_entity(spec, data, attrs, where)
        return attrs

    def derive_entity(
        self, spec: EntitySpec, data: dict[str, Any], attrs: dict[str, Any], where: str
    ) -> None:
        if spec.kind == "thread":
            # A thread embeds a copy of its process; keep it only when it differs from the
            # process entity itself (export re-embeds the entity otherwise).
            process = attrs.pop("witty_process", None)
            if isinstance(process, dict):
                # a thread embedding a thread embedding a thread... would recurse as deep
                # as the file nests: only a process entity is followed
                if process.get("entity_type") != "ProcessEntity":
                    found = excerpt(process.get("entity_type"), 40)
                    raise self.fail(f"{where}.process", f"expected a ProcessEntity, got {found}")
                attrs["pid"] = process.get("pid")
                process_id = self.known(process) or self.entity(process, f"{where}.process")
                if self.raw.get(process_id) != process:
                    attrs["witty_process"] = process
            elif "process" in data:
                attrs["witty_process"] = process
        elif spec.kind == "socket":
            attrs["proto"] = str(data.get("socket_type", "")).lower() or None
            addr = str(data.get("socket_addr", ""))
            attrs["family"] = "inet6" if ":" in addr else "inet"
        elif spec.kind == "numa_node":
            distances = data.get("distance_to_all_numa")
            if isinstance(distances, dict):
                attrs["distances"] = {str(k): v for k, v in distances.items()}
            mem_info = data.get("mem_info")
            if isinstance(mem_info, dict):
                attrs["mem_total_bytes"] = _kb_to_bytes(mem_info.get("MemTotal"))
                attrs["mem_free_bytes"] = _kb_to_bytes(mem_info.get("MemFree"))
        elif spec.kind == "numa_set":
            try:
                ids_text = str(data.get("numa_id_str", ""))
                attrs["numa_ids"] = parse_cpulist(ids_text, bound=MAX_NUMA_NODES)
            except ValueError:
                attrs["numa_ids"] = []

    # ------------------------------------------------------------------ edges

    def edge(self, data: Any, position: int) -> Doc:
        """Our record of the witty edge at ``position`` (added by ``add_edges``); its place
        in words is written only for an error or an entity read for the first time."""
        if not isinstance(data, dict):
            found = type(data).__name__
            raise self.fail(f"edges[{position}]", f"expected an edge object, got {found}")
        edge_type = data.get("edge_type")
        if not isinstance(edge_type, str):
            raise self.fail(f"edges[{position}]", "edge has no 'edge_type' string")
        source, target = data.get("source_node"), data.get("target_node")
        if not isinstance(source, dict):
            raise self.fail(f"edges[{position}]", f"{edge_type} has no 'source_node' entity")
        if not isinstance(target, dict):
            raise self.fail(f"edges[{position}]", f"{edge_type} has no 'target_node' entity")
        src = self.known(source) or self.entity(source, f"edges[{position}].source_node")
        dst = self.known(target) or self.entity(target, f"edges[{position}].target_node")
        kind = edge_kind(edge_type, self.nodes[src]["kind"])
        record = {"src": src, "dst": dst, "kind": kind or GENERIC_EDGE_KIND}
        if kind is None:
            record["edge_type"] = edge_type
        record.update(data)  # the edge's own fields; then its ends and type back out
        del record["source_node"], record["target_node"]
        if kind is not None:
            del record["edge_type"]
        record["src"], record["dst"], record["kind"] = src, dst, kind or GENERIC_EDGE_KIND
        return record

    def trimmed_edges(self, edges: list[Any]) -> tuple[list[Doc], list[tuple[Any, ...]]]:
        """``edge`` for every edge of a trimmed document, in order, and their identities
        (``add_edges``): each end found by its key struct, which equals the one a copy of an
        entity read before decodes to."""
        from .witty_decode import ABSENT, OWN_FIELDS, key_struct, own_values

        read = {
            key_struct(entity_type, key): node_id
            for (entity_type, key), node_id in self.node_ids.items()
        }
        # None where an end is not an entity read (refused just below)
        srcs: list[Any] = [read.get(edge.source_node) for edge in edges]
        dsts: list[Any] = [read.get(edge.target_node) for edge in edges]
        if None in srcs or None in dsts:
            raise NeedsFullCopies("an end known only through its copy")
        nodes = self.nodes
        records, idents = [], []
        for src, dst, edge, values in zip(srcs, dsts, edges, own_values(edges), strict=True):
            edge_type = edge.edge_type
            kind = (
                KIND_OF_TYPE.get(edge_type)  # the source's kind read only where it decides
                or edge_kind(edge_type, nodes[src]["kind"])
                or GENERIC_EDGE_KIND
            )
            record = {"src": src, "dst": dst, "kind": kind}
            if kind == GENERIC_EDGE_KIND:
                record["edge_type"] = edge_type
            for name, value in zip(OWN_FIELDS, values, strict=False):  # (as long by make)
                if value is not ABSENT:
                    record[name] = value
            records.append(record)
            idents.append((src, kind, dst, None))  # (no edge read has a key)
        return records, idents

    def add_edges(
        self,
        records: list[Doc],
        wheres: list[int | None],
        idents: list[tuple[Any, ...]] | None = None,
    ) -> None:
        """``add_edge`` for many: added at once where no two (and none already added) are
        twins; ``idents``: their identities where the caller has them."""
        if idents is None:
            idents = [(r["src"], r["kind"], r["dst"], r.get("key")) for r in records]
        fresh = set(idents)
        if len(fresh) == len(idents) and self.edge_idents.isdisjoint(fresh):
            self.edge_idents |= fresh
            self.edges += records
            self.edge_where += wheres
            return
        for record, where in zip(records, wheres, strict=True):
            self.add_edge(record, where)

    def add_edge(self, record: dict[str, Any], where: int | None) -> None:
        # witty graphs may repeat an edge between the same pair: keep each, told apart by key
        ident = (record["src"], record["kind"], record["dst"], record.get("key"))
        twin = 1
        while ident in self.edge_idents:
            twin += 1
            record["key"] = str(twin)
            ident = (*ident[:3], record["key"])
        self.edge_idents.add(ident)
        self.edges.append(record)
        self.edge_where.append(where)

    # ------------------------------------------------------------------ finishing

    def finish(self) -> Graph:
        derived = derive(self.nodes, self.edges)
        self.add_edges(derived, [None] * len(derived))
        node_list = list(self.nodes.values())
        try:
            nodes = validate_nodes(node_list)
        except ElementsError as exc:
            where = list(self.where.values())[exc.position]
            raise self.fail(
                where, f"{exc.field.lstrip('.') or 'value'}: {exc}, got {exc.found!r:.60}"
            ) from None
        valid = self.valid_edges
        try:
            edges = wrap_trusted(self.edges[:valid], EDGE_CLASSES, Edge)
            edges += validate_edges(self.edges[valid:])
        except ElementsError as exc:
            at = valid + exc.position
            position = self.edge_where[at]
            where = (
                f"edges[{position}]"
                if position is not None
                else f"derived {self.edges[at]['kind']}"
            )
            raise self.fail(
                where, f"{exc.field.lstrip('.') or 'value'}: {exc}, got {exc.found!r:.60}"
            ) from None
        # ids are unique, every end is a node and twins are told apart by construction
        # (``entity``, ``add_edge``): nothing for ``from_validated`` to find
        graph = Graph.from_trusted(Meta(), nodes, edges)
        check_graph(graph, self.origin)
        graph.checked = True
        return graph


def _trimmed_edges_valid_as_built() -> bool:
    """Whether validation can neither refuse nor change an edge ``trimmed_edges`` builds:
    its ``src``, ``dst`` and ``kind`` are ours (strings, the kind choosing the class), a twin's
    ``key`` a string (``add_edge``), and its other fields are those of ``TrimmedEdge`` (which
    refuses any other), none declared by any edge class: extras, kept as they are."""
    from .witty_decode import OWN_FIELDS

    kept = {"edge_type", *OWN_FIELDS}
    classes: list[type[Edge]] = [Edge, *EDGE_CLASSES.values()]
    return all(kept.isdisjoint(cls.FIELDS) for cls in classes)


def _kb_to_bytes(text: Any) -> int | None:
    if not isinstance(text, str):
        return None
    number, _, unit = text.strip().partition(" ")
    try:
        return int(number) * (1024 if unit.strip().lower() == "kb" else 1)
    except ValueError:
        return None


def _digest(data: dict[str, Any]) -> str:
    return blake2b(orjson.dumps(data, option=orjson.OPT_SORT_KEYS), digest_size=8).hexdigest()


def _hashable(value: Any) -> Any:
    if isinstance(value, dict | list):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return value


def _short_validation(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"][1:]) or "value"
        return f"{loc}: {first['msg'].lower()}, got {first.get('input')!r:.60}"
    return str(exc)
