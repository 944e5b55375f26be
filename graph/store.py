"""The snapshot store: SQLite in WAL mode under the user's data directory.

Snapshots are immutable once stored: the graph in native form (zlib-compressed) plus the
metadata the listing shows. Reports produced by skills are stored beside the snapshot they
were computed from. Every write is one transaction, so a process killed mid-write leaves
every earlier snapshot readable; WAL lets readers run while a writer writes.

Snapshots hold command lines and host details, so the directory is created 0700 and the
database 0600 (SQLite gives its -wal and -shm files the database's mode). A store that
cannot be written (a read-only mount, another user's files) is opened read-only: it can
be listed, shown and exported, and only a write says that the store is read-only. SQLite's
errors become one line that names the cause: "no space left on device", not "disk I/O
error".
"""

from __future__ import annotations

import _thread  # threading's own locals and locks; importing threading costs ~1 ms
import builtins  # Store.list shadows the builtin in the class body's annotations
import contextlib
import json
import math
import os
import sqlite3
import stat
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import UserError
from .gcpause import release_frozen
from .membudget import graph_cache_bytes
from .outfile import describe_os_error, shown
from .safetext import error_line, excerpt
from .settings import env_number
from .singleflight import SingleFlight

if TYPE_CHECKING:  # the model (pydantic) loads only when a whole graph is read or written
    from .graph import Graph

# A page read loads neither orjson (its import loads dataclasses, uuid, json and datetime)
# nor logging: each function that writes or reads a whole record imports orjson, and a
# stored page, small, is read with the json module; its records are plain NamedTuples.

DB_NAME = "store.sqlite3"
DEFAULT_KEEP = 50  # snapshots kept; the oldest go first (their reports with them)
MAX_KEEP = 1_000_000


def env_keep() -> float:
    """``$WP_MCP_KEEP``, bounded (a bad value is one line naming it)."""
    return env_number("WP_MCP_KEEP", DEFAULT_KEEP, minimum=0, maximum=MAX_KEEP, integer=True)


