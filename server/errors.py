"""Errors a user (or a model) can act on: one line, no traceback."""

from wp_mcp.graph.errors import FormatError, UserError

__all__ = ["FormatError", "UserError"]
