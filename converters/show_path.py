"""The show path: a fresh ``wp-mcp show ID --view V`` printed from its one stored page row.

**Speed rules** (CONTRIBUTING.md, "Speed rules: the show path"). A stored page is the answer
an agent asks for most, in a new process each time, so its cost is Python's start-up plus
this module: ~0.05 s CPU, of which Python itself is ~0.02 s. Everything that process loads
counts, so this module and what it imports are held to rules no other module is:

- it imports only what its top lines import (``json``, ``os``, ``sqlite3``, ``zlib`` and
  graph/location.py), and never ``dataclasses``, ``logging``, ``hashlib``, ``shutil``,
  ``threading``, ``orjson``, pydantic, tiktoken, the graph model or the renderers (each
  costs 1-100 ms; ``tests/server/test_show_startup.py`` fails when the path loads one);
- it reads the store's ``pages`` table itself, read-only, rather than through ``Store``
  (whose modules are plain Python and import what they need); anything unusual (no such
  store, an old schema, an ambiguous prefix, an error) is None, and the caller takes the
  ordinary path, which answers or says what is wrong;
- it owns the pages' keys (:func:`page_key`) and reads the rows' format
  (:func:`page_fields`), which converters/pages.py writes.

A row holds the ``Page``'s fields as JSON, zlib-compressed: the ``json`` module reads what
orjson wrote, to the same values.
"""

from __future__ import annotations

import json
import os
import sqlite3
import zlib
from collections.abc import Mapping
from typing import Any

from wp_mcp.graph.location import DB_NAME, store_directory

PageKey = tuple[str, str, int, str]  # (view, format, budget, cursor): graph/store/pages.py
_PAGE = "SELECT data FROM pages WHERE snapshot_id=? AND view=? AND fmt=? AND budget=? AND cursor=?"
_LATEST = "SELECT id FROM snapshots ORDER BY created DESC, rowid DESC LIMIT 1"
_BY_PREFIX = "SELECT id FROM snapshots WHERE substr(id, 1, ?) = ? ORDER BY id != ? LIMIT 2"


def page_key(
    view: str,
    fmt: str = "txt",
    cursor: str | None = None,
    max_tokens: int = 4000,  # converters/tokens.py DEFAULT_MAX_TOKENS, render_view's default
    filters: Mapping[str, Any] | None = None,
    entity: str | None = None,
    depth: int = 1,
) -> PageKey | None:
    """The stored page's key for a ``render_view`` request, or None for a request pages are
    not stored for (filters, depth 2 of a view, arguments of other types: rendering says
    what is wrong). An entity's pages are keyed by the entity and the depth in the view's
    place."""
    typed = isinstance(view, str) and isinstance(fmt, str) and isinstance(cursor, str | None)
    if filters or not typed or type(max_tokens) is not int:
        return None
    if view == "entity" and isinstance(entity, str) and entity and depth in (1, 2):
        return entity_view(entity, depth), fmt, max_tokens, cursor or ""
    if entity is not None or depth != 1:
        return None
    return view, fmt, max_tokens, cursor or ""


def entity_view(entity: str, depth: int) -> str:
    """The ``view`` part of an entity's pages' keys (no view's name holds a NUL)."""
    return f"entity\0{depth}\0{entity}"


def page_fields(blob: bytes) -> dict[str, Any]:
    """The ``Page`` fields a stored row holds."""
    record: dict[str, Any] = json.loads(zlib.decompress(blob))
    record["ids"] = tuple(record["ids"])
    return record


def stored_text(store: str | None, ref: str, key: PageKey) -> str | None:
    """The text of the page stored under ``key`` for snapshot ``ref`` (an id, a unique
    prefix or 'latest') in the store at ``store`` (None: the default one), or None."""
    path = os.path.join(store_directory(store), DB_NAME)
    if not os.path.isfile(path):
        return None
    try:
        db = sqlite3.connect(f"file:{_quoted(path)}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error:
        return None
    try:
        snapshot_id = _snapshot_id(db, ref)
        row = None if snapshot_id is None else db.execute(_PAGE, (snapshot_id, *key)).fetchone()
    except sqlite3.Error:  # an old schema, a locked or damaged file: the store will say
        return None
    finally:
        db.close()
    return None if row is None else str(page_fields(row[0])["text"])


def _snapshot_id(db: sqlite3.Connection, ref: str) -> str | None:
    """The id ``ref`` names, when it names one (else ``Store.resolve`` says why not)."""
    if ref == "latest":
        rows = db.execute(_LATEST).fetchall()
    else:
        rows = db.execute(_BY_PREFIX, (len(ref), ref, ref)).fetchall()
        if rows and rows[0][0] == ref:
            return ref
    return str(rows[0][0]) if len(rows) == 1 else None


def _quoted(path: str) -> str:
    """``path`` as an SQLite URI's path (``?`` and ``#`` would end it)."""
    absolute = os.path.abspath(path)
    return absolute.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
