"""The snapshot store: snapshots, their reports, monitor events and the baseline.

Snapshots are immutable once stored: the graph in native form (compressed, graph/trusted.py)
plus the metadata the listing shows. Reports produced by skills are stored beside the
snapshot they were computed from. Every write is one transaction, so a process killed
mid-write leaves every earlier snapshot readable; WAL lets readers run while a writer writes
(store/database.py has the files, the schema and the errors).

Beside each snapshot the store keeps rows the converters make from it, and hands them back
by key: its pages (``Store.pages``, store/pages.py) and its node index (``Store.index``,
store/index.py). It never renders or parses them.
"""

from __future__ import annotations

import builtins  # Store.list hides the builtin in the annotations of the methods after it
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from .. import native, trusted
from ..errors import UserError
from ..gcpause import release_frozen
from ..graph import Graph
from ..location import store_directory
from ..membudget import graph_cache_bytes
from ..safetext import excerpt
from ..settings import env_number
from ..singleflight import SingleFlight
from .database import Database
from .index import NodeIndex
from .pages import PageRows
from .retention import Tiers, delete_snapshot, thinned

DEFAULT_KEEP = 50  # snapshots kept; the oldest go first (their reports with them)
MAX_KEEP = 1_000_000


def env_keep() -> float:
    """``$WP_MCP_KEEP``, bounded (a bad value is one line naming it)."""
    return env_number("WP_MCP_KEEP", DEFAULT_KEEP, minimum=0, maximum=MAX_KEEP, integer=True)


# Graphs kept parsed in memory (views of one snapshot must not re-read it), bounded by what
# they weigh: ~1.2 KB per node or edge once parsed and indexed (a 640-host cluster graph,
# 1.6M of them, holds ~1.9 GB), so one such graph fits and a second evicts the oldest.
# The budget is also at most a quarter of the memory this process may use (membudget.py).
CACHE_BYTES = graph_cache_bytes(os.environ.get("WP_MCP_GRAPH_CACHE_MB"))
_BYTES_PER_ELEMENT = 1200
MAX_EVENTS = 10_000  # events kept; the oldest go first
BASELINE_KEY = "baseline"
_INFO_COLUMNS = "id, created, label, origin, hosts, nodes, edges, size"
_REPORT_COLUMNS = "id, snapshot_id, skill, created, data, markdown"


class SnapshotInfo(NamedTuple):  # a row of the listing
    id: str
    created: float
    label: str | None
    origin: str | None
    hosts: list[str]
    nodes: int
    edges: int
    size: int  # stored bytes (compressed)


class StoredReport(NamedTuple):
    id: str
    snapshot_id: str
    skill: str
    created: float
    data: dict[str, Any]
    markdown: str


