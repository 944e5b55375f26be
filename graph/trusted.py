"""The store's own form of a whole graph: validated once when stored, trusted when read.

A stored snapshot is the native ``wp-graph`` document, zlib-compressed (written and read
with isal, whose inflate is ~2.5x zlib's on the same bytes; any zlib reads them). When the
graph's elements pass the model's validation unchanged and the whole-graph checks when it is
stored, the row starts with ``TAG``: reading it back skips validation and the checks (they
ran already), wraps the parsed dicts in their classes in C-level passes
(``Graph.from_trusted``) and keeps a large graph's objects out of the cyclic collector's
passes (``graph/gcpause.py``). A row without the tag (stored before the tag existed, or
holding a value the model would coerce or refuse) is read through the validating reader, as
a file is. The store is ours, but its file is on disk: zlib's checksum refuses a damaged
row, and a row whose document does not hold what its listing says (node and edge counts), or
that cannot be built, is read through the validating reader too, which names what is wrong.

Why this form (``benchmarks/bench_import.py``; ``docs/architecture.md``, the store): orjson
parses the native JSON straight into the dicts elements hold, faster than msgpack unpacks
the same document (1.6 s against 2.0 s CPU on the 640-host graph), and column arrays would
need a Python pass per element to turn rows into those dicts again.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, cast

import orjson
from isal import isal_zlib

from . import native
from .check import check_graph
from .errors import FormatError
from .gcpause import kept_out_of_collections
from .graph import Graph
from .model import EDGE_CLASSES, NODE_CLASSES, Edge, Meta, Node, valid_as_they_are, wrap_trusted

TAG = b"wpg-trusted-1\n"  # never the first bytes of a zlib stream (0x78 ...)
_ATTRIBUTES = attrgetter("__dict__")
# isal (zlib's format, inflated ~2.5x faster) raises this class; its stub says an instance
_DAMAGED = cast(type[Exception], isal_zlib.error)


def pack(graph: Graph, document: bytes) -> bytes:
    """The row for ``graph`` whose native document is ``document``: tagged as trusted when
    reading it through the validating reader would give this graph back."""
    blob = isal_zlib.compress(document, 1)
    return TAG + blob if trustworthy(graph) else blob


def trustworthy(graph: Graph) -> bool:
    """The meta record reads back as validating it would, every element passes validation
    as it is, and the whole graph passes the checks: the last two known without a second
    pass for a graph a validating reader built and nothing changed through the graph since
    (``Graph.checked``; an import is checked once, when read). The meta is checked every
    time: its attributes are set directly, not through the graph."""
    if not _meta_reads_back(graph.meta):
        return False
    if graph.checked:
        return True
    nodes = list(map(_ATTRIBUTES, graph.nodes.values()))
    edges = list(map(_ATTRIBUTES, graph.edges()))
    if not valid_as_they_are(nodes, edges):
        return False
    ends = set(map(attrgetter("src"), graph.edges()))
    ends.update(map(attrgetter("dst"), graph.edges()))
    if ends.difference(graph.nodes):
        return False
    try:
        check_graph(graph, "<stored graph>")
    except FormatError:
        return False
    return True


def unpack(blob: bytes, origin: str, counts: tuple[int, int]) -> Graph:
    """The graph a stored row holds; ``counts`` are the (nodes, edges) its listing records.

    Raises ``FormatError`` with one line for a row that is damaged or not a graph."""
    document = stored_document(blob, origin)
    if blob.startswith(TAG):
        graph = _trusted_graph(document, counts)
        if graph is not None:
            return graph
    return native.loads(document, origin=origin)


def stored_document(blob: bytes, origin: str = "stored snapshot") -> bytes:
    """The native JSON document a stored row holds, tagged or not."""
    try:
        return isal_zlib.decompress(memoryview(blob)[len(TAG) :] if blob.startswith(TAG) else blob)
    except _DAMAGED as exc:
        raise FormatError(f"{origin}: the stored data is damaged ({exc}); delete it") from None


def _trusted_graph(document: bytes, counts: tuple[int, int]) -> Graph | None:
    """The graph built without checks, or None where the document is not what was stored
    (the caller then reads it through the validating reader). A large graph's objects are
    frozen out of the cyclic collector's passes once built (``graph/gcpause.py``)."""
    try:
        with kept_out_of_collections(sum(counts)):  # only a graph built whole is frozen
            graph = _built(orjson.loads(document), counts)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None
    graph.checked = True  # as it was when stored
    return graph


def trusted_document_graph(doc: Any) -> Graph | None:
    """The graph of a parsed native document known to be one a trusted graph was written
    as (graph/seal.py: a sealed file), built as a trusted row is; None where it cannot be."""
    if not isinstance(doc, dict):
        return None
    try:
        counts = (len(doc["nodes"]), len(doc["edges"]))
        with kept_out_of_collections(sum(counts)):
            graph = _built(doc, counts)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    graph.checked = True  # as it was when written
    return graph


def _built(doc: Any, counts: tuple[int, int]) -> Graph:
    nodes, edges = doc["nodes"], doc["edges"]
    if (len(nodes), len(edges)) != counts:
        raise ValueError("not the document stored")
    graph = Graph.from_trusted(
        _meta(doc["meta"]),
        wrap_trusted(nodes, NODE_CLASSES, Node),
        wrap_trusted(edges, EDGE_CLASSES, Edge),
    )
    if len(graph.nodes) != counts[0]:  # an id twice
        raise ValueError("not the document stored")
    return graph


def _meta(values: Any) -> Meta:
    return Meta.from_trusted(values)  # validating it would load pydantic: 0.1 s of a read


def _meta_reads_back(meta: Meta) -> bool:
    """Reading the stored meta record as it is gives what validating it gives, to the byte
    (an int where a float is declared would read back 5 trusted and 5.0 validated)."""
    try:
        stored = orjson.loads(orjson.dumps(meta.model_dump(exclude_none=True)))
        as_is, validated = Meta.from_trusted(stored), Meta.model_validate(stored)
    except (TypeError, ValueError):  # not JSON as it is; not valid (pydantic's error)
        return False
    return as_is == validated and _dumped(as_is) == _dumped(validated)


def _dumped(meta: Meta) -> bytes:
    return orjson.dumps(meta.model_dump())
