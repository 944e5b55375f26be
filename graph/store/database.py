"""The store's SQLite database: its files, its schema, a connection per thread, transactions.

The directory is created 0700 and the database 0600 (SQLite gives its -wal and -shm files
the database's mode): snapshots hold command lines and host details. A store that cannot be
written (a read-only mount, another user's files) is opened read-only, and only a write says
so. SQLite's errors become one line that names the cause: "no space left on device", not
"disk I/O error".

A writable store keeps a small reserve file beside its database. SQLite needs room even to
open a WAL database (its -shm file) and to delete (the WAL), so on a disk that filled up the
store gives the reserve back first: it can still be opened, listed and told to delete
snapshots, whose pages its next writes reuse. The reserve is made again once there is room.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError
from ..location import DB_NAME
from ..outfile import describe_os_error, shown

# Below this much free space an I/O error is the disk being full: SQLite reports a full
# disk met while mapping its shared-memory file as "disk I/O error".
_NEARLY_FULL_BYTES = 1 << 20
_WAL_LIMIT_BYTES = 4 << 20
RESERVE_NAME = "reserve"
_RESERVE_BYTES = 512 << 10  # an -shm file (32 KiB) and the WAL of a delete, with room to spare

SCHEMA = (
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
    # pages the converters rendered for a snapshot (converters/pages.py), one row per page:
    # the cursor that asks for it ('' for the first) is part of the key, so a read fetches
    # that one row and nothing else (converters/show_path.py reads it so)
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
    # the node index before format 2: kept so that a store written then deletes those rows
    # with their snapshot; a current index lives in per-snapshot tables (store/index.py),
    # which a deleted snapshot drops whole
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
# Columns added after the first release: (table, column, declaration), added where missing.
_ADDED_COLUMNS = (("snapshots", "content_sha256", "TEXT"), ("node_sets", "format", "INTEGER"))
_ADDED_INDEXES = ("CREATE INDEX IF NOT EXISTS snapshots_by_content ON snapshots(content_sha256)",)


class Database:
    """The store's database file in ``directory``: one connection per thread (sqlite3
    connections must not cross threads), write transactions, errors as one line."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.file = directory / DB_NAME
        self.read_only = not _prepare_files(directory, self.file)
        self.reserve = directory / RESERVE_NAME
        self._local = threading.local()
        db = self.connect()  # an unusable store is said now, not at the first read
        if not self.read_only and not _schema_is_current(db):
            with self.transaction("cannot open the store") as db:
                _create_schema(db)
        if not self.read_only:
            self.keep_reserve()

    def connect(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            with self.errors("cannot open the store"):
                db = self._open_read_only() if self.read_only else self._open_with_room()
            self._local.db = db
        return db

    def _open_with_room(self) -> sqlite3.Connection:
        try:
            return self._open_writable()
        except sqlite3.Error as exc:
            if not (self._is_full(exc) and self.give_back_reserve()):
                raise
            return self._open_writable()  # the reserve's room holds the -shm file

    def keep_reserve(self) -> None:
        """Make the reserve where it is missing and there is room for it (else later)."""
        if self.reserve.exists():
            return
        try:
            fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(bytes(_RESERVE_BYTES))
        except OSError:  # no room for it yet: none rather than a part
            self.reserve.unlink(missing_ok=True)

    def give_back_reserve(self) -> bool:
        """Free the reserve's room for the store's own use; whether there was one."""
        try:
            self.reserve.unlink()
        except OSError:
            return False
        return True

    def make_room_to_free(self) -> None:
        """Before a write that frees space (a delete): on a disk nearly full, the reserve."""
        if not self.read_only and self._nearly_full():
            self.give_back_reserve()

    def _open_writable(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.file, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        # a checkpoint cut short by a reader lets the WAL grow past its usual ~4 MiB; trim it
        # back once it is reused, so a long-running monitor's store stays bounded
        db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT_BYTES}")
        return db

    def _open_read_only(self) -> sqlite3.Connection:
        if not self.file.exists():
            raise UserError(
                f"the store {shown(self.directory)} is read-only and holds no snapshots yet"
            )
        uri = self.file.absolute().as_uri() + "?mode=ro"
        try:
            return _open_uri(uri)
        except sqlite3.OperationalError as exc:
            # Reading a WAL database needs a -shm file, which a read-only directory cannot
            # get. With no -wal either, the database file is all there is: read it as such.
            if getattr(exc, "sqlite_errorname", "") != "SQLITE_CANTOPEN" or _has_wal(self.file):
                raise
            return _open_uri(uri + "&immutable=1")

    @contextlib.contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        """SQLite's errors as one line that names the cause and the store."""
        try:
            yield
        except sqlite3.Error as exc:
            raise UserError(f"{doing}: {self._cause(exc)}") from None

    def _is_full(self, exc: sqlite3.Error) -> bool:
        name = getattr(exc, "sqlite_errorname", "")
        return name == "SQLITE_FULL" or (name.startswith("SQLITE_IOERR") and self._nearly_full())

    def _cause(self, exc: sqlite3.Error) -> str:
        name = getattr(exc, "sqlite_errorname", "")
        if self._is_full(exc):
            return f"no space left on device ({shown(self.directory)})"
        if name.startswith("SQLITE_READONLY"):
            return f"the store is read-only ({shown(self.directory)})"
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            return f"the store {shown(self.file)} is not usable: {exc}"
        return f"{exc} ({shown(self.directory)})"

    def _nearly_full(self) -> bool:
        try:
            fs = os.statvfs(self.directory)
        except OSError:
            return False
        return fs.f_bavail * fs.f_frsize < _NEARLY_FULL_BYTES

    def check_writable(self, doing: str) -> None:
        """A read-only store is said in one line before anything is attempted."""
        if self.read_only:
            raise UserError(f"{doing}: the store is read-only ({shown(self.directory)})")

    @contextlib.contextmanager
    def transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; any failure rolls it back and is said in one line."""
        self.check_writable(doing)
        db = self.connect()
        with self.errors(doing):
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

    def has_table(self, table: str) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?"
        return self.connect().execute(query, (table,)).fetchone() is not None

    def columns(self, table: str) -> set[str]:
        return _columns(self.connect(), table)


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
    for statement in SCHEMA:
        db.execute(statement)
    for table, column, declaration in _ADDED_COLUMNS:
        if column not in _columns(db, table):
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    for statement in _ADDED_INDEXES:
        db.execute(statement)