class Store:
    def __init__(self, path: str | Path | None = None, keep: int | None = None) -> None:
        self.path = store_directory(path)
        self.keep = keep if keep is not None else int(env_keep())
        self.db = Database(self.path)
        self.db_path = self.db.file
        self.read_only = self.db.read_only
        self.pages = PageRows(self.db)
        self.index = NodeIndex(self.db)
        self._cache: OrderedDict[str, tuple[Graph, int]] = OrderedDict()
        self._cache_bytes = 0
        self._cache_lock = threading.Lock()
        self._loads = SingleFlight()

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ snapshots

    def put(self, graph: Graph, label: str | None = None, *, reuse_same: bool = False) -> str:
        """Store a graph; returns its snapshot id. Its pages and node index are built later
        (converters/pages.py, converters/stored.py), when first asked for.

        With ``reuse_same``, a graph whose content is already stored is not stored again:
        the id of the newest snapshot with that content is returned (running a skill on
        one file again and again must not push real snapshots out of retention).
        """
        document = native.dumps(graph)
        content = hashlib.sha256(document).hexdigest()
        with self.db.transaction("cannot store the snapshot") as db:
            same = None
            if reuse_same:
                same = db.execute(
                    "SELECT id FROM snapshots WHERE content_sha256=? "
                    "ORDER BY created DESC, rowid DESC LIMIT 1",
                    (content,),
                ).fetchone()
            if same is not None:
                return str(same[0])
            snapshot_id = self._insert_snapshot(db, graph, label, document, content)
            self._apply_retention(db)
        return snapshot_id

    def put_cycle(
        self,
        graph: Graph,
        label: str,
        report: tuple[str, dict[str, Any], str],
        events: list[dict[str, Any]],
        tiers: Tiers = (),
    ) -> tuple[str, str]:
        """One monitor cycle in one transaction: the snapshot, its report (skill, data,
        markdown) and its events (each gets ``snapshot`` and ``seq``), then retention —
        the count limit and, for snapshots with this label, the down-sampling ``tiers``.
        A process killed at any point leaves all of it or none; its pages are built when
        first asked for. Returns (snapshot, report)."""
        document = native.dumps(graph)
        content = hashlib.sha256(document).hexdigest()
        with self.db.transaction("cannot store the monitor cycle") as db:
            snapshot_id = self._insert_snapshot(db, graph, label, document, content)
            report_id = self._insert_report(db, snapshot_id, *report)
            for event in events:
                event["snapshot"] = snapshot_id
                event["seq"] = self._insert_event(db, event)
            self._thin(db, label, tiers, time.time())
            self._apply_retention(db)
        return snapshot_id, report_id

    def _insert_snapshot(
        self, db: sqlite3.Connection, graph: Graph, label: str | None, document: bytes,
        content: str,
    ) -> str:  # fmt: skip
        snapshot_id = _new_id(db, "snapshots", "s")
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
        """Down-sample the snapshots with ``label``: see :func:`~.retention.thinned`."""
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
            delete_snapshot(db, snapshot_id)
            self._forget(snapshot_id)

    def resolve(self, ref: str) -> str:
        """A full snapshot id from an id, a unique prefix, or 'latest'."""
        db = self.db.connect()
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
            (ref, like_prefix(ref)),
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

    def check_writable(self, doing: str) -> None:
        """Refuse now what a write would refuse later: a collection says a read-only store
        before its window, not after it."""
        self.db.check_writable(doing)

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
        query = "SELECT data, nodes, edges FROM snapshots WHERE id=?"
        row = self.db.connect().execute(query, (snapshot_id,)).fetchone()
        if row is None:
            raise UserError(f"snapshot {snapshot_id!r} was deleted; {self._known_hint()}")
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
            while self._cache_bytes > CACHE_BYTES and len(self._cache) > 1:
                self._cache_bytes -= self._cache.popitem(last=False)[1][1]  # no name holds it
                evicted = True
        if evicted:
            release_frozen()  # a graph read frozen is freed now, caches pointing back or not

    def info(self, ref: str) -> SnapshotInfo:
        snapshot_id = self.resolve(ref)
        query = f"SELECT {_INFO_COLUMNS} FROM snapshots WHERE id=?"
        return _info(self.db.connect().execute(query, (snapshot_id,)).fetchone())

    def list(self, limit: int | None = None) -> list[SnapshotInfo]:
        query = f"SELECT {_INFO_COLUMNS} FROM snapshots ORDER BY created DESC, rowid DESC LIMIT ?"
        rows = self.db.connect().execute(query, (limit if limit is not None else -1,))
        return [_info(row) for row in rows]

    def delete(self, ref: str) -> str:
        snapshot_id = self.resolve(ref)
        self.db.make_room_to_free()  # a full disk can still delete: the store frees its space
        with self.db.transaction("cannot delete the snapshot") as db:
            delete_snapshot(db, snapshot_id)
            db.execute("DELETE FROM settings WHERE key=? AND value=?", (BASELINE_KEY, snapshot_id))
        self._forget(snapshot_id)
        return snapshot_id

    def _forget(self, snapshot_id: str) -> None:
        with self._cache_lock:
            weight = self._cache.pop(snapshot_id, (None, 0))[1]  # no name holds the graph
            self._cache_bytes -= weight
        if weight:
            release_frozen()

    # ------------------------------------------------------------------ reports

    def put_report(self, snapshot_id: str, skill: str, data: dict[str, Any], markdown: str) -> str:
        snapshot_id = self.resolve(snapshot_id)
        with self.db.transaction("cannot store the report") as db:
            return self._insert_report(db, snapshot_id, skill, data, markdown)

    def _insert_report(
        self, db: sqlite3.Connection, snapshot_id: str, skill: str, data: dict[str, Any],
        markdown: str,
    ) -> str:  # fmt: skip
        blob = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
        report_id = _new_id(db, "reports", "r")
        db.execute(
            "INSERT INTO reports VALUES (?,?,?,?,?,?)",
            (report_id, snapshot_id, skill, time.time(), blob, markdown),
        )
        return report_id

    def latest_report_for_label(self, skill: str, label: str) -> StoredReport | None:
        """The newest report of ``skill`` on a snapshot labelled ``label`` (the last monitor
        cycle a restarted monitor compares with)."""
        columns = ", ".join(f"r.{column}" for column in _REPORT_COLUMNS.split(", "))
        row = (
            self.db.connect()
            .execute(
                f"SELECT {columns} FROM reports r JOIN snapshots s ON s.id = r.snapshot_id "
                "WHERE r.skill=? AND s.label=? ORDER BY r.created DESC, r.rowid DESC LIMIT 1",
                (skill, label),
            )
            .fetchone()
        )
        return None if row is None else _report(row)

    def get_report(self, ref: str) -> StoredReport:
        db = self.db.connect()
        if ref == "latest":
            row = db.execute(
                f"SELECT {_REPORT_COLUMNS} FROM reports ORDER BY created DESC, rowid DESC LIMIT 1"
            ).fetchone()
        else:
            rows = db.execute(
                f"SELECT {_REPORT_COLUMNS} FROM reports WHERE id=? OR id LIKE ? ESCAPE '\\' "
                "LIMIT 2",
                (ref, like_prefix(ref)),
            ).fetchall()
            exact = [r for r in rows if r[0] == ref]
            row = exact[0] if exact else (rows[0] if len(rows) == 1 else None)
        if row is None:
            recent = ", ".join(r.id for r in self.list_reports()[:5])
            hint = f"known reports: {recent}" if recent else "no reports yet: run a skill first"
            raise UserError(f"no report {excerpt(ref)}; {hint}")
        return _report(row)

    def list_reports(self, snapshot_id: str | None = None) -> builtins.list[StoredReport]:
        query = "SELECT id, snapshot_id, skill, created FROM reports"
        params: tuple[str, ...] = ()
        if snapshot_id is not None:
            query += " WHERE snapshot_id=?"
            params = (self.resolve(snapshot_id),)
        rows = self.db.connect().execute(query + " ORDER BY created DESC, rowid DESC", params)
        return [StoredReport(r[0], r[1], r[2], r[3], {}, "") for r in rows]

    # ------------------------------------------------------------------ baseline

    def set_baseline(self, ref: str) -> str:
        snapshot_id = self.resolve(ref)
        with self.db.transaction("cannot set the baseline") as db:
            db.execute(
                "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)",
                (BASELINE_KEY, snapshot_id),
            )
        return snapshot_id

    def baseline(self) -> str | None:
        """The baseline snapshot's id, or None when none is set."""
        if not self.db.has_table("settings"):  # a read-only store made before baselines
            return None
        return _setting(self.db.connect(), BASELINE_KEY)

    # ------------------------------------------------------------------ events

    def _insert_event(self, db: sqlite3.Connection, event: dict[str, Any]) -> int:
        cursor = db.execute(
            "INSERT INTO events (created, kind, data) VALUES (?,?,?)",
            (event.get("time", time.time()), event["kind"], orjson.dumps(event)),
        )
        seq = cursor.lastrowid
        assert seq is not None  # the INSERT above set it
        db.execute("DELETE FROM events WHERE seq <= ?", (seq - MAX_EVENTS,))
        return int(seq)

    def events_since(self, cursor: int = 0, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """Events with a sequence number above ``cursor``, oldest first, each with its
        ``seq`` (the next cursor is the last one's)."""
        if not self.db.has_table("events"):  # a read-only store made before monitoring
            return []
        query = "SELECT seq, data FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
        with self.db.errors("cannot read the events"):
            rows = self.db.connect().execute(query, (cursor, limit)).fetchall()
        return [{**orjson.loads(data), "seq": seq} for seq, data in rows]


def _new_id(db: sqlite3.Connection, table: str, prefix: str) -> str:
    while True:
        candidate = prefix + os.urandom(3).hex()  # as secrets.token_hex makes it
        if db.execute(f"SELECT 1 FROM {table} WHERE id=?", (candidate,)).fetchone() is None:
            return candidate


# Longer than any id the store makes (a few hex digits after a short prefix): a reference this
# long names nothing, and SQLite refuses a LIKE pattern of ~50,000 characters as too complex
MAX_REF_CHARS = 256


def like_prefix(text: str) -> str:
    """A LIKE pattern (with ESCAPE '\\') matching the strings that start with ``text``; one
    that matches none for a reference no id could start with (over ``MAX_REF_CHARS``)."""
    if len(text) > MAX_REF_CHARS:
        return ""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _setting(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
    return row[0] if row else None


def _info(row: tuple[Any, ...]) -> SnapshotInfo:
    return SnapshotInfo(row[0], row[1], row[2], row[3], json.loads(row[4]), *row[5:8])


def _report(row: tuple[Any, ...]) -> StoredReport:
    return StoredReport(row[0], row[1], row[2], row[3], orjson.loads(row[4]), row[5])
