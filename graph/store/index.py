"""A snapshot's node index: the rows an entity or a search reads instead of the whole graph.

converters/stored.py makes the rows (a node's record and its searched text, an edge's record
and ends) and asks the questions; this module keeps them in tables of the snapshot's own
(dropped with it) and answers them: records by id, edges by either end, and searches through
an FTS5 trigram index of the searched text. The searched columns ``key`` (the lower-cased id)
and ``name`` are each framed by one character at either end (converters/stored.py says which),
so that a query can find where an id or a name starts and ends.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from ..errors import UserError
from ..safetext import excerpt
from .database import Database

# The node index's format: 2 keeps each snapshot's index in tables of its own (dropped with
# it) with an FTS5 trigram index for searches; 3 frames all the searched text and lists the
# index's trigrams; 4 stores an edge's ends as their nodes' places in id order; 5 frames the
# id and the name each by a character of its own. An index of another format is built again.
NODE_INDEX_FORMAT = 5
_IN_LIST = 500  # ids per "IN (...)" query (SQLite allows 32,766 parameters; keep it small)
# Node rows written at a time: a record fresh from orjson holds its whole write buffer (~4 KB)
# until it is freed, so a build that held every row (530k at 640 hosts) took 2.3 GB
_NODE_CHUNK = 2000


@dataclass(slots=True)
class NodeRow:
    """A node's row: its id and record, and the searched text, lower-cased and framed: the
    id (``key``), the name, and the rest of the searchable text (``other``)."""

    id: str
    key: str
    name: str
    other: str
    record: bytes


EdgeRow = tuple[int, str, str, bytes]  # (position in the graph's order, src, dst, record)
EdgeRecords = dict[int, tuple[str, str, bytes]]  # position → (src, dst, record)


class IndexTables:
    """The tables of one snapshot's node index: node records by id, edge records by
    position (indexed by either end), the searched text of each node by position in id
    order, the full-text index of that text (FTS5, its content read from ``text``) and the
    search index's trigrams, which a needle of one or two characters reads."""

    def __init__(self, snapshot_id: str) -> None:
        if not snapshot_id.isascii() or not snapshot_id.isalnum():  # ours: "s" and hex digits
            raise UserError(f"not a snapshot id: {excerpt(snapshot_id, 40)}")
        self.nodes = f"ni_nodes_{snapshot_id}"
        self.edges = f"ni_edges_{snapshot_id}"
        self.text = f"ni_text_{snapshot_id}"
        self.search = f"ni_search_{snapshot_id}"
        self.grams = f"ni_grams_{snapshot_id}"


