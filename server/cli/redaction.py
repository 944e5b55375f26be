"""What the config file sets for every command of a process: its redaction patterns.

They are added to the built-in rules (``graph/redact.py``) before anything is collected or
imported. Only the file sets them (no flag or variable does), so without one the built-in
rules apply alone, and the config's model (pydantic) is not loaded.
"""

from __future__ import annotations

from typing import Any

from ..config_file import find_config


def apply_process_wide(args: Any) -> None:
    """Set the config file's redaction patterns (none without a file) for this process."""
    from wp_mcp.graph.redact import set_user_patterns

    if find_config(getattr(args, "config", None)) is None:
        set_user_patterns([])
        return
    from ..config import from_args

    set_user_patterns(from_args(args).config.redaction.patterns)
