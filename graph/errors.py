"""Errors the caller can act on. Defined in the lowest stage so every later stage shares them."""

from __future__ import annotations


class UserError(Exception):
    """Something the caller can fix; the message says what and, where possible, how.

    The CLI prints it as one line with exit code 2; the MCP server returns it as a tool error.
    """


class FormatError(UserError):
    """A file that is not a valid graph of the format it claims (or of any format we read)."""