class NodeIndex:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._node_set_columns: set[str] | None = None

    def fingerprint(self, snapshot_id: str) -> str | None:
        """The whole graph's fingerprint once the snapshot's node index is stored in the
        current format, else None (an older one is built again, or the graph answers)."""
        if "format" not in self._node_sets_columns():  # read-only, made before formats
            return None
        query = "SELECT fingerprint FROM node_sets WHERE snapshot_id=? AND format=?"
        with self._db.errors("cannot read the node index"):
            row = self._db.connect().execute(query, (snapshot_id, NODE_INDEX_FORMAT)).fetchone()
        return str(row[0]) if row else None

    def write(
        self,
        snapshot_id: str,
        fingerprint: str,
        nodes: Iterable[NodeRow],
        edges: Iterable[EdgeRow],
    ) -> None:
        """Store the snapshot's index in one transaction: all of it or none; ``nodes`` in id
        order, each read once as it is written, as ``edges`` are. An index of an
        earlier format is replaced; a snapshot deleted meanwhile, or indexed by another
        process meanwhile, is left as it is."""
        with self._db.transaction("cannot store the node index") as db:
            if db.execute("SELECT 1 FROM snapshots WHERE id=?", (snapshot_id,)).fetchone() is None:
                return
            query = "SELECT 1 FROM node_sets WHERE snapshot_id=? AND format=?"
            if db.execute(query, (snapshot_id, NODE_INDEX_FORMAT)).fetchone():
                return
            drop_node_index(db, snapshot_id)  # an earlier format's, or a build cut short
            _write_index(db, IndexTables(snapshot_id), nodes, edges)
            db.execute(
                "INSERT INTO node_sets VALUES (?,?,?)",
                (snapshot_id, fingerprint, NODE_INDEX_FORMAT),
            )

    def _node_sets_columns(self) -> set[str]:
        if self._node_set_columns is None:  # a read-only store keeps the schema it has
            self._node_set_columns = self._db.columns("node_sets")
        return self._node_set_columns

    def node_records(self, snapshot_id: str, node_ids: Sequence[str]) -> list[bytes]:
        """The stored records of the nodes with these ids (those that exist)."""
        table = IndexTables(snapshot_id).nodes
        rows = self._rows_in(f"SELECT id, data FROM {table}", "id", node_ids)
        return [_whole(data, _node_head(node_id)) for node_id, data in rows]

    def edge_records(self, snapshot_id: str, node_ids: Sequence[str]) -> EdgeRecords:
        """Every edge from or to these nodes."""
        tables = IndexTables(snapshot_id)
        query = f"SELECT pos FROM {tables.nodes}"
        places = [pos for (pos,) in self._rows_in(query, "id", node_ids)]
        rows: dict[int, tuple[int, int, bytes]] = {}
        for end in ("src", "dst"):
            query = f"SELECT seq, src, dst, data FROM {tables.edges}"
            for seq, src, dst, data in self._rows_in(query, end, places):
                rows[seq] = (src, dst, data)
        ends = sorted({place for src, dst, _data in rows.values() for place in (src, dst)})
        query = f"SELECT pos, id, key FROM {tables.text}"
        node_at = {
            pos: node_id or key[1:-1] for pos, node_id, key in self._rows_in(query, "pos", ends)
        }
        edges: EdgeRecords = {}
        for seq, (src, dst, data) in rows.items():
            src_id, dst_id = node_at[src], node_at[dst]
            edges[seq] = (src_id, dst_id, _whole(data, _edge_head(src_id, dst_id)))
        return edges

    def _rows_in(self, select: str, key: str, values: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of ``select`` whose ``key`` is one of ``values``."""
        rows: list[tuple[Any, ...]] = []
        with self._db.errors("cannot read the node index"):
            db = self._db.connect()
            for start in range(0, len(values), _IN_LIST):
                chunk = list(values[start : start + _IN_LIST])
                marks = ",".join("?" * len(chunk))
                rows += db.execute(f"{select} WHERE {key} IN ({marks})", chunk).fetchall()
        return rows

    def has_search_index(self, snapshot_id: str) -> bool:
        """Whether the snapshot's node index has its full-text index (not when a searched
        text holds a NUL); without it a search scans every row (:meth:`search_scan`)."""
        return self._db.has_table(IndexTables(snapshot_id).search)

    def search_count(self, snapshot_id: str, match: str, cap: int) -> int:
        """How many nodes the full-text query ``match`` finds, up to ``cap``: FTS5 with the
        trigram tokenizer, case-sensitive, over the columns ``key``, ``name`` and ``other``,
        counted in the index without reading the rows."""
        table = IndexTables(snapshot_id).search
        with self._db.errors("cannot search the node index"):
            query = f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT ?)"
            return int(self._db.connect().execute(query, (match, cap)).fetchone()[0])

    def search_trigrams(self, snapshot_id: str, text: str, at: int) -> list[str]:
        """The trigrams of the snapshot's search index that hold ``text`` (one or two
        characters) at offset ``at``."""
        table = IndexTables(snapshot_id).grams
        query = f"SELECT gram FROM {table} WHERE instr(CAST(gram AS BLOB), ?) > 0"
        with self._db.errors("cannot search the node index"):
            rows = self._db.connect().execute(query, (text.encode(),)).fetchall()
        return [gram for (gram,) in rows if gram[at : at + len(text)] == text]

    def search_matches(self, snapshot_id: str, match: str) -> Iterator[tuple[str, str]]:
        """The nodes ``match`` finds in id order, read as they are asked for: (id, lower-cased
        name)."""
        tables = IndexTables(snapshot_id)
        query = (
            f"SELECT t.id, t.key, t.name FROM {tables.search} AS s JOIN {tables.text} AS t "
            f"ON t.pos = s.rowid WHERE {tables.search} MATCH ? ORDER BY s.rowid"
        )
        with self._db.errors("cannot search the node index"):
            for node_id, key, name in self._db.connect().execute(query, (match,)):
                yield node_id or key[1:-1], name[1:-1]

    def search_scan(
        self, snapshot_id: str, needle: str, limit: int, cap: int
    ) -> tuple[int, list[str]]:
        """The ids of the ``limit`` best nodes whose searchable text or name holds
        ``needle`` (lower-cased, no line break), best first, and how many hold it (up to
        ``cap``): a scan of every row, where the trigram index cannot answer (a needle
        holding a NUL, which a query string cannot carry, or a frame; a snapshot without the
        index). Ranked as converters/search.py ranks: the id itself, an id starting or ending
        with it, the name itself, in the name, elsewhere; then by id (the rows are stored in
        id order). Compared as UTF-8 bytes, so that a NUL in a string ends nothing."""
        table = IndexTables(snapshot_id).text
        # the id and the name unframed (the needle may hold a frame); the rest is framed by
        # line breaks, which the needle does not hold
        rows = f"""FROM (SELECT pos, id, key,
                substr(CAST(key AS BLOB), 2, length(CAST(key AS BLOB)) - 2) AS lower_id,
                substr(CAST(name AS BLOB), 2, length(CAST(name AS BLOB)) - 2) AS name,
                CAST(other AS BLOB) AS other FROM {table})
            WHERE instr(lower_id, :q) > 0 OR instr(name, :q) > 0 OR instr(other, :q) > 0"""
        # two scans cost less than one that sorts every match to count them (a window)
        best = f"""SELECT id, key {rows} ORDER BY CASE
                WHEN lower_id = :q THEN 0
                WHEN substr(lower_id, 1, length(:q)) = :q
                  OR (length(lower_id) >= length(:q) AND substr(lower_id, -length(:q)) = :q)
                  THEN 1
                WHEN name = :q THEN 2
                WHEN instr(name, :q) > 0 THEN 3
                ELSE 4 END, pos LIMIT :limit"""
        arguments = {"q": needle.encode(), "limit": limit, "cap": cap}
        with self._db.errors("cannot search the node index"):
            db = self._db.connect()
            ids = [node_id or key[1:-1] for node_id, key in db.execute(best, arguments)]
            if len(ids) < limit:  # all of them: no second scan to count them
                return len(ids), ids
            counted = f"SELECT count(*) FROM (SELECT 1 {rows} LIMIT :cap)"
            total = int(db.execute(counted, arguments).fetchone()[0])
        return total, ids


def drop_node_index(db: sqlite3.Connection, snapshot_id: str) -> None:
    """A snapshot's node index, of any format."""
    tables = IndexTables(snapshot_id)
    for table in (tables.search, tables.text, tables.edges, tables.nodes, tables.grams):
        db.execute(f"DROP TABLE IF EXISTS {table}")
    for table in ("node_sets", "node_rows", "search_keys", "edge_rows"):
        db.execute(f"DELETE FROM {table} WHERE snapshot_id=?", (snapshot_id,))


