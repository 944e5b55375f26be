"""What the server answers when a tool or a resource fails: one line the caller can act on.

A ``UserError`` from the shared functions is the caller's to fix: a tool error, or for a
resource "not found" (-32602), with its message as one bounded line. Anything else is a bug,
logged on stderr and reported briefly, so the model knows the server is still up.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import error_line

log = logging.getLogger(__name__)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Errors as tool results the model can act on.

    A UserError from the shared functions becomes its message as one bounded line (messages
    quote only excerpts of arguments; this is the guard for any that does not); anything else is a
    bug, reported briefly (details go to the log on stderr) so the model knows the server
    is still up.
    """

    def translate(exc: Exception) -> ToolError:
        if isinstance(exc, UserError):
            return ToolError(error_line(exc))
        log.exception("%s failed", fn.__name__)
        return ToolError(
            f"internal error in {fn.__name__} ({type(exc).__name__}); the server is still up: "
            "other calls work, and the server log on stderr has the details"
        )

    if inspect.iscoroutinefunction(fn):

        @wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except ToolError:
                raise
            except Exception as exc:
                raise translate(exc) from None

        return async_wrapper

    @wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ToolError:
            raise
        except Exception as exc:
            raise translate(exc) from None

    return sync_wrapper


def resource_errors(fn: Callable[..., str]) -> Callable[..., str]:
    """A resource reader whose UserError is the resource error "not found"."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:  # an unknown id or name: the caller's, -32602
            raise ResourceNotFoundError(error_line(exc)) from None

    return wrapper
