"""Numbers the environment and the command line set (``WP_MCP_MAX_FILE_MB``, ``WP_MCP_KEEP``,
``--limit``, ``--max-tokens``): read and bounded in one place, so a mistyped value is one line
naming the variable or the flag, never a traceback (at import, breaking every command, or
from SQLite, for an integer it cannot hold)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

from .errors import UserError
from .safetext import excerpt

MAX_COUNT = (1 << 31) - 1  # the largest count a flag takes (budgets, limits): SQLite holds it


def parse_number(text: str, *, minimum: float, maximum: float, integer: bool = False) -> float:
    """``text`` as a finite number within [minimum, maximum] (a whole one when ``integer``);
    ``ValueError`` saying what was expected otherwise (``1e23``, ``nan``, 20 digits)."""
    try:
        value: float | None = int(text) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not minimum <= value <= maximum:
        kind = "a whole number" if integer else "a number"
        raise ValueError(f"{excerpt(text)} is not {kind} from {minimum:,} to {maximum:,}")
    return value


def env_number(
    name: str, default: float, *, minimum: float, maximum: float, integer: bool = False
) -> float:
    """``$name`` as a finite number within [minimum, maximum] (a whole one when ``integer``),
    ``default`` when unset or empty; anything else raises a one-line ``UserError``."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return parse_number(text, minimum=minimum, maximum=maximum, integer=integer)
    except ValueError as exc:
        raise UserError(f"${name}: {exc}") from None


def env_number_or_default(
    name: str, default: float, *, minimum: float, maximum: float, integer: bool = False
) -> float:
    """As :func:`env_number`, for a module constant read at import: a bad value gives the
    default there, and the reader that uses it calls :func:`env_number` to say why."""
    try:
        return env_number(name, default, minimum=minimum, maximum=maximum, integer=integer)
    except UserError:
        return default


def cli_number(minimum: float, maximum: float, integer: bool = True) -> Callable[[str], float]:
    """An argparse ``type``: a command-line number within bounds, else argparse's one-line
    error naming the flag and the bounds (an unbounded ``int`` reached SQLite as an
    OverflowError)."""

    def number(text: str) -> float:
        try:
            return parse_number(text, minimum=minimum, maximum=maximum, integer=integer)
        except ValueError as exc:
            import argparse  # only on a mistake: the store's readers import this module

            raise argparse.ArgumentTypeError(str(exc)) from None

    number.__name__ = "whole number" if integer else "number"  # argparse names it so
    return number
