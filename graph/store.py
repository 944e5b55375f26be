"""The snapshot store: SQLite in WAL mode under the user's data directory.

Snapshots are immutable once stored: the graph in native form (zlib-compressed) plus the
metadata the listing shows. Reports produced by skills are stored beside the snapshot they
were computed from. Every write is one transaction, so a process killed mid-write leaves
every earlier snapshot readable; WAL lets readers run while a writer writes.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from . import native
from .errors import UserError
from .graph import Graph
from .safetext import excerpt

DB_NAME = "store.sqlite3"
DEFAULT_KEEP = 50  # snapshots kept; the oldest go first (their reports with them)
_CACHE_SIZE = 4  # graphs kept parsed in memory: views of one snapshot must not re-read it

_SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    label TEXT,
    origin TEXT,
    hosts TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    edges INTEGER NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS reports (
    id TEXT PRIMARY KEY,
    snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    skill TEXT NOT NULL,
    created REAL NOT NULL,
    data BLOB NOT NULL,
    markdown TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reports_by_snapshot ON reports(snapshot_id);
"""


def default_store_path() -> Path:
    explicit = os.environ.get("WP_MCP_STORE")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser() / "wp-mcp"


@dataclass(frozen=True)
class SnapshotInfo:
    id: str
    created: float
    label: str | None
    origin: str | None
    hosts: list[str]
    nodes: int
    edges: int
    size: int  # stored bytes (compressed)


@dataclass(frozen=True)
class StoredReport:
    id: str
    snapshot_id: str
    skill: str
    created: float
    data: dict[str, Any]
    markdown: str


class Store:
    def __init__(self, path: str | Path | None = None, keep: int | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_store_path()
        self.keep = keep if keep is not None else int(os.environ.get("WP_MCP_KEEP", DEFAULT_KEEP))
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"cannot create the store directory {self.path}: {exc.strerror}"
            ) from None
        self.db_path = self.path / DB_NAME
        self._local = threading.local()
        self._cache: OrderedDict[str, Graph] = OrderedDict()
        self._cache_lock = threading.Lock()
        with self._connect() as db:
            db.executescript(_SCHEMA)

    # ------------------------------------------------------------------ plumbing

    def _connect(self) -> sqlite3.Connection:
        """One connection per thread (sqlite3 connections must not cross threads)."""
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA foreign_keys=ON")
            except sqlite3.DatabaseError as exc:
                raise UserError(f"the store {self.db_path} is not usable: {exc}") from None
            self._local.db = db
        return db

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def _new_id(self, db: sqlite3.Connection, table: str, prefix: str) -> str:
        while True:
            candidate = prefix + secrets.token_hex(3)
            if db.execute(f"SELECT 1 FROM {table} WHERE id=?", (candidate,)).fetchone() is None:
                return candidate

    # ------------------------------------------------------------------ snapshots

    def put(self, graph: Graph, label: str | None = None) -> str:
        """Store a graph; returns its snapshot id."""
        blob = zlib.compress(native.dumps(graph), 1)
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            snapshot_id = self._new_id(db, "snapshots", "s")
            db.execute(
                "INSERT INTO snapshots VALUES (?,?,?,?,?,?,?,?,?)",
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
                ),  # fmt: skip
            )
            self._apply_retention(db)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return snapshot_id

    def _apply_retention(self, db: sqlite3.Connection) -> None:
        if self.keep <= 0:
            return
        doomed = db.execute(
            "SELECT id FROM snapshots ORDER BY created DESC, rowid DESC LIMIT -1 OFFSET ?",
            (self.keep,),
        ).fetchall()
        for (snapshot_id,) in doomed:
            db.execute("DELETE FROM reports WHERE snapshot_id=?", (snapshot_id,))
            db.execute("DELETE FROM snapshots WHERE id=?", (snapshot_id,))
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
            return row[0]
        rows = db.execute(
            "SELECT id FROM snapshots WHERE id=? OR id LIKE ? ESCAPE '\\' LIMIT 3",
            (ref, _like_prefix(ref)),
        ).fetchall()
        exact = [r[0] for r in rows if r[0] == ref]
        if exact:
            return exact[0]
        if len(rows) == 1:
            return rows[0][0]
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
        with self._cache_lock:
            cached = self._cache.get(snapshot_id)
            if cached is not None:
                self._cache.move_to_end(snapshot_id)
                return cached
        row = (
            self._connect()
            .execute("SELECT data FROM snapshots WHERE id=?", (snapshot_id,))
            .fetchone()
        )
        if row is None:
            raise UserError(f"snapshot {snapshot_id!r} was deleted; {self._known_hint()}")
        graph = native.loads(zlib.decompress(row[0]), origin=f"snapshot {snapshot_id}")
        with self._cache_lock:
            self._cache[snapshot_id] = graph
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return graph

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
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM reports WHERE snapshot_id=?", (snapshot_id,))
            db.execute("DELETE FROM snapshots WHERE id=?", (snapshot_id,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._forget(snapshot_id)
        return snapshot_id

    def _forget(self, snapshot_id: str) -> None:
        with self._cache_lock:
            self._cache.pop(snapshot_id, None)

    # ------------------------------------------------------------------ reports

    def put_report(self, snapshot_id: str, skill: str, data: dict[str, Any], markdown: str) -> str:
        snapshot_id = self.resolve(snapshot_id)
        blob = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            report_id = self._new_id(db, "reports", "r")
            db.execute(
                "INSERT INTO reports VALUES (?,?,?,?,?,?)",
                (report_id, snapshot_id, skill, time.time(), blob, markdown),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return report_id

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
        return StoredReport(row[0], row[1], row[2], row[3], orjson.loads(row[4]), row[5])

    def list_reports(self, snapshot_id: str | None = None) -> list[StoredReport]:
        db = self._connect()
        query = "SELECT id,snapshot_id,skill,created FROM reports"
        params: tuple = ()
        if snapshot_id is not None:
            query += " WHERE snapshot_id=?"
            params = (self.resolve(snapshot_id),)
        rows = db.execute(query + " ORDER BY created DESC, rowid DESC", params).fetchall()
        return [StoredReport(r[0], r[1], r[2], r[3], {}, "") for r in rows]


_INFO_COLUMNS = "id, created, label, origin, hosts, nodes, edges, size"


def _info(row: tuple) -> SnapshotInfo:
    return SnapshotInfo(
        row[0], row[1], row[2], row[3], orjson.loads(row[4]), row[5], row[6], row[7]
    )


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