def _index_schema(tables: IndexTables) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE {tables.nodes} (id TEXT PRIMARY KEY, pos INTEGER NOT NULL,
            data BLOB NOT NULL) WITHOUT ROWID""",
        f"""CREATE TABLE {tables.edges} (seq INTEGER PRIMARY KEY, src INTEGER NOT NULL,
            dst INTEGER NOT NULL, data BLOB NOT NULL)""",
        f"""CREATE TABLE {tables.text} (pos INTEGER PRIMARY KEY, id TEXT, key TEXT NOT NULL,
            name TEXT NOT NULL, other TEXT NOT NULL)""",
    )


def _write_index(
    db: sqlite3.Connection,
    tables: IndexTables,
    nodes: Iterable[NodeRow],
    edges: Iterable[EdgeRow],
) -> None:
    """The index's tables and their rows. ``nodes`` come in id order: a node's place in it
    is its row of ``text`` and of the full-text index (so a query's rows by rowid are by
    id), and an edge's ends are stored as their places, which cost fewer bytes than ids, in
    the row and in the two indexes of ends. Rows are written as they come, a chunk at a
    time, so none outlives its chunk: a build holds the places by id and one chunk."""
    for statement in _index_schema(tables):
        db.execute(statement)
    place: dict[str, int] = {}
    holds_nul = False
    last_id: str | None = None
    rows = iter(nodes)
    while chunk := list(islice(rows, _NODE_CHUNK)):
        first = len(place) + 1
        for number, node in enumerate(chunk, first):
            if last_id is not None and node.id <= last_id:
                raise ValueError("node rows come in id order, each id once")
            last_id = node.id
            place[node.id] = number
        db.executemany(
            f"INSERT INTO {tables.nodes} VALUES (?,?,?)",
            [(node.id, number, _trimmed(node.record, _node_head(node.id)))
             for number, node in enumerate(chunk, first)],
        )  # fmt: skip
        db.executemany(
            f"INSERT INTO {tables.text} VALUES (?,?,?,?,?)",
            [(number, None if node.key[1:-1] == node.id else node.id, node.key, node.name,
              node.other) for number, node in enumerate(chunk, first)],
        )  # fmt: skip
        holds_nul = holds_nul or any(
            "\x00" in f"{node.key}{node.name}{node.other}" for node in chunk
        )
    # FTS5's trigram tokenizer ends a text at a NUL: a snapshot holding one is scanned
    if not holds_nul:
        _write_search_index(db, tables)
    db.executemany(
        f"INSERT INTO {tables.edges} VALUES (?,?,?,?)",
        (
            (
                seq,
                _place_of(place, src),
                _place_of(place, dst),
                _trimmed(record, _edge_head(src, dst)),
            )
            for seq, src, dst, record in edges
        ),  # fmt: skip
    )
    for end in ("src", "dst"):
        db.execute(f"CREATE INDEX {tables.edges}_{end} ON {tables.edges}({end})")


def _place_of(place: dict[str, int], node_id: str) -> int:
    try:
        return place[node_id]
    except KeyError:  # a stored graph was checked: no edge ends outside its nodes
        raise UserError(f"an edge ends at {excerpt(node_id, 60)}, which is no node") from None


def _write_search_index(db: sqlite3.Connection, tables: IndexTables) -> None:
    """The full-text index of ``tables.text`` and the list of its trigrams. The index is
    external-content (the text is kept once, in ``text``, which a scan reads), keeps no
    column sizes (only ranking by relevance reads them) and is case-sensitive: the text is
    lower-cased as converters/search.py lower-cases it, which SQLite's own folding does not
    match."""
    search = tables.search
    db.execute(
        f"""CREATE VIRTUAL TABLE {search} USING fts5(key, name, other, content={tables.text},
        content_rowid=pos, tokenize='trigram case_sensitive 1', columnsize=0, detail=full)"""
    )
    db.execute(f"INSERT INTO {search}({search}) VALUES ('rebuild')")
    # one b-tree per term instead of the segments of each batch: smaller and faster
    db.execute(f"INSERT INTO {search}({search}) VALUES ('optimize')")
    db.execute(f"CREATE TABLE {tables.grams} (gram TEXT PRIMARY KEY) WITHOUT ROWID")
    db.execute(f"CREATE VIRTUAL TABLE temp.vocabulary USING fts5vocab(main, {search}, row)")
    db.execute(f"INSERT INTO {tables.grams} SELECT term FROM temp.vocabulary")
    db.execute("DROP TABLE temp.vocabulary")


# A node's record starts with its id, an edge's with its ends: the index keeps them once
# (in their columns), and a record without that head starts with the comma that follows it.
def _node_head(node_id: str) -> bytes:
    return b'{"id":' + orjson.dumps(node_id) + b","


def _edge_head(src: str, dst: str) -> bytes:
    return b'{"src":' + orjson.dumps(src) + b',"dst":' + orjson.dumps(dst) + b","


def _trimmed(record: bytes, head: bytes) -> bytes:
    return record[len(head) - 1 :] if record.startswith(head) else record


def _whole(stored: bytes, head: bytes) -> bytes:
    return head[:-1] + stored if stored.startswith(b",") else stored
