"""Page rows: pages the converters rendered for a snapshot, one row per page.

The store keeps them and knows nothing of what they hold: a page is a blob under its key
(view, format, budget, the cursor that asks for it; '' for the first), and each chain of
pages (view, format, budget) has a row saying how far it is stored, so that a build resumes
there. converters/pages.py builds the pages and their keys; converters/show_path.py reads
one row for a fresh `wp-mcp show`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .database import Database

PageKey = tuple[str, str, int, str]  # (view, format, budget, cursor)
ChainKey = tuple[str, str, int]  # (view, format, budget)
# (pages stored, the cursor of the next one; None once the chain is complete)
ChainProgress = tuple[int, str | None]


class PageRows:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._has_table: bool | None = None

    def read(self, snapshot_id: str, key: PageKey) -> bytes | None:
        """The page stored under ``key``, or None."""
        if not self._has_pages():
            return None
        query = (
            "SELECT data FROM pages WHERE snapshot_id=? AND view=? AND fmt=? AND budget=? "
            "AND cursor=?"
        )
        with self._db.errors("cannot read the page"):
            row = self._db.connect().execute(query, (snapshot_id, *key)).fetchone()
        return bytes(row[0]) if row else None

    def progress(self, snapshot_id: str) -> dict[ChainKey, ChainProgress]:
        """How far each chain of the snapshot's pages is stored."""
        query = "SELECT view, fmt, budget, stored, next_cursor FROM page_sets WHERE snapshot_id=?"
        rows = self._db.connect().execute(query, (snapshot_id,))
        return {(view, fmt, budget): (stored, after) for view, fmt, budget, stored, after in rows}

    def write(
        self,
        snapshot_id: str,
        chain: ChainKey,
        pages: Sequence[tuple[str, bytes]],
        progress: ChainProgress,
    ) -> bool:
        """Store ``pages`` (the cursor asking for each, its blob) of one chain and how far
        the chain now is, in one transaction; False once the snapshot is gone (deleted, or
        dropped by retention, while its pages were being rendered)."""
        rows = [(snapshot_id, *chain, cursor, blob) for cursor, blob in pages]
        with self._db.transaction("cannot store the pages") as db:
            if db.execute("SELECT 1 FROM snapshots WHERE id=?", (snapshot_id,)).fetchone() is None:
                return False
            db.executemany("INSERT OR REPLACE INTO pages VALUES (?,?,?,?,?,?)", rows)
            db.execute(
                "INSERT OR REPLACE INTO page_sets VALUES (?,?,?,?,?,?)",
                (snapshot_id, *chain, *progress),
            )
        return True

    def _has_pages(self) -> bool:
        if self._has_table is None:  # a read-only store made before pages: never has them
            self._has_table = self._db.has_table("pages")
        return self._has_table
