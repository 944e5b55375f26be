"""Numbers the environment sets (``WP_MCP_MAX_FILE_MB``, ``WP_MCP_KEEP``): read and bounded
in one place, so a mistyped value is one line naming the variable, never a traceback at
import that breaks every command."""

from __future__ import annotations

import math
import os

from .errors import UserError
from .safetext import excerpt


def env_number(
    name: str, default: float, *, minimum: float, maximum: float, integer: bool = False
) -> float:
    """``$name`` as a finite number within [minimum, maximum] (a whole one when ``integer``),
    ``default`` when unset or empty; anything else raises a one-line ``UserError``."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not minimum <= value <= maximum:
        kind = "a whole number" if integer else "a number"
        raise UserError(f"${name}: {excerpt(text)} is not {kind} from {minimum:,} to {maximum:,}")
    return value


def env_number_or_default(
    name: str, default: float, *, minimum: float, maximum: float, integer: bool = False
) -> float:
    """As :func:`env_number`, for a module constant read at import: a bad value gives the
    default there, and the reader that uses it calls :func:`env_number` to say why."""
    try:
        return env_number(name, default, minimum=minimum, maximum=maximum, integer=integer)
    except UserError:
        return default
