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

from collections import defaultdict
from collections.abc import Callable, Mapping
from itertools import repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

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
    Node,
    validate_edges,
    validate_nodes,
    wrap_trusted,
)
from .outfile import write_output
from .rawio import parse_json, read_bytes
from .safetext import excerpt

Doc = dict[str, Any]  # an entity or an edge as the importer holds it: plain JSON
Add = Callable[[Doc], None]  # add a derived edge's record: {src, dst, kind, ..., "derived"}
Between = Callable[[str, tuple[str, ...], tuple[str, ...]], list[Doc]]

DERIVED_MARK = "witty"
_NOT_YET = object()  # a node's id or kind before ``_Importer.entity`` knows it
_NUMBER = (int, float)  # isinstance with a tuple: ``int | float`` builds a union per call
# Linux numbers at most 1,024 NUMA nodes (NODES_SHIFT is 10 at most): a NUMA-set list
# naming more is not expanded
MAX_NUMA_NODES = 1024
NAMESPACE_DEFAULT = "local"
# A smaller file is parsed whole: importing msgspec and making the trimmed decoder (12-17 ms)
# costs what trimming a capture's copies saves on ~2 MB of it (at 5 MB trimming saves 15 ms
# of 110, at 50 MB 0.15-0.3 s)
TRIMMED_MIN_BYTES = 2 << 20


class EntitySpec(NamedTuple):  # a NamedTuple: a dataclass costs a fresh process ~0.5 ms
    """How one witty entity type maps onto one of our node kinds."""

    entity_type: str
    kind: str
    renames: Mapping[str, str] = MappingProxyType({})  # witty field -> our attribute
    derived: frozenset[str] = frozenset()  # attributes import computes; never exported


ENTITY_SPECS = {
    spec.entity_type: spec
    for spec in (
        EntitySpec(
            "ProcessEntity",
            "process",
            derived=frozenset(
                {
                    "numa_cpu_share",
                    "numa_pages",
                    "numa_page_share",
                    "numa_locality",
                    "numa_locality_cosine",
                    "vol_ctxt_switches",
                    "invol_ctxt_switches",
                    "cpus_allowed",
                    "mems_allowed",
                    "container_id",
                    "num_threads",
                }  # fmt: skip
            ),
        ),
        EntitySpec(
            "ThreadEntity",
            "thread",
            renames={"process": "witty_process"},
            derived=frozenset(
                {
                    "pid",
                    "vol_ctxt_switches",
                    "invol_ctxt_switches",
                    "cpus_allowed",
                    "cpus_used",
                    "mems_allowed",
                }  # fmt: skip
            ),
        ),
        EntitySpec(
            "SocketEntity",
            "socket",
            renames={"socket_addr": "local_addr", "socket_port": "local_port"},
            derived=frozenset({"proto", "family", "bytes_sent"}),
        ),
        EntitySpec("NPUEntity", "npu", renames={"id": "index"}, derived=frozenset({"numa_node"})),
        EntitySpec(
            "NumaEntity",
            "numa_node",
            renames={"cpu_set": "cpulist"},
            derived=frozenset({"distances", "mem_total_bytes", "mem_free_bytes"}),
        ),
        EntitySpec("NumaSetEntity", "numa_set", derived=frozenset({"numa_ids"})),
        EntitySpec(
            "ContainerEntity",
            "container",
            renames={"container_name": "name", "container_type": "runtime"},
        ),
    )
}
KIND_TO_ENTITY = {spec.kind: spec for spec in ENTITY_SPECS.values()}
KIND_TO_ENTITY["gpu"] = EntitySpec("NPUEntity", "gpu", renames={"id": "index"})
GENERIC_ENTITY_KIND = "witty_entity"
GENERIC_EDGE_KIND = "witty_edge"

