"""The MCP tools, one module per topic, and what a tool is made of.

A tool is a function under ``@tool(...)`` in a module of this package: its first parameter
is the server's ``ServerState``, the others are the tool's arguments (their annotations are
its input schema; a ``ctx: Context`` parameter gets the request context, for progress). The
decorator registers it; :func:`load_tools`, which ``build_server`` calls, imports every
module here, so a new module is found without a list to edit (CONTRIBUTING.md shows one).

Tools call the same functions the CLI uses and return compact text in ``content`` plus a
small ``structuredContent`` (ids, counts, cursor; never a whole layer, since some clients show
the model only that): :func:`result`, :func:`page_result`. Anything a caller can fix is a
``UserError``, which comes back as a one-line tool error. Heavy modules are imported inside
the tools, so the server answers its first ``tools/list`` quickly.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from wp_mcp.graph.safetext import escape

DEFAULT_MAX_TOKENS = 4000  # mirror the converters' budgets (a test checks they agree)
HARD_MAX_TOKENS = 8000
MIN_MAX_TOKENS = 300

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
WRITES_STORE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

Snapshot = Annotated[
    str, Field(description="snapshot id, unique id prefix, or 'latest' (see wp_snapshots)")
]
MaxTokens = Annotated[
    int, Field(ge=MIN_MAX_TOKENS, le=HARD_MAX_TOKENS, description="token budget of the answer")
]
Cursor = Annotated[
    str | None, Field(description="next_cursor of the previous answer, for the next page")
]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    annotations: ToolAnnotations
    handler: Callable[..., Any]  # handler(state, **arguments), sync or async
    meta: dict[str, Any] | None = None


TOOLS: dict[str, ToolSpec] = {}  # by name, as each module registers them


def tool(
    *,
    name: str,
    title: str,
    description: str,
    annotations: ToolAnnotations,
    meta: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``handler(state, **arguments)`` as the MCP tool ``name``.

    The handler's parameters after ``state`` (and a ``ctx: Context`` one, which MCPServer
    fills in) are the tool's arguments: their annotations are its input schema, read at run
    time, so the types they name are imported at the top of the module.
    """

    def register(handler: Callable[..., Any]) -> Callable[..., Any]:
        if name in TOOLS:
            raise ValueError(f"tool {name!r} is registered twice")
        TOOLS[name] = ToolSpec(name, title, description, annotations, handler, meta)
        return handler

    return register


def load_tools() -> list[ToolSpec]:
    """Every tool of every module of this package, in the order ``tools/list`` gives them:
    by module name, then as each module defines them."""
    modules = sorted(found.name for found in pkgutil.iter_modules(__path__))
    for module in modules:
        importlib.import_module(f"{__name__}.{module}")
    order = {f"{__name__}.{module}": rank for rank, module in enumerate(modules)}
    return sorted(TOOLS.values(), key=lambda spec: order.get(spec.handler.__module__, -1))


def result(text: str, **structured: Any) -> CallToolResult:
    """``text`` as the answer's content; the keyword arguments that are not None as its
    ``structuredContent`` (ids, counts, cursors: small)."""
    small = {k: v for k, v in structured.items() if v is not None}
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=small or None
    )


def page_result(page: Any, snapshot_id: str, hint: str) -> CallToolResult:
    """A converters Page as a tool result; an empty page says what to try instead."""
    text = page.text
    if page.total_items == 0 and hint:
        text = f"{text}\n(hint: {hint})"
    return result(
        text,
        snapshot_id=snapshot_id,
        view=page.view,
        page=page.page,
        pages=page.pages,
        total_items=page.total_items,
        tokens=page.tokens,
        next_cursor=page.next_cursor,
    )


def one_line(value: Any) -> str:
    """A host-provided string on one line (labels and origins come from users and files)."""
    return "-" if value in (None, "") else escape(str(value))
