"""The snapshot store: SQLite in WAL mode under the user's data directory.

It stores and fetches rows and knows nothing of what the converters make of a graph:

- ``snapshots.py``: ``Store``: snapshots (the graph, validated once when stored), their
  reports, monitor events, the baseline, and the parsed graphs kept in memory;
- ``database.py``: the database file, its schema, connections, transactions, errors;
- ``pages.py``: rendered pages under the key converters/pages.py gives them (``Store.pages``);
- ``index.py``: a snapshot's node index, written and searched (``Store.index``);
- ``retention.py``: which snapshots go, and deleting one with what derives from it.
"""

from ..location import DB_NAME, default_store_path
from .index import NODE_INDEX_FORMAT, EdgeRow, NodeRow
from .pages import PageKey
from .retention import Tiers, thinned
from .snapshots import (
    BASELINE_KEY,
    DEFAULT_KEEP,
    MAX_EVENTS,
    MAX_KEEP,
    MAX_REF_CHARS,
    SnapshotInfo,
    Store,
    StoredReport,
    env_keep,
)

__all__ = [
    "BASELINE_KEY",
    "DB_NAME",
    "DEFAULT_KEEP",
    "MAX_EVENTS",
    "MAX_KEEP",
    "MAX_REF_CHARS",
    "NODE_INDEX_FORMAT",
    "EdgeRow",
    "NodeRow",
    "PageKey",
    "SnapshotInfo",
    "Store",
    "StoredReport",
    "Tiers",
    "default_store_path",
    "env_keep",
    "thinned",
]