# Graphs kept parsed in memory (views of one snapshot must not re-read it), bounded by what
# they weigh: ~1.2 KB per node or edge once parsed and indexed (a 640-host cluster graph,
# 1.6M of them, holds ~1.9 GB), so one such graph fits and a second evicts the oldest.
# The budget is also at most a quarter of the memory this process may use (membudget.py).
_CACHE_BYTES = graph_cache_bytes(os.environ.get("WP_MCP_GRAPH_CACHE_MB"))
_BYTES_PER_ELEMENT = 1200
# Below this much free space an I/O error is the disk being full: SQLite reports a full
# disk met while mapping its shared-memory file as "disk I/O error".
_NEARLY_FULL_BYTES = 1 << 20
_WAL_LIMIT_BYTES = 4 << 20

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS snapshots (
        id TEXT PRIMARY KEY,
        created REAL NOT NULL,
        label TEXT,
        origin TEXT,
        hosts TEXT NOT NULL,
        nodes INTEGER NOT NULL,
        edges INTEGER NOT NULL,
        size INTEGER NOT NULL,
        data BLOB NOT NULL,
        content_sha256 TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS reports (
        id TEXT PRIMARY KEY,
        snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
        skill TEXT NOT NULL,
        created REAL NOT NULL,
        data BLOB NOT NULL,
        markdown TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS reports_by_snapshot ON reports(snapshot_id)",
    # monitor events (`wp-mcp monitor`), read by cursor: seq only grows
    """CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        created REAL NOT NULL,
        kind TEXT NOT NULL,
        data BLOB NOT NULL
    )""",
    # named values: the baseline snapshot
    "CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # pages rendered when the snapshot was stored (converters/pages.py), one row per page:
    # the cursor that asks for it ('' for the first) is part of the key, so a read fetches
    # that one row and nothing else
    """CREATE TABLE IF NOT EXISTS pages (
        snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
        view TEXT NOT NULL,
        fmt TEXT NOT NULL,
        budget INTEGER NOT NULL,
        cursor TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (snapshot_id, view, fmt, budget, cursor)
    ) WITHOUT ROWID""",
    # how far each (view, format, budget) chain of pages is stored: a build resumes there
    """CREATE TABLE IF NOT EXISTS page_sets (
        snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
        view TEXT NOT NULL,
        fmt TEXT NOT NULL,
        budget INTEGER NOT NULL,
        stored INTEGER NOT NULL,
        next_cursor TEXT,
        PRIMARY KEY (snapshot_id, view, fmt, budget)
    ) WITHOUT ROWID""",
    # the node index before format 2 (converters/stored.py): kept so that a store written
    # then deletes those rows with their snapshot; a current index lives in per-snapshot
    # tables (_index_tables), which a deleted snapshot drops whole
    """CREATE TABLE IF NOT EXISTS node_rows (
        snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
        id TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (snapshot_id, id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS search_keys (
        snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
        id TEXT NOT NULL,
        lower_id BLOB NOT NULL,
        name BLOB NOT NULL,
        haystack BLOB NOT NULL,
        PRIMARY KEY (snapshot_id, id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS edge_rows (
        snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (snapshot_id, seq)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS edge_rows_by_src ON edge_rows(snapshot_id, src)",
    "CREATE INDEX IF NOT EXISTS edge_rows_by_dst ON edge_rows(snapshot_id, dst)",
    # a snapshot whose node index is complete: the fingerprint of its whole graph, and the
    # index's format (NULL: written before formats, read as no index and built again)
    """CREATE TABLE IF NOT EXISTS node_sets (
        snapshot_id TEXT PRIMARY KEY REFERENCES snapshots(id) ON DELETE CASCADE,
        fingerprint TEXT NOT NULL,
        format INTEGER
    ) WITHOUT ROWID""",
)
# Tables added after the first release: a store that lacks one gets the schema again.
_ADDED_TABLES = (
    "events", "settings", "pages", "page_sets", "node_rows", "search_keys", "edge_rows",
    "node_sets",
)  # fmt: skip
_DERIVED_TABLES = ("pages", "page_sets", "node_sets", "node_rows", "search_keys", "edge_rows")
# The frames of the id and the name in the searched text (converters/stored.py IndexedNode)
ID_FRAME, NAME_FRAME = "\x01", "\x02"
# The node index's format: 2 keeps each snapshot's index in tables of its own (dropped with
# it) with an FTS5 trigram index for searches; 3 frames all the searched text and lists the
# index's trigrams; 4 stores an edge's ends as their nodes' places in id order; 5 frames the
# id and the name each by a character of its own. An index of another format is built again.
NODE_INDEX_FORMAT = 5
_IN_LIST = 500  # ids per "IN (...)" query (SQLite allows 32,766 parameters; keep it small)
_PAGE_BATCH = 200  # pages per write transaction while building (bounds the memory held)
# Pages of a view and format stored by a first build (the first `show` of it, or the MCP
# server's first pass): the first pages are what is read; the server stores the rest after.
# At 640 hosts a chain runs to ~3,000 text and ~15,000 JSON pages, ~10 ms each to render.
EAGER_PAGES = 64
MAX_EVENTS = 10_000  # events kept; the oldest go first
BASELINE_KEY = "baseline"
# Columns added after the first release: (table, column, declaration), added where missing.
_ADDED_COLUMNS = (("snapshots", "content_sha256", "TEXT"), ("node_sets", "format", "INTEGER"))
_ADDED_INDEXES = ("CREATE INDEX IF NOT EXISTS snapshots_by_content ON snapshots(content_sha256)",)


def default_store_path() -> Path:
    explicit = os.environ.get("WP_MCP_STORE")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser() / "wp-mcp"


class SnapshotInfo(NamedTuple):
    id: str
    created: float
    label: str | None
    origin: str | None
    hosts: list[str]
    nodes: int
    edges: int
    size: int  # stored bytes (compressed)


_Rows = list[tuple[Any, ...]]  # rows to insert (named here: Store.list hides the builtin)
_Records = list[bytes]
_Ids = list[str]
PageProgress = dict[tuple[str, str, int], tuple[int, str | None]]


class StoredPage(NamedTuple):
    """A page as converters' ``Page`` has it, read back from the store (same fields, so
    callers use either alike)."""

    text: str
    tokens: int
    next_cursor: str | None
    page: int
    pages: int
    total_items: int
    view: str
    fmt: str
    pages_exact: bool
    first_item: int
    item_count: int
    ids: tuple[str, ...]
    max_tokens: int


class StoredReport(NamedTuple):
    id: str
    snapshot_id: str
    skill: str
    created: float
    data: dict[str, Any]
    markdown: str


class Store:
    def __init__(self, path: str | Path | None = None, keep: int | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_store_path()
        self.keep = keep if keep is not None else int(env_keep())
        self.db_path = self.path / DB_NAME
        self.read_only = not _prepare_files(self.path, self.db_path)
        self._local = _thread._local()
        self._cache: OrderedDict[str, tuple[Graph, int]] = OrderedDict()
        self._cache_bytes = 0
        self._cache_lock = _thread.allocate_lock()
        self._loads = SingleFlight()
        self._pages_table: bool | None = None
        self._node_set_columns: set[str] | None = None
        db = self._connect()  # an unusable store is said now, not at the first read
        if not self.read_only and not _schema_is_current(db):
            with self._transaction("cannot open the store") as db:
                _create_schema(db)

    # ------------------------------------------------------------------ plumbing

    def _connect(self) -> sqlite3.Connection:
        """One connection per thread (sqlite3 connections must not cross threads)."""
        db = getattr(self._local, "db", None)
        if db is None:
            with self._errors("cannot open the store"):
                db = self._open_read_only() if self.read_only else self._open_writable()
            self._local.db = db
        return db

    def _open_writable(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        # a checkpoint cut short by a reader lets the WAL grow past its usual ~4 MiB; trim it
        # back once it is reused, so a long-running monitor's store stays bounded
        db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT_BYTES}")
        return db

    def _open_read_only(self) -> sqlite3.Connection:
        if not self.db_path.exists():
            raise UserError(f"the store {shown(self.path)} is read-only and holds no snapshots yet")
        uri = self.db_path.absolute().as_uri() + "?mode=ro"
        try:
            return _open_uri(uri)
        except sqlite3.OperationalError as exc:
            # Reading a WAL database needs a -shm file, which a read-only directory cannot
            # get. With no -wal either, the database file is all there is: read it as such.
            if getattr(exc, "sqlite_errorname", "") != "SQLITE_CANTOPEN" or _has_wal(self.db_path):
                raise
            return _open_uri(uri + "&immutable=1")

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """SQLite's errors as one line that names the cause and the store."""
        try:
            yield
        except sqlite3.Error as exc:
            raise UserError(f"{doing}: {self._cause(exc)}") from None

    def _cause(self, exc: sqlite3.Error) -> str:
        name = getattr(exc, "sqlite_errorname", "")
        if name == "SQLITE_FULL" or (name.startswith("SQLITE_IOERR") and self._nearly_full()):
            return f"no space left on device ({shown(self.path)})"
        if name.startswith("SQLITE_READONLY"):
            return f"the store is read-only ({shown(self.path)})"
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            return f"the store {shown(self.db_path)} is not usable: {exc}"
        return f"{exc} ({shown(self.path)})"

    def _nearly_full(self) -> bool:
        try:
            fs = os.statvfs(self.path)
        except OSError:
            return False
        return fs.f_bavail * fs.f_frsize < _NEARLY_FULL_BYTES

    def check_writable(self, doing: str) -> None:
        """Refuse now what a write would refuse later: a collection says a read-only store
        before its window, not after it."""
        if self.read_only:
            raise UserError(f"{doing}: the store is read-only ({shown(self.path)})")

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; any failure rolls it back and is said in one line."""
        self.check_writable(doing)
        db = self._connect()
        with self._errors(doing):
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite rolls back by itself on a full disk
                    db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def _new_id(self, db: sqlite3.Connection, table: str, prefix: str) -> str:
        while True:
            candidate = prefix + os.urandom(3).hex()  # as secrets.token_hex makes it
            if db.execute(f"SELECT 1 FROM {table} WHERE id=?", (candidate,)).fetchone() is None:
                return candidate

    # ------------------------------------------------------------------ snapshots

    def put(self, graph: Graph, label: str | None = None, *, reuse_same: bool = False,
            pages: bool = False) -> str:  # fmt: skip
        """Store a graph; returns its snapshot id. Its pages are built later, when first
        asked for (converters/pages.py says why); with ``pages`` their first ones are
        rendered and stored (:meth:`build_pages`) before this returns.

        With ``reuse_same``, a graph whose content is already stored is not stored again:
        the id of the newest snapshot with that content is returned (running a skill on
        one file again and again must not push real snapshots out of retention).
        """
        from . import native

        document = native.dumps(graph)
        content = _content_hash(document)
        with self._transaction("cannot store the snapshot") as db:
            same = None
            if reuse_same:
                same = db.execute(
                    "SELECT id FROM snapshots WHERE content_sha256=? "
                    "ORDER BY created DESC, rowid DESC LIMIT 1",
                    (content,),
                ).fetchone()
            if same is not None:
                snapshot_id = str(same[0])
            else:
                snapshot_id = self._insert_snapshot(db, graph, label, document, content)
                self._apply_retention(db)
        if pages:
            self.build_pages_quietly(snapshot_id, graph)
        return snapshot_id

    def put_cycle(self, graph: Graph, label: str, report: tuple[str, dict[str, Any], str],
                  events: list[dict[str, Any]], tiers: Tiers = ()) -> tuple[str, str]:  # fmt: skip
        """One monitor cycle in one transaction: the snapshot, its report (skill, data,
        markdown) and its events (each gets ``snapshot`` and ``seq``), then retention —
        the count limit and, for snapshots with this label, the down-sampling ``tiers``.
        A process killed at any point leaves all of it or none; its pages are built when
        first asked for. Returns (snapshot, report)."""
        from . import native

        document = native.dumps(graph)
        content = _content_hash(document)
        with self._transaction("cannot store the monitor cycle") as db:
            snapshot_id = self._insert_snapshot(db, graph, label, document, content)
            report_id = self._insert_report(db, snapshot_id, *report)
            for event in events:
                event["snapshot"] = snapshot_id
                event["seq"] = self._insert_event(db, event)
            self._thin(db, label, tiers, time.time())
            self._apply_retention(db)
        return snapshot_id, report_id

    def _insert_snapshot(self, db: sqlite3.Connection, graph: Graph, label: str | None,
                         document: bytes, content: str) -> str:  # fmt: skip
        import orjson

        from . import trusted

        snapshot_id = self._new_id(db, "snapshots", "s")
        blob = trusted.pack(graph, document)
        db.execute(
            "INSERT INTO snapshots (id, created, label, origin, hosts, nodes, edges, size, "
            "data, content_sha256) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                snapshot_id,
                time.time(),
                label,
                graph.meta.origin,
                orjson.dumps(graph.meta.hosts).decode(),
                len(graph.nodes),
                graph.edge_count,
                len(blob),
                blob,
                content,
            ),  # fmt: skip
        )
        return snapshot_id

    def _apply_retention(self, db: sqlite3.Connection) -> None:
        if self.keep <= 0:
            return
        doomed = db.execute(
            "SELECT id FROM snapshots ORDER BY created DESC, rowid DESC LIMIT -1 OFFSET ?",
            (self.keep,),
        ).fetchall()
        self._drop(db, [snapshot_id for (snapshot_id,) in doomed])

    def _thin(self, db: sqlite3.Connection, label: str, tiers: Tiers, now: float) -> None:
        """Down-sample the snapshots with ``label``: see :func:`thinned`."""
        if not tiers:
            return
        rows = db.execute(
            "SELECT id, created FROM snapshots WHERE label=? ORDER BY created DESC, rowid DESC",
            (label,),
        ).fetchall()
        self._drop(db, thinned(rows, tiers, now))

    def _drop(self, db: sqlite3.Connection, snapshot_ids: list[str]) -> None:
        """Delete snapshots and their reports; the baseline is never dropped by retention."""
        baseline = _setting(db, BASELINE_KEY)
        for snapshot_id in snapshot_ids:
            if snapshot_id == baseline:
                continue
            _delete_snapshot(db, snapshot_id)
            self._forget(snapshot_id)

    def resolve(self, ref: str) -> str:
        """A full snapshot id from an id, a unique prefix, or 'latest'."""
        db = self._connect()
        if ref == "latest":
            row = db.execute(
                "SELECT id FROM snapshots ORDER BY created DESC, rowid DESC LIMIT 1"
            ).fetchone()
            if row is None:
                raise UserError(
                    "the store has no snapshots yet: import a file or collect one first"
                )
            return str(row[0])
        rows = db.execute(
            "SELECT id FROM snapshots WHERE id=? OR id LIKE ? ESCAPE '\\' LIMIT 3",
            (ref, _like_prefix(ref)),
        ).fetchall()
        exact = [r[0] for r in rows if r[0] == ref]
        if exact:
            return str(exact[0])
        if len(rows) == 1:
            return str(rows[0][0])
        if len(rows) > 1:
            raise UserError(
                f"snapshot prefix {excerpt(ref)} is ambiguous: {', '.join(r[0] for r in rows)}…"
            )
        raise UserError(f"no snapshot {excerpt(ref)}; {self._known_hint()}")

    def _known_hint(self) -> str:
        recent = self.list(limit=5)
        if not recent:
            return "the store is empty: import a file or collect a snapshot first"
        return (
            "known snapshots: "
            + ", ".join(s.id for s in recent)
            + " (list them all with `snapshots`)"
        )

    def get(self, ref: str) -> Graph:
        snapshot_id = self.resolve(ref)
        cached = self._cached(snapshot_id)
        if cached is not None:
            return cached
        # concurrent misses of one snapshot wait for the first read, not read a copy each
        return self._loads.run(snapshot_id, lambda: self._load(snapshot_id))

    def _cached(self, snapshot_id: str) -> Graph | None:
        with self._cache_lock:
            cached = self._cache.get(snapshot_id)
            if cached is None:
                return None
            self._cache.move_to_end(snapshot_id)
            return cached[0]

    def _load(self, snapshot_id: str) -> Graph:
        cached = self._cached(snapshot_id)  # read meanwhile by a call that just finished
        if cached is not None:
            return cached
        row = (
            self._connect()
            .execute("SELECT data, nodes, edges FROM snapshots WHERE id=?", (snapshot_id,))
            .fetchone()
        )
        if row is None:
            raise UserError(f"snapshot {snapshot_id!r} was deleted; {self._known_hint()}")
        from . import trusted

        graph = trusted.unpack(row[0], f"snapshot {snapshot_id}", (row[1], row[2]))
        self.remember(snapshot_id, graph)
        return graph

    def remember(self, snapshot_id: str, graph: Graph) -> None:
        """Keep ``graph`` as the parsed form of snapshot ``snapshot_id`` (the caller that
        just stored it hands it over instead of having it read back; it must not change)."""
        weight = (len(graph.nodes) + graph.edge_count) * _BYTES_PER_ELEMENT
        evicted = False
        with self._cache_lock:
            if snapshot_id in self._cache:
                return
            self._cache[snapshot_id] = (graph, weight)
            self._cache_bytes += weight
            while self._cache_bytes > _CACHE_BYTES and len(self._cache) > 1:
                self._cache_bytes -= self._cache.popitem(last=False)[1][1]  # no name holds it
                evicted = True
        if evicted:
            release_frozen()  # a graph read frozen is freed now, caches pointing back or not

    def info(self, ref: str) -> SnapshotInfo:
        snapshot_id = self.resolve(ref)
        row = (
            self._connect()
            .execute(f"SELECT {_INFO_COLUMNS} FROM snapshots WHERE id=?", (snapshot_id,))
            .fetchone()
        )
        return _info(row)

    def list(self, limit: int | None = None) -> list[SnapshotInfo]:
        rows = (
            self._connect()
            .execute(
                f"SELECT {_INFO_COLUMNS} FROM snapshots ORDER BY created DESC, rowid DESC LIMIT ?",
                (limit if limit is not None else -1,),
            )
            .fetchall()
        )
        return [_info(row) for row in rows]

    def delete(self, ref: str) -> str:
        snapshot_id = self.resolve(ref)
        with self._transaction("cannot delete the snapshot") as db:
            _delete_snapshot(db, snapshot_id)
            db.execute("DELETE FROM settings WHERE key=? AND value=?", (BASELINE_KEY, snapshot_id))
        self._forget(snapshot_id)
        return snapshot_id

    def _forget(self, snapshot_id: str) -> None:
        with self._cache_lock:
            weight = self._cache.pop(snapshot_id, (None, 0))[1]  # no name holds the graph
            self._cache_bytes -= weight
        if weight:
            release_frozen()

    # ------------------------------------------------------------------ pages

    def build_pages(self, snapshot_id: str, graph: Graph, limit: int | None = EAGER_PAGES,
                    only: tuple[str, str] | None = None) -> None:  # fmt: skip
        """Render and store the pages served without the graph (converters/pages.py says
        which), up to ``limit`` pages of each view and format (None: all of them), or of
        the one (view, format) in ``only``. Pages are written in batches, each with how far
        its chain got, so a later build with a higher limit, or one after a build cut short,
        resumes where the last one stopped; a snapshot deleted meanwhile ends it quietly."""
        # the converters render; the store keeps
        from wp_mcp.converters.pages import STORED_FORMATS, STORED_VIEWS, chains

        if self.read_only:
            return
        done = self._page_progress(snapshot_id)
        views, formats = ((only[0],), (only[1],)) if only else (STORED_VIEWS, STORED_FORMATS)
        for chain in chains(graph, snapshot_id, done, limit, views, formats):
            view, fmt, budget, stored, pages = chain
            batch: _Rows = []
            next_cursor: str | None = None
            for cursor, record in pages:
                batch.append((snapshot_id, view, fmt, budget, cursor, _pack(record)))
                stored, next_cursor = stored + 1, record["next_cursor"]
                progress = (snapshot_id, view, fmt, budget, stored, next_cursor)
                if len(batch) >= _PAGE_BATCH and not self._write_pages(batch, progress):
                    return
            progress = (snapshot_id, view, fmt, budget, stored, next_cursor)
            if batch and not self._write_pages(batch, progress):
                return

    def build_pages_quietly(self, snapshot_id: str, graph: Graph, limit: int | None = EAGER_PAGES,
                            only: tuple[str, str] | None = None) -> None:  # fmt: skip
        """:meth:`build_pages` for a caller whose work is done once the snapshot is stored:
        pages are a copy of what rendering gives, so a page that cannot be built or stored
        (a full disk) is logged and left to be rendered when asked for."""
        try:
            self.build_pages(snapshot_id, graph, limit, only)
        except Exception as exc:  # noqa: BLE001 - the snapshot is stored; this is a cache
            _warn("pages of snapshot %s not stored: %s", snapshot_id, error_line(exc))

    def _page_progress(
        self, snapshot_id: str
    ) -> dict[tuple[str, str, int], tuple[int, str | None]]:
        """(view, format, budget) → (pages stored, cursor of the next one; None: all)."""
        query = "SELECT view, fmt, budget, stored, next_cursor FROM page_sets WHERE snapshot_id=?"
        rows = self._connect().execute(query, (snapshot_id,))
        return {(view, fmt, budget): (stored, after) for view, fmt, budget, stored, after in rows}

    def _write_pages(self, batch: _Rows, progress: tuple[Any, ...]) -> bool:
        """Store a batch of pages and how far its chain got; False once the snapshot is
        gone (deleted, or dropped by retention, while its pages were being rendered)."""
        with self._transaction("cannot store the pages") as db:
            if db.execute("SELECT 1 FROM snapshots WHERE id=?", progress[:1]).fetchone() is None:
                return False
            db.executemany("INSERT OR REPLACE INTO pages VALUES (?,?,?,?,?,?)", batch)
            db.execute("INSERT OR REPLACE INTO page_sets VALUES (?,?,?,?,?,?)", progress)
        batch.clear()
        return True

    def keep_entity_pages(
        self,
        snapshot_id: str,
        entity: str,
        depth: int,
        fmt: str,
        budget: int,
        pages: Iterator[tuple[str, dict[str, Any]]],
    ) -> None:
        """Store the pages of one entity's view (the cursor asking for each, '' for the first;
        its record), which :meth:`page` then serves for that entity: what the first CLI
        answer of an entity longer than its budget renders, so that the next needs neither
        the node index's rows nor the token encoder."""
        if self.read_only:
            return
        view = _entity_view(entity, depth)
        batch: _Rows = []
        stored, next_cursor = 0, None
        for cursor, record in pages:
            batch.append((snapshot_id, view, fmt, budget, cursor, _pack(record)))
            stored, next_cursor = stored + 1, record["next_cursor"]
        if batch:
            self._write_pages(batch, (snapshot_id, view, fmt, budget, stored, next_cursor))

    def page(self, snapshot_id: str, view: str, *, fmt: Any = "txt", cursor: Any = None,
             max_tokens: Any = None, filters: Any = None, entity: Any = None,
             depth: Any = 1) -> StoredPage | None:  # fmt: skip
        """The stored page that ``render_view`` would return for these arguments, or None
        when it was not stored (filters, another budget, not built yet): the caller then
        renders it from the graph. Reads one row; loads neither the graph nor the model."""
        key = _page_key(view, fmt, cursor, max_tokens, filters, entity, depth)
        if key is None or not self._has_pages():
            return None
        query = (
            "SELECT data FROM pages WHERE snapshot_id=? AND view=? AND fmt=? AND budget=? "
            "AND cursor=?"
        )
        with self._errors("cannot read the page"):
            row = self._connect().execute(query, (snapshot_id, *key)).fetchone()
        return _unpack(row[0]) if row else None

    def _has_pages(self) -> bool:
        if self._pages_table is None:  # a read-only store made before pages: never has them
            self._pages_table = self._has_table("pages")
        return self._pages_table

    # ------------------------------------------------------------------ node index

    def build_node_index(self, snapshot_id: str, graph: Graph) -> None:
        """Store the rows an entity or a search of this snapshot reads instead of the graph
        (converters/stored.py makes them), in one transaction: all of them or none. An index
        of an earlier format is replaced."""
        from wp_mcp.converters.stored import index_rows  # the converters make; the store keeps

        if self.read_only or self.node_index(snapshot_id) is not None:
            return
        fingerprint, nodes, edges = index_rows(graph)
        tables = _index_tables(snapshot_id)
        with self._transaction("cannot store the node index") as db:
            if db.execute("SELECT 1 FROM snapshots WHERE id=?", (snapshot_id,)).fetchone() is None:
                return  # deleted meanwhile
            query = "SELECT 1 FROM node_sets WHERE snapshot_id=? AND format=?"
            if db.execute(query, (snapshot_id, NODE_INDEX_FORMAT)).fetchone():
                return  # another process built it meanwhile
            _drop_node_index(db, snapshot_id)  # an earlier format's, or a build cut short
            _write_index(db, tables, nodes, edges)
            db.execute(
                "INSERT INTO node_sets VALUES (?,?,?)",
                (snapshot_id, fingerprint, NODE_INDEX_FORMAT),
            )

    def build_node_index_quietly(self, snapshot_id: str, graph: Graph) -> None:
        """:meth:`build_node_index` for a caller that has its answer already: an index that
        cannot be built (a full disk, a host string SQLite cannot hold) is logged, and
        entities and searches of the snapshot are answered from the graph."""
        try:
            self.build_node_index(snapshot_id, graph)
        except Exception as exc:  # noqa: BLE001 - the snapshot is stored; this is a cache
            _warn("node index of snapshot %s not stored: %s", snapshot_id, error_line(exc))

    def node_index(self, snapshot_id: str) -> str | None:
        """The whole graph's fingerprint once the snapshot's node index is stored in the
        current format, else None (an older one is built again, or the graph answers)."""
        if "format" not in self._node_sets_columns():  # read-only, made before formats
            return None
        query = "SELECT fingerprint FROM node_sets WHERE snapshot_id=? AND format=?"
        with self._errors("cannot read the node index"):
            row = self._connect().execute(query, (snapshot_id, NODE_INDEX_FORMAT)).fetchone()
        return str(row[0]) if row else None

    def _node_sets_columns(self) -> set[str]:
        if self._node_set_columns is None:  # a read-only store keeps the schema it has
            self._node_set_columns = _columns(self._connect(), "node_sets")
        return self._node_set_columns

    def node_records(self, snapshot_id: str, node_ids: _Ids) -> _Records:
        """The stored records of the nodes with these ids (those that exist)."""
        table = _index_tables(snapshot_id).nodes
        rows = self._rows_in(f"SELECT id, data FROM {table}", "id", node_ids)
        return [_whole(data, _node_head(node_id)) for node_id, data in rows]

    def edge_records(self, snapshot_id: str, node_ids: _Ids) -> dict[int, tuple[str, str, bytes]]:
        """Every edge from or to these nodes: graph position → (src, dst, record)."""
        tables = _index_tables(snapshot_id)
        places = [
            pos for (pos,) in self._rows_in(f"SELECT pos FROM {tables.nodes}", "id", node_ids)
        ]
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
        edges: dict[int, tuple[str, str, bytes]] = {}
        for seq, (src, dst, data) in rows.items():
            src_id, dst_id = node_at[src], node_at[dst]
            edges[seq] = (src_id, dst_id, _whole(data, _edge_head(src_id, dst_id)))
        return edges

    def _rows_in(self, select: str, key: str, values: builtins.list[Any]) -> _Rows:
        """The rows of ``select`` whose ``key`` is one of ``values``."""
        rows: _Rows = []
        with self._errors("cannot read the node index"):
            db = self._connect()
            for start in range(0, len(values), _IN_LIST):
                chunk = values[start : start + _IN_LIST]
                marks = ",".join("?" * len(chunk))
                rows += db.execute(f"{select} WHERE {key} IN ({marks})", chunk).fetchall()
        return rows

    def search_count(self, snapshot_id: str, match: str, cap: int) -> int:
        """How many nodes the full-text query ``match`` finds, up to ``cap``: FTS5 with the
        trigram tokenizer, case-sensitive, over the columns converters/stored.py
        ``IndexedNode`` writes (``key``: the lower-cased id, and ``name`` framed by line
        breaks; ``other``), counted in the index without reading the rows."""
        table = _index_tables(snapshot_id).search
        with self._errors("cannot search the node index"):
            query = f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT ?)"
            return int(self._connect().execute(query, (match, cap)).fetchone()[0])

    def has_search_index(self, snapshot_id: str) -> bool:
        """Whether the snapshot's node index has its full-text index (not when a searched
        text holds a NUL); without it a search scans every row (:meth:`search_scan`)."""
        return self._has_table(_index_tables(snapshot_id).search)

    def search_trigrams(self, snapshot_id: str, text: str, at: int) -> builtins.list[str]:
        """The trigrams of the snapshot's search index that hold ``text`` (one or two
        characters) at offset ``at``."""
        table = _index_tables(snapshot_id).grams
        query = f"SELECT gram FROM {table} WHERE instr(CAST(gram AS BLOB), ?) > 0"
        with self._errors("cannot search the node index"):
            rows = self._connect().execute(query, (text.encode(),)).fetchall()
        return [gram for (gram,) in rows if gram[at : at + len(text)] == text]

    def search_matches(self, snapshot_id: str, match: str) -> Iterator[tuple[str, str]]:
        """The nodes ``match`` finds in id order, read as they are asked for: (id, lower-cased
        name)."""
        tables = _index_tables(snapshot_id)
        query = (
            f"SELECT t.id, t.key, t.name FROM {tables.search} AS s JOIN {tables.text} AS t "
            f"ON t.pos = s.rowid WHERE {tables.search} MATCH ? ORDER BY s.rowid"
        )
        with self._errors("cannot search the node index"):
            for node_id, key, name in self._connect().execute(query, (match,)):
                yield node_id or key[1:-1], name[1:-1]

    def search_scan(self, snapshot_id: str, needle: str, limit: int, cap: int) -> tuple[int, _Ids]:
        """The ids of the ``limit`` best nodes whose searchable text or name holds
        ``needle`` (lower-cased, no line break), best first, and how many hold it (up to
        ``cap``): a scan
        of every row, where the trigram index cannot answer (a needle holding a NUL, which
        a query string cannot carry, or a frame, ``ID_FRAME`` or ``NAME_FRAME``; a snapshot
        without the index). Ranked as converters/search.py ranks: the id itself,
        an id starting or ending with it, the name itself, in the name, elsewhere; then by
        id (the rows are stored in id order). Compared as UTF-8 bytes, so that a NUL in a
        string ends nothing."""
        table = _index_tables(snapshot_id).text
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
        with self._errors("cannot search the node index"):
            db = self._connect()
            ids = [node_id or key[1:-1] for node_id, key in db.execute(best, arguments)]
            if len(ids) < limit:  # all of them: no second scan to count them
                return len(ids), ids
            counted = f"SELECT count(*) FROM (SELECT 1 {rows} LIMIT :cap)"
            total = int(db.execute(counted, arguments).fetchone()[0])
        return total, ids

    # ------------------------------------------------------------------ reports

    def put_report(self, snapshot_id: str, skill: str, data: dict[str, Any], markdown: str) -> str:
        snapshot_id = self.resolve(snapshot_id)
        with self._transaction("cannot store the report") as db:
            return self._insert_report(db, snapshot_id, skill, data, markdown)

    def _insert_report(self, db: sqlite3.Connection, snapshot_id: str, skill: str,
                       data: dict[str, Any], markdown: str) -> str:  # fmt: skip
        import orjson

        blob = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
        report_id = self._new_id(db, "reports", "r")
        db.execute(
            "INSERT INTO reports VALUES (?,?,?,?,?,?)",
            (report_id, snapshot_id, skill, time.time(), blob, markdown),
        )
        return report_id

    def latest_report_for_label(self, skill: str, label: str) -> StoredReport | None:
        """The newest report of ``skill`` on a snapshot labelled ``label`` (the last monitor
        cycle a restarted monitor compares with)."""
        row = (
            self._connect()
            .execute(
                "SELECT r.id, r.snapshot_id, r.skill, r.created, r.data, r.markdown FROM reports r "
                "JOIN snapshots s ON s.id = r.snapshot_id WHERE r.skill=? AND s.label=? "
                "ORDER BY r.created DESC, r.rowid DESC LIMIT 1",
                (skill, label),
            )
            .fetchone()
        )
        if row is None:
            return None
        return _report(row)

    # ------------------------------------------------------------------ baseline

    def set_baseline(self, ref: str) -> str:
        snapshot_id = self.resolve(ref)
        with self._transaction("cannot set the baseline") as db:
            db.execute(
                "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)",
                (BASELINE_KEY, snapshot_id),
            )
        return snapshot_id

    def baseline(self) -> str | None:
        """The baseline snapshot's id, or None when none is set."""
        return _setting(self._connect(), BASELINE_KEY) if self._has_table("settings") else None

    # ------------------------------------------------------------------ events

    def _insert_event(self, db: sqlite3.Connection, event: dict[str, Any]) -> int:
        cursor = db.execute(
            "INSERT INTO events (created, kind, data) VALUES (?,?,?)",
            (event.get("time", time.time()), event["kind"], _orjson_dumps(event)),
        )
        seq = cursor.lastrowid
        assert seq is not None  # the INSERT above set it
        db.execute("DELETE FROM events WHERE seq <= ?", (seq - MAX_EVENTS,))
        return int(seq)

    def events_since(self, cursor: int = 0, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """Events with a sequence number above ``cursor``, oldest first, each with its
        ``seq`` (the next cursor is the last one's)."""
        if not self._has_table("events"):  # a read-only store made before monitoring
            return []
        query = "SELECT seq, data FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
        with self._errors("cannot read the events"):
            rows = self._connect().execute(query, (cursor, limit)).fetchall()
        import orjson

        return [{**orjson.loads(data), "seq": seq} for seq, data in rows]

    def _has_table(self, table: str) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?"
        return self._connect().execute(query, (table,)).fetchone() is not None

    def get_report(self, ref: str) -> StoredReport:
        db = self._connect()
        if ref == "latest":
            row = db.execute(
                "SELECT id,snapshot_id,skill,created,data,markdown FROM reports "
                "ORDER BY created DESC, rowid DESC LIMIT 1"
            ).fetchone()
        else:
            rows = db.execute(
                "SELECT id,snapshot_id,skill,created,data,markdown FROM reports "
                "WHERE id=? OR id LIKE ? ESCAPE '\\' LIMIT 2",
                (ref, _like_prefix(ref)),
            ).fetchall()
            exact = [r for r in rows if r[0] == ref]
            row = exact[0] if exact else (rows[0] if len(rows) == 1 else None)
        if row is None:
            recent = ", ".join(r.id for r in self.list_reports()[:5])
            hint = f"known reports: {recent}" if recent else "no reports yet: run a skill first"
            raise UserError(f"no report {excerpt(ref)}; {hint}")
        return _report(row)

    def list_reports(self, snapshot_id: str | None = None) -> builtins.list[StoredReport]:
        db = self._connect()
        query = "SELECT id,snapshot_id,skill,created FROM reports"
        params: tuple[str, ...] = ()
        if snapshot_id is not None:
            query += " WHERE snapshot_id=?"
            params = (self.resolve(snapshot_id),)
        rows = db.execute(query + " ORDER BY created DESC, rowid DESC", params).fetchall()
        return [StoredReport(r[0], r[1], r[2], r[3], {}, "") for r in rows]


_INFO_COLUMNS = "id, created, label, origin, hosts, nodes, edges, size"


def _content_hash(document: bytes) -> str:
    """What a stored document is, to find the same content again (``reuse_same``): hashlib
    loads here, not on every command's path (a page read never stores)."""
    import hashlib

    return hashlib.sha256(document).hexdigest()


# Down-sampling tiers: (age in seconds up to which the tier applies, spacing in seconds
# between the snapshots it keeps; 0 keeps all). Older than the last tier: dropped.
Tiers = tuple[tuple[float, float], ...]


def thinned(rows: list[tuple[str, float]], tiers: Tiers, now: float) -> list[str]:
    """The ids to drop from (id, created) rows so that each tier keeps the oldest snapshot
    of every ``spacing``-long slot of its age range and nothing outlives the last tier.
    Slots are aligned to the epoch and the oldest is kept, so a snapshot a tier kept stays
    kept as time moves on: newer ones reaching its slot are the ones dropped. The newest
    snapshot (the one just stored) is never dropped, and tiers that are not finite numbers
    are refused: a bad tier must not empty the store."""
    if not all(math.isfinite(value) for tier in tiers for value in tier):
        raise ValueError(f"down-sampling tiers must be finite numbers, not {tiers!r}")
    doomed = []
    slots_seen: set[tuple[int, int]] = set()
    for snapshot_id, created in sorted(rows, key=lambda row: row[1])[:-1]:
        age = now - created
        tier = next((i for i, (limit, _) in enumerate(tiers) if age <= limit), None)
        if tier is None:
            doomed.append(snapshot_id)
            continue
        spacing = tiers[tier][1]
        if spacing <= 0:
            continue
        slot = (tier, int(created // spacing))
        if slot in slots_seen:
            doomed.append(snapshot_id)
        slots_seen.add(slot)
    return doomed


def _delete_snapshot(db: sqlite3.Connection, snapshot_id: str) -> None:
    """A snapshot with everything derived from it (its pages go by cascade as well; a store
    opened by an older version had no foreign keys on them, hence the explicit deletes)."""
    _drop_node_index(db, snapshot_id)
    for table in (*_DERIVED_TABLES, "reports"):
        db.execute(f"DELETE FROM {table} WHERE snapshot_id=?", (snapshot_id,))
    db.execute("DELETE FROM snapshots WHERE id=?", (snapshot_id,))


class IndexTables(NamedTuple):
    """The tables of one snapshot's node index: node records by id, edge records by
    position (indexed by either end), the searched text of each node by position in id
    order, and the full-text index of that text (FTS5, its content read from ``text``)."""

    nodes: str
    edges: str
    text: str
    search: str
    grams: str  # the search index's trigrams, which a needle of one or two characters reads


def _index_tables(snapshot_id: str) -> IndexTables:
    if not snapshot_id.isascii() or not snapshot_id.isalnum():  # ours: "s" and hex digits
        raise UserError(f"not a snapshot id: {excerpt(snapshot_id, 40)}")
    return IndexTables(
        *(f"ni_{part}_{snapshot_id}" for part in ("nodes", "edges", "text", "search", "grams"))
    )


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
    db: sqlite3.Connection, tables: IndexTables, nodes: list[Any], edges: Iterator[Any]
) -> None:
    """A snapshot's node index (converters/stored.py's rows): its tables and their rows. A
    node has a place in id order (its row of ``text`` and of the full-text index); an edge's
    ends are stored as their places, which cost fewer bytes than ids, in the row and in the
    two indexes of ends."""
    for statement in _index_schema(tables):
        db.execute(statement)
    ordered = sorted(nodes, key=_by_id)  # in id order: a query's rows by rowid are by id
    place = {node.id: number for number, node in enumerate(ordered, 1)}
    db.executemany(
        f"INSERT INTO {tables.nodes} VALUES (?,?,?)",
        ((node.id, place[node.id], _trimmed(node.record, _node_head(node.id))) for node in nodes),
    )
    db.executemany(
        f"INSERT INTO {tables.text} VALUES (?,?,?,?,?)",
        (
            (
                number,
                None if node.key[1:-1] == node.id else node.id,
                node.key,
                node.name,
                node.other,
            )
            for number, node in enumerate(ordered, 1)
        ),  # fmt: skip
    )
    # FTS5's trigram tokenizer ends a text at a NUL: a snapshot holding one is scanned
    if not any("\x00" in f"{node.key}{node.name}{node.other}" for node in nodes):
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
        ),
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


def _drop_node_index(db: sqlite3.Connection, snapshot_id: str) -> None:
    """A snapshot's node index, of any format (the rows before format 2 go with
    _DERIVED_TABLES)."""
    tables = _index_tables(snapshot_id)
    for table in (tables.search, tables.text, tables.edges, tables.nodes, tables.grams):
        db.execute(f"DROP TABLE IF EXISTS {table}")
    for table in ("node_sets", "node_rows", "search_keys", "edge_rows"):
        db.execute(f"DELETE FROM {table} WHERE snapshot_id=?", (snapshot_id,))


# A node's record starts with its id, an edge's with its ends: the index keeps them once
# (in their columns), and a record without that head starts with the comma that follows it.
def _node_head(node_id: str) -> bytes:
    return b'{"id":' + _orjson_dumps(node_id) + b","


def _edge_head(src: str, dst: str) -> bytes:
    return b'{"src":' + _orjson_dumps(src) + b',"dst":' + _orjson_dumps(dst) + b","


def _trimmed(record: bytes, head: bytes) -> bytes:
    return record[len(head) - 1 :] if record.startswith(head) else record


def _whole(stored: bytes, head: bytes) -> bytes:
    return head[:-1] + stored if stored.startswith(b",") else stored


def _by_id(node: Any) -> str:
    return str(node.id)


def _page_key(view: Any, fmt: Any, cursor: Any, max_tokens: Any, filters: Any, entity: Any,
              depth: Any) -> tuple[str, str, int, str] | None:  # fmt: skip
    """The stored page's key for a request, or None for a request pages are not stored for
    (filters, depth 2 of a view, arguments of unexpected types: rendering says why). An
    entity's pages are keyed by the entity and the depth in the view's place."""
    typed = isinstance(view, str) and isinstance(fmt, str) and isinstance(cursor, str | None)
    if filters or not typed or type(max_tokens) is not int:
        return None
    if view == "entity" and isinstance(entity, str) and entity and depth in (1, 2):
        return _entity_view(entity, depth), fmt, max_tokens, cursor or ""
    if entity is not None or depth != 1:
        return None
    return view, fmt, max_tokens, cursor or ""


def _entity_view(entity: str, depth: int) -> str:
    """The ``view`` column of an entity's stored pages (no view's name holds a NUL)."""
    return f"entity\0{depth}\0{entity}"


def _orjson_dumps(value: Any) -> bytes:
    import orjson

    return orjson.dumps(value)


def _pack(record: dict[str, Any]) -> bytes:
    return zlib.compress(_orjson_dumps(record), 1)


def _unpack(blob: bytes) -> StoredPage:
    # orjson wrote it: plain JSON, which the json module reads to the same values
    record = json.loads(zlib.decompress(blob))
    record["ids"] = tuple(record["ids"])
    return StoredPage(**record)


def _report(row: tuple[Any, ...]) -> StoredReport:
    import orjson

    return StoredReport(row[0], row[1], row[2], row[3], orjson.loads(row[4]), row[5])


def _warn(message: str, *args: object) -> None:
    """A warning logged (logging loads here: a page read never warns)."""
    import logging

    logging.getLogger(__name__).warning(message, *args)


def _setting(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
    return row[0] if row else None


def _info(row: tuple[Any, ...]) -> SnapshotInfo:
    return SnapshotInfo(row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], row[6], row[7])


# Longer than any id the store makes (a few hex digits after a short prefix): a reference this
# long names nothing, and SQLite refuses a LIKE pattern of ~50,000 characters as too complex
MAX_REF_CHARS = 256


def _like_prefix(text: str) -> str:
    """A LIKE pattern for ids starting with ``text``; one that matches none for a reference
    no id could start with (over ``MAX_REF_CHARS``)."""
    if len(text) > MAX_REF_CHARS:
        return ""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


# ---------------------------------------------------------------------- files and schema


def _prepare_files(directory: Path, db_path: Path) -> bool:
    """Create the store's directory (0700) and database file (0600) where missing;
    whether the store can be written."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the store directory {shown(directory)}: {describe_os_error(exc)}"
        ) from None
    if not os.access(directory, os.W_OK):  # -wal and -shm are created beside the database
        return False
    try:
        # SQLite takes an empty file for a new database, and keeps its mode
        os.close(os.open(db_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        _make_private(db_path)
        return os.access(db_path, os.W_OK)
    except OSError as exc:
        raise UserError(
            f"cannot create the store {shown(db_path)}: {describe_os_error(exc)}"
        ) from None
    return True


def _make_private(db_path: Path) -> None:
    """Stores made before the database was created 0600 were readable by every user."""
    for path in (db_path, *_wal_files(db_path)):
        with contextlib.suppress(OSError):  # not ours, or gone: leave it as it is
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077:
                os.chmod(path, 0o600)


def _wal_files(db_path: Path) -> tuple[Path, Path]:
    return db_path.with_name(db_path.name + "-wal"), db_path.with_name(db_path.name + "-shm")


def _has_wal(db_path: Path) -> bool:
    try:
        return _wal_files(db_path)[0].stat().st_size > 0
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: assume there is one, so it is never ignored


def _open_uri(uri: str) -> sqlite3.Connection:
    db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)
    db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file for real
    return db


def _schema_is_current(db: sqlite3.Connection) -> bool:
    """Read-only check, so opening an up-to-date store never waits for a writer."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return all(column in _columns(db, table) for table, column, _ in _ADDED_COLUMNS) and all(
        table in tables for table in _ADDED_TABLES
    )


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _create_schema(db: sqlite3.Connection) -> None:
    """The tables, and any column a store made by an earlier version lacks."""
    for statement in _SCHEMA:
        db.execute(statement)
    for table, column, declaration in _ADDED_COLUMNS:
        if column not in _columns(db, table):
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    for statement in _ADDED_INDEXES:
        db.execute(statement)
