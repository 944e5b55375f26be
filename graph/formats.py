"""Reading any graph file we understand: native `wp-graph`, witty-profiler (bare/wrapped), or
a PyTorch profiler trace (a snapshot of its own, graph/trace.py)."""

from __future__ import annotations

from pathlib import Path

from . import native, seal, witty
from .errors import FormatError
from .gcpause import kept_out_of_collections
from .graph import Graph
from .rawio import looks_like_trace, parse_json, read_bytes
from .redact import redact_graph

FORMATS = ("wp-graph", "witty")
# What a graph file's size says of its elements before it is read, to keep a large graph out
# of the cyclic collector's passes (graph/gcpause.py): the native form spends ~180 bytes per
# element, a witty capture ~440 with its embedded copies (its 50 MB: 115k elements), so this
# counts a file's elements low rather than high. The pass it saves walks every object the
# import made the moment the collector runs again: 0.06 s of the 50 MB capture's 1.1 s.
BYTES_PER_ELEMENT_HINT = 512


def detect(doc: object) -> str | None:
    if native.is_native(doc):
        return "wp-graph"
    if witty.is_witty(doc):
        return "witty"
    return None


def load_any(path: str | Path, max_bytes: int | None = None, redact: bool = True) -> Graph:
    """Load a graph file of either format; one-line FormatError for anything else. Secrets in
    its command lines and metadata are redacted, as a collection would have (``redact``)."""
    origin = str(path)
    with kept_out_of_collections(_elements_hint(path)):
        if looks_like_trace(path):  # streamed: a trace may be a GB of events
            from . import trace  # its code loads for a trace only

            graph = trace.load_traces([path], max_bytes)
        else:
            data = read_bytes(path, max_bytes)
            graph = _read(data, origin)
        if redact:
            # files come from other hosts and tools, which may not have redacted anything
            redact_graph(graph)
        return graph


def _read(data: bytes | bytearray, origin: str) -> Graph:
    """A native file this user's wp-mcp sealed is read as a trusted row (graph/seal.py); a
    witty file with its edges' entity copies trimmed (under half of orjson's parse of the
    whole document); anything else is parsed whole and validated."""
    sealed = seal.read_sealed(data)
    if sealed is not None:
        return sealed
    trimmed = witty.read_trimmed(data, origin)
    return trimmed if trimmed is not None else _load_doc(parse_json(data, origin), origin)


def _elements_hint(path: str | Path) -> int:
    try:
        return Path(path).stat().st_size // BYTES_PER_ELEMENT_HINT
    except OSError:
        return 0  # said by the reader, with its own words


def _load_doc(doc: object, origin: str) -> Graph:
    kind = detect(doc)
    if kind == "wp-graph":
        return native.from_dict(doc, origin)
    if kind == "witty":
        return witty.from_witty(doc, origin)
    if isinstance(doc, dict) and "format" in doc:
        raise FormatError(
            f"{origin}: unknown graph format {str(doc['format'])[:40]!r} "
            "(wp-mcp reads wp-graph and witty-profiler graphs)"
        )
    raise FormatError(
        f"{origin}: not a graph file: expected a wp-graph object "
        '({"format": "wp-graph", ...}) or a witty-profiler graph ({"nodes": [...], "edges": [...]})'
    )


def dump(graph: Graph, path: str | Path, fmt: str = "wp-graph") -> Path:
    if fmt == "wp-graph":
        return seal.dump(graph, path)
    if fmt == "witty":
        return witty.dump_witty(graph, path)
    raise FormatError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
