"""Where the config file is, found without loading the config's model: validating a file
needs pydantic (``config.py``), a command that finds no file pays nothing for it (a stored
page is served in tens of milliseconds).

The search order is the one ``config.py`` documents: ``--config FILE``, ``$WP_MCP_CONFIG``,
``$XDG_CONFIG_HOME/wp-mcp/config.toml`` (default ``~/.config/wp-mcp/config.toml``), then
``/etc/wp-mcp/config.toml``.
"""

from __future__ import annotations

import os
from pathlib import Path

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.outfile import shown

CONFIG_ENV = "WP_MCP_CONFIG"


def search_path() -> list[Path]:
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [Path(config_home) / "wp-mcp" / "config.toml", Path("/etc/wp-mcp/config.toml")]


def find_config(explicit: str | None) -> Path | None:
    """The file to read: --config, then $WP_MCP_CONFIG (both must exist), then the search path."""
    for given, origin in ((explicit, "--config"), (os.environ.get(CONFIG_ENV), CONFIG_ENV)):
        if given:
            path = Path(given).expanduser()
            if not _is_file(path):
                raise UserError(f"{origin}: no config file {shown(path)}")
            return path
    return next((path for path in search_path() if _is_file(path)), None)


def _is_file(path: Path) -> bool:
    """pathlib's ``is_file``, False (not a traceback) for a name over 255 bytes."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False
