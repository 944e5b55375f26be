"""Where the snapshot store lives: ``$WP_MCP_STORE``, else ``$XDG_DATA_HOME/wp-mcp`` (by
default ``~/.local/share/wp-mcp``), and the name of its database file there.

Apart from the store itself because a stored page's fast read (converters/show_path.py)
finds the database file without loading the store.
"""

from __future__ import annotations

import os
from pathlib import Path

DB_NAME = "store.sqlite3"


def default_store_path() -> Path:
    explicit = os.environ.get("WP_MCP_STORE")
    if explicit:
        return Path(explicit).expanduser()
    return user_data_directory()


def user_data_directory() -> Path:
    """This user's wp-mcp folder, ``$XDG_DATA_HOME/wp-mcp`` (whatever store is in use)."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser() / "wp-mcp"


def store_directory(path: str | Path | None) -> Path:
    """The store's directory: ``path`` as given (``~`` expanded), else the default."""
    return Path(path).expanduser() if path else default_store_path()