# witty edge type -> our edge kind. Two witty types share "numa_access"; the source's kind
# (thread or process) tells them apart on export.
EDGE_KINDS = {
    "OwnEdge": "has_thread",
    "BelongEdge": "belongs_to",
    "SendToSocketEdge": "sends_to",
    "NumaSetContainEdge": "contains",
    "AccessWithProcStatusEdge": "numa_access",
    "NumaAccessEdge": "numa_access",
    "HostEdge": "hosts",
    "RunOnEdge": "in_container",
    "AffinitativeToNuma": "affine_to",
    "AccessEdge": "uses_device",
}
_EXPORT_EDGE_TYPES: dict[tuple[str, str | None], str] = {
    ("numa_access", "thread"): "AccessWithProcStatusEdge",
    ("numa_access", "process"): "NumaAccessEdge",
    **{(kind, None): witty for witty, kind in EDGE_KINDS.items() if kind != "numa_access"},
}
_AMBIGUOUS_SOURCES = {"AccessWithProcStatusEdge": "thread", "NumaAccessEdge": "process"}
# the kinds no source decides
_KIND_OF_TYPE = {
    edge_type: kind for edge_type, kind in EDGE_KINDS.items() if edge_type not in _AMBIGUOUS_SOURCES
}


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
        """The id of an entity already read, found by its type's key fields in one C call
        (every edge embeds both its ends: most copies are of an entity read before); None
        for anything else, which ``entity`` reads or refuses."""
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
        fields = _IDENTITY_FIELDS.get(entity_type)
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
        # left out; copied in C where nothing is renamed (a loop renames in half the time
        # of a comprehension or C-level passes over 8 fields)
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
        kind = _edge_kind(edge_type, self.nodes[src]["kind"])
        record = {"src": src, "dst": dst, "kind": kind or GENERIC_EDGE_KIND}
        if kind is None:
            record["edge_type"] = edge_type
        record.update(data)  # the edge's own fields, in C; then its ends and type back out
        del record["source_node"], record["target_node"]
        if kind is not None:
            del record["edge_type"]
        record["src"], record["dst"], record["kind"] = src, dst, kind or GENERIC_EDGE_KIND
        return record

    def trimmed_edges(self, edges: list[Any]) -> tuple[list[Doc], list[tuple[Any, ...]]]:
        """``edge`` for every edge of a trimmed document, in order, and their identities
        (``add_edges``): each end found in C by its key struct, which equals the one a copy of
        an entity read before decodes to."""
        from .witty_decode import ABSENT, OWN_FIELDS, key_struct, own_values

        read = {key_struct(entity_type, key): node_id
                for (entity_type, key), node_id in self.node_ids.items()}  # fmt: skip
        # None where an end is not an entity read (refused just below)
        srcs: list[Any] = list(map(read.get, map(_SOURCE_NODE, edges)))
        dsts: list[Any] = list(map(read.get, map(_TARGET_NODE, edges)))
        if None in srcs or None in dsts:
            raise NeedsFullCopies("an end known only through its copy")
        nodes = self.nodes
        records, idents = [], []
        for src, dst, edge_type, values in zip(
            srcs, dsts, map(_EDGE_TYPE, edges), own_values(edges), strict=True
        ):
            kind = (
                _KIND_OF_TYPE.get(edge_type)  # the source's kind read only where it decides
                or _edge_kind(edge_type, nodes[src]["kind"])
                or GENERIC_EDGE_KIND
            )
            record = {"src": src, "dst": dst, "kind": kind}
            if kind == GENERIC_EDGE_KIND:
                record["edge_type"] = edge_type
            # (by position: a zip with the names per edge took twice the time)
            for position, value in enumerate(values):
                if value is not ABSENT:
                    record[OWN_FIELDS[position]] = value
            records.append(record)
            idents.append((src, kind, dst, None))  # (no edge read has a key)
        return records, idents

    def add_edges(
        self,
        records: list[Doc],
        wheres: list[int | None],
        idents: list[tuple[Any, ...]] | None = None,
    ) -> None:
        """``add_edge`` for many: in C where no two (and none already added) are twins;
        ``idents``: their identities where the caller has them."""
        if idents is None:  # (dict.get: a methodcaller looks the method up per record)
            keys = map(dict.get, records, repeat("key"))
            idents = list(zip(map(_SRC, records), map(_KIND, records), map(_DST, records),
                              keys, strict=True))  # fmt: skip
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
        _derive(self)
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


