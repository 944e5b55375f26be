"""wp_events: the events `wp-mcp monitor` stores (findings appeared, resolved or escalated,
metric regressions against the baseline), oldest first, a page at a time."""

from __future__ import annotations

import time
from typing import Annotated, Any

from mcp.types import CallToolResult
from pydantic import Field
from wp_mcp.graph.safetext import escape

from ..state import ServerState
from . import READ_ONLY, result, tool

MAX_EVENTS_PER_CALL = 200
EVENTS_TOKENS = 3900  # a wp_events answer stays within the 4,000-token page budget


@tool(
    name="wp_events",
    title="Monitor events",
    annotations=READ_ONLY,
    description="Monitor events since a cursor (findings appeared/resolved/escalated, "
    "metric regressions vs the baseline), oldest first; pass next_cursor to continue.",
)
def wp_events(
    state: ServerState,
    cursor: Annotated[int, Field(ge=0, description="seq of the last event seen; 0: all")] = 0,
    limit: Annotated[int, Field(ge=1, le=MAX_EVENTS_PER_CALL)] = 50,
) -> CallToolResult:
    from wp_mcp.converters.tokens import take_lines

    events = state.store.events_since(cursor, limit)
    lines = take_lines([event_text(event) for event in events], 0, EVENTS_TOKENS)
    shown = events[: len(lines)]  # what the budget let in: the next call resumes after it
    next_cursor = shown[-1]["seq"] if shown else cursor
    if not events:
        text = f"no events after #{cursor} (`wp-mcp monitor` writes them)"
    else:
        more = (
            f"\n(more: call wp_events with cursor={next_cursor})"
            if len(shown) < len(events)
            else ""
        )
        text = "\n".join(lines) + more
    return result(text, count=len(shown), next_cursor=next_cursor)


def event_text(event: dict[str, Any]) -> str:
    """One event as one line: seq, kind, then its fields (host strings escaped)."""
    fields = " ".join(
        f"{key}={event[key]}"
        for key in ("priority", "rule", "subject", "metric", "value", "baseline", "snapshot")
        if event.get(key) is not None
    )
    title = f" — {event['title']}" if event.get("title") else ""
    stamp = time.strftime("%H:%M:%S", time.gmtime(event.get("time", 0)))
    return escape(f"#{event['seq']} {stamp} {event['kind']} {fields}{title}", 400, "line")
