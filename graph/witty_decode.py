"""The witty document decoded with its embedded entity copies trimmed to their key fields.

Every witty edge embeds full copies of both its ends (the 50 MB capture: 35 of its 50 MB),
and the reader needs of a copy only what identifies its entity when the entity is in the
file's own list of nodes. A typed msgspec decode reads each copy into a small struct of its
type's key fields (``witty_spec.IDENTITY_FIELDS``) and skips the rest without making a Python
object of it: 0.14-0.18 s of CPU where orjson's parse of the whole document takes 0.36-0.41.

What comes back is the document as orjson would parse it, except that each edge is a
``TrimmedEdge`` struct: its own fields as parsed (``ABSENT`` where it has none), its ends as
frozen key structs, which equal (and hash as) the identity keys of the entities read from
the file's nodes. The witty reader (``witty.from_witty`` with ``copies_trimmed``) reads the
nodes as it reads any document, finds every end by its key struct, and asks for the
whole document (``witty.NeedsFullCopies``) when an end is an entity known only through its
copy. Anything the typed decode does not describe exactly gets ``None``, and the
caller parses the whole document instead, where every error is put in words:

- a field of an edge, or of the document, that the witty format does not have (a struct
  forbids unknown fields: a dropped field would lose data), or a document both wrapped and bare;
- an end whose type has no key fields (an unknown type is identified by a digest of its whole
  copy), a key field missing (``ppid`` may be) or holding a list or an object;
- anything not valid JSON or UTF-8, or nested deeper than msgspec reads (a RecursionError);
- what is kept nested deeper than ``rawio.MAX_NESTING``, or an integer outside 64 bits
  (orjson parses one as a float, msgspec as an int that no later stage could write).

Two differences from the whole parse, neither in a graph's values: the skipped fields of
a copy are not held to ``MAX_NESTING`` (nothing of them is kept, and msgspec's own recursion
limit, about 1,000 levels, sends deeper files to the whole parse, which refuses them), and
an edge's fields come back in the order the format writes them (its key order in the file is
not seen; the values are the same, and a file the format wrote has them in that order).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Union

import msgspec
import orjson
from msgspec import UNSET, Struct, UnsetType
from msgspec.structs import astuple

from .errors import FormatError
from .gcpause import cyclic_gc_paused
from .rawio import UTF8_BOM, check_nesting
from .witty_spec import IDENTITY_FIELDS

Scalar = str | int | float | bool | None  # hashable, as identity keys must be


def _key_struct(entity_type: str, fields: tuple[str, ...]) -> type[Struct]:
    """A copy of ``entity_type`` read as its key fields only (the rest skipped unread);
    frozen, so that it is found in a dict as the tuple of its fields would be."""
    return msgspec.defstruct(
        f"{entity_type}Key",
        # an absent ppid is read as null, as ``witty._Importer.identity`` reads it
        [(name, Scalar, None) if name == "ppid" else (name, Scalar) for name in fields],
        tag_field="entity_type",
        tag=entity_type,
        frozen=True,
    )


KEY_STRUCTS = {kind: _key_struct(kind, fields) for kind, fields in IDENTITY_FIELDS.items()}
# an end: one of the key structs, chosen by its entity_type (any other type is refused)
_End = Union[tuple(KEY_STRUCTS.values())]  # type: ignore[valid-type]  # noqa: UP007


def key_struct(entity_type: str, key: Any) -> Struct | None:
    """The key struct a copy of the entity identified by ``(entity_type, key)`` decodes to
    (``key`` as ``witty._Importer.identity`` makes it); None for a type without one."""
    struct = KEY_STRUCTS.get(entity_type)
    if struct is None:
        return None
    return struct(*key) if len(struct.__struct_fields__) > 1 else struct(key)


@dataclass(frozen=True)
class _Absent:
    """A field an edge does not have (a dataclass: the nesting check writes it as ``{}``)."""


ABSENT = _Absent()


class TrimmedEdge(Struct, forbid_unknown_fields=True, kw_only=True):
    """A witty edge: its own fields, every one the format writes and in its order, then its
    ends as key structs."""

    edge_type: str
    weight: Any = ABSENT
    numa_access_info: Any = ABSENT
    proc_status: Any = ABSENT
    connection_type: Any = ABSENT
    data_flow: Any = ABSENT
    source_node: _End  # type: ignore[valid-type]
    target_node: _End  # type: ignore[valid-type]


OWN_FIELDS = TrimmedEdge.__struct_fields__[1:-2]  # those an edge's record keeps as they are


def own_values(edges: list[TrimmedEdge]) -> Iterator[tuple[Any, ...]]:
    """Each edge's values of ``OWN_FIELDS`` (``ABSENT`` where it has none)."""
    own = slice(1, 1 + len(OWN_FIELDS))
    return (astuple(edge)[own] for edge in edges)


class _Graph(Struct, forbid_unknown_fields=True):
    nodes: Any
    edges: list[TrimmedEdge]


class _Document(Struct, forbid_unknown_fields=True):
    """Bare (``nodes`` and ``edges``) or wrapped (``env`` and ``content``), never both."""

    nodes: Any = UNSET
    edges: list[TrimmedEdge] | UnsetType = UNSET
    env: Any = UNSET
    content: _Graph | UnsetType = UNSET


_DECODER = msgspec.json.Decoder(_Document)


def decode_trimmed(data: bytes | bytearray | memoryview) -> dict[str, Any] | None:
    """The document with its edges as ``TrimmedEdge`` structs, or None where the whole
    document must be parsed (the module's docstring says when)."""
    view = memoryview(data)
    if view[:3] == UTF8_BOM:
        view = view[len(UTF8_BOM) :]
    try:
        with cyclic_gc_paused():
            decoded = _DECODER.decode(view)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return None
    present = {name for name in _Document.__struct_fields__ if getattr(decoded, name) is not UNSET}
    if present == {"env", "content"}:
        content = decoded.content
        assert isinstance(content, _Graph)
        graph = {"nodes": content.nodes, "edges": content.edges}
        document = {"env": decoded.env, "content": graph}
    elif present == {"nodes", "edges"}:
        document = graph = {"nodes": decoded.nodes, "edges": decoded.edges}
    else:
        return None  # a bare document with other keys (kept as they are by the whole parse)
    kept = [graph["nodes"], list(own_values(graph["edges"]))]
    return document if _writable(kept if graph is document else [kept]) else None


def _writable(kept: list[Any]) -> bool:
    """What is kept of the document (nested as deep as in it: its nodes, and each edge's own
    values at an edge's depth) within the nesting every later stage writes, with no integer
    orjson would not write (which its parse would have read as a float)."""
    try:
        check_nesting(kept, "<witty>")
    except (orjson.JSONEncodeError, FormatError):  # an integer beyond 64 bits, or too deep
        return False
    return True