def _edge_kind(edge_type: str, src_kind: str) -> str | None:
    """Our kind of a witty edge type; None: kept generic with its type (unknown, or one of
    the two types sharing a kind whose source export could not tell apart)."""
    expected_src = _AMBIGUOUS_SOURCES.get(edge_type)
    if expected_src and src_kind != expected_src:
        return None
    return EDGE_KINDS.get(edge_type)


def _trimmed_edges_valid_as_built() -> bool:
    """Whether validation can neither refuse nor change an edge ``trimmed_edges`` builds:
    its ``src``, ``dst`` and ``kind`` are ours (strings, the kind choosing the class), a twin's
    ``key`` a string (``add_edge``), and its other fields are those of ``TrimmedEdge`` (which
    refuses any other), none declared by any edge class: extras, kept as they are."""
    from .witty_decode import OWN_FIELDS

    kept = {"edge_type", *OWN_FIELDS}
    classes: list[type[Edge]] = [Edge, *EDGE_CLASSES.values()]
    return all(kept.isdisjoint(cls.FIELDS) for cls in classes)


_IDENTITY_FIELDS = {
    "ProcessEntity": ("pid", "ppid"),
    "ThreadEntity": ("tid",),
    "SocketEntity": ("socket_addr", "socket_port", "socket_type"),
    "NPUEntity": ("id", "cpu_affinity"),
    "NumaEntity": ("numa_id",),
    "NumaSetEntity": ("numa_id_str",),
    "ContainerEntity": ("container_id",),
}
_IDENTITY_GETTERS = {kind: itemgetter(*fields) for kind, fields in _IDENTITY_FIELDS.items()}
_SOURCE_NODE, _TARGET_NODE = attrgetter("source_node"), attrgetter("target_node")
_EDGE_TYPE = attrgetter("edge_type")
_SRC, _DST, _KIND = itemgetter("src"), itemgetter("dst"), itemgetter("kind")


# ============================================================================ derivation
# Derivation works on the importer's plain dicts, before validation.


def _derive(imp: _Importer) -> None:
    """Compute the typed attributes and semantic edges our layers and rules read."""
    nodes = imp.nodes
    by_kind: dict[str, list[Doc]] = defaultdict(list)
    for edge in imp.edges:
        by_kind[edge["kind"]].append(edge)

    def between(kind: str, src_kinds: tuple[str, ...], dst_kinds: tuple[str, ...]) -> list[Doc]:
        """Edges of one kind whose ends are of the expected kinds (odd files link anything)."""
        return [
            e for e in by_kind.get(kind, ())
            if nodes[e["src"]]["kind"] in src_kinds and nodes[e["dst"]]["kind"] in dst_kinds
        ]  # fmt: skip

    # derived edges' records, written out where they are made (src, dst, kind, attributes,
    # then the mark; a helper taking keywords cost 0.5 us more per edge, 40k edges here)
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
    imp.add_edges(derived, [None] * len(derived))


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
        edge_type = _EXPORT_EDGE_TYPES.get((edge.kind, src_kind))
        if edge_type is None:
            return None
    attrs.setdefault("weight", None)
    return {"edge_type": edge_type, **attrs, "source_node": src, "target_node": dst}


# ============================================================================ helpers


def _per_node(values: Any) -> dict[str, float]:
    """Each NUMA node's non-zero number (a list by node, or a dict); loops, not
    comprehensions: on 8 nodes a comprehension's own call is a third of the cost."""
    per_node: dict[str, float] = {}
    if isinstance(values, list):
        for node, value in enumerate(values):
            if value and isinstance(value, _NUMBER):
                per_node[str(node)] = float(value)
    elif isinstance(values, dict):
        for node, value in values.items():
            if value and isinstance(value, _NUMBER):
                per_node[str(node)] = float(value)
    return per_node


def _normalise(values: dict[str, float]) -> dict[str, float]:
    total = sum(values.values())
    if total <= 0:
        return {}
    return {node: round(value / total, 4) for node, value in values.items()}


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
