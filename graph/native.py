"""The native file format `wp-graph` v1.

One JSON object::

    {"format": "wp-graph", "version": 1, "meta": {...},
     "nodes": [{"id", "kind", ...attributes}], "edges": [{"src", "dst", "kind", ...attributes}]}

Edges reference node ids; nothing is embedded twice. Files ending in ``.gz`` (or starting with
the gzip magic) are compressed. Reading validates everything and raises ``FormatError`` with
one line saying which file, where, and what was expected.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .check import check_graph
from .errors import FormatError
from .gcpause import cyclic_gc_paused
from .graph import Graph
from .model import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Edge,
    ElementsError,
    Meta,
    Node,
    validate_edges,
    validate_nodes,
)
from .outfile import write_output
from .rawio import parse_json, read_json_file

if TYPE_CHECKING:  # pydantic loads where something is validated (a witty import needs none)
    from pydantic import ValidationError

_DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _document(graph: Graph) -> dict[str, Any]:
    """The document as Python objects, for serialising only: its element entries are the
    elements' own attribute dicts, not copies."""
    meta = graph.meta.model_dump(exclude_none=True)
    meta["format"] = FORMAT_NAME
    meta["version"] = FORMAT_VERSION
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "meta": meta,
        "nodes": [node.__dict__ for node in graph.nodes.values()],
        "edges": [edge.__dict__ for edge in graph.edges()],
    }


def dumps(graph: Graph) -> bytes:
    """One orjson call over the elements' attribute dicts, which hold exactly what was set."""
    return orjson.dumps(_document(graph), option=_DUMP_OPTIONS, default=_json_fallback)


def element_dumps(element: Any) -> bytes:
    """One node's or edge's entry of the document, alone (the store's node index rows)."""
    return orjson.dumps(element.__dict__, option=_DUMP_OPTIONS, default=_json_fallback)


def _json_fallback(value: Any) -> Any:
    """Values orjson does not write natively but a collector may leave in an attribute."""
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write a {type(value).__name__} attribute value")


def dump(graph: Graph, path: str | Path) -> Path:
    """Write through the one safe writer: atomic, 0600, regular files only."""
    data = dumps(graph)
    if Path(path).suffix == ".gz":
        data = gzip.compress(data, compresslevel=5)
    return write_output(path, data)


def is_native(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("format") == FORMAT_NAME


def loads(data: bytes | str, origin: str = "<bytes>") -> Graph:
    with cyclic_gc_paused():
        return from_dict(parse_json(data, origin), origin)


def load(path: str | Path, max_bytes: int | None = None) -> Graph:
    with cyclic_gc_paused():
        return from_dict(read_json_file(path, max_bytes), str(path))


def from_dict(doc: Any, origin: str = "<graph>") -> Graph:
    """Validate a parsed document and build the graph."""
    if not isinstance(doc, dict):
        raise FormatError(f"{origin}: expected a JSON object, got {_type_name(doc)}")
    if doc.get("format") != FORMAT_NAME:
        raise FormatError(
            f"{origin}: not a {FORMAT_NAME} file (format is {doc.get('format')!r}); "
            "witty-profiler graphs are imported with their own reader"
        )
    if doc.get("version") != FORMAT_VERSION:
        raise FormatError(
            f"{origin}: {FORMAT_NAME} version {doc.get('version')!r} is not supported "
            f"(this wp-mcp reads version {FORMAT_VERSION})"
        )
    for key in ("meta", "nodes", "edges"):
        if key not in doc:
            raise FormatError(f"{origin}: missing top-level key {key!r}")
    for key in ("nodes", "edges"):
        if not isinstance(doc[key], list):
            raise FormatError(f"{origin}: {key!r} must be a list, got {_type_name(doc[key])}")
    try:
        meta = Meta.model_validate(doc["meta"])
    except ValueError as exc:
        from pydantic import ValidationError  # loaded already: the model raised it

        if not isinstance(exc, ValidationError):
            raise
        raise FormatError(f"{origin}: {describe_validation_error(exc, 'meta')}") from None
    try:
        nodes = validate_nodes(doc["nodes"])
    except ElementsError as exc:
        raise FormatError(f"{origin}: {describe_elements_error(exc, 'nodes')}") from None
    try:
        edges = validate_edges(doc["edges"])
    except ElementsError as exc:
        raise FormatError(f"{origin}: {describe_elements_error(exc, 'edges')}") from None
    return build(meta, nodes, edges, origin)


def build(meta: Meta, nodes: list[Node], edges: list[Edge], origin: str) -> Graph:
    """Assemble a graph from validated parts, rejecting duplicates and dangling edges."""
    graph, duplicate, dangling = Graph.from_validated(meta, nodes, edges)
    if duplicate is not None:
        raise FormatError(
            f"{origin}: nodes[{duplicate}]: duplicate node id {nodes[duplicate].id!r}"
        )
    if dangling is not None:
        edge = edges[dangling]
        end_name, end = ("src", edge.src) if edge.src not in graph.nodes else ("dst", edge.dst)
        raise FormatError(
            f"{origin}: edges[{dangling}] ({edge.kind}): {end_name} {end!r} is not a node"
        )
    check_graph(graph, origin)
    graph.checked = True  # validated and checked: the store need not check it again
    return graph


def describe_validation_error(exc: ValidationError, root: str) -> str:
    """The first validation error as one line: where, what was expected, what was found."""
    first = exc.errors(include_url=False)[0]
    loc = list(first["loc"])
    location = root + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    found = first.get("input")
    found_text = repr(found)
    if len(found_text) > 60:
        found_text = found_text[:57] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{location}: {first['msg'].lower()}, got {found_text}{more}"


def describe_elements_error(exc: ElementsError, root: str) -> str:
    found_text = repr(exc.found)
    if len(found_text) > 60:
        found_text = found_text[:57] + "..."
    more = f" (and {exc.more} more)" if exc.more else ""
    where = f"{root}[{exc.position}]{exc.field}"
    return f"{where}: {exc}, got {found_text}{more}"


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )
